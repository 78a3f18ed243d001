#include "common/deploy/systemd_units.h"

#include <fmt/format.h>

#include <set>

#include "common/deploy/services.h"
#include "common/supervisor/cluster_credentials.h"
#include "common/supervisor/credentials.h"
#include "common/supervisor/redis_plan.h"

namespace h3pipe::deploy {
namespace fs = std::filesystem;
namespace {

std::string exec_line(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + unit_quote(a);
  return s;
}

bool under_home(const fs::path& p) {
  const std::string s = p.lexically_normal().string();
  for (const char* h : {"/home/", "/root/", "/run/user/"})
    if (s.rfind(h, 0) == 0 || s + "/" == h) return true;
  return false;
}

// The hardening every unit shares (docs/security.md); `gpu`: the unit may open the NVIDIA devices.
std::string hardening(const std::vector<fs::path>& writable, const std::vector<fs::path>& read,
                      bool gpu) {
  std::string s;
  s += "NoNewPrivileges=yes\n";
  s += "ProtectSystem=strict\n";
  std::set<std::string> seen;
  for (const auto& w : writable)
    if (!w.empty() && seen.insert(w.lexically_normal().string()).second)
      s += "ReadWritePaths=-" + unit_quote(w.lexically_normal().string()) + "\n";
  bool home = false;
  for (const auto& p : writable) home = home || under_home(p);
  for (const auto& p : read) home = home || under_home(p);
  // Files below /home or /root (a config or state dir there) stay reachable, read-only.
  s += home ? "ProtectHome=read-only\n" : "ProtectHome=yes\n";
  s += "PrivateTmp=yes\n";
  if (gpu) {
    // Not PrivateDevices: it hides /dev/nvidia* from CUDA.
    s += "DevicePolicy=closed\nDeviceAllow=char-nvidia* rw\n";
  } else {
    s += "PrivateDevices=yes\nMemoryDenyWriteExecute=yes\n";
  }
  s += "ProtectKernelTunables=yes\nProtectKernelModules=yes\nProtectKernelLogs=yes\n"
       "ProtectControlGroups=yes\nProtectClock=yes\nProtectHostname=yes\n"
       "ProtectProc=invisible\nProcSubset=pid\n"
       "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6\n"
       "RestrictNamespaces=yes\nRestrictRealtime=yes\nRestrictSUIDSGID=yes\n"
       "LockPersonality=yes\nRemoveIPC=yes\nKeyringMode=private\n"
       "SystemCallArchitectures=native\nSystemCallFilter=@system-service\n"
       "SystemCallErrorNumber=EPERM\n"
       "CapabilityBoundingSet=\nAmbientCapabilities=\nUMask=0077\n";
  return s;
}

std::string identity(const UnitOptions& o) {
  std::string s;
  if (!o.user.empty()) s += "User=" + o.user + "\n";
  if (!o.group.empty()) s += "Group=" + o.group + "\n";
  return s;
}

bool uses_gpus(const config::Cluster& c, const HostService& s) {
  return s.pool && !s.pool->gpus.empty() && c.runtime_for(*s.pool).name != "sim";
}

}  // namespace

std::string unit_quote(const std::string& w) {
  std::string e;
  for (char ch : w) {
    if (ch == '%')
      e += "%%";
    else if (ch == '$')
      e += "$$";
    else if (ch == '\\' || ch == '"')
      e += std::string("\\") + ch;
    else
      e += ch;
  }
  const bool plain = !w.empty() && w.find_first_of(" \t\"'\\;") == std::string::npos;
  return plain ? e : "\"" + e + "\"";
}

bool runs_shared_redis(const config::Cluster& c, const config::Host& h) {
  const config::Host* r = supervisor::redis_host(c);
  return r && r->name == h.name;
}

Result<std::vector<UnitFile>> render_units(const config::Cluster& c, const UnitOptions& o) {
  const config::Host* h = c.find_host(o.host);
  if (!h) return make_error(errc::config::kInvalid, "--host {}: not a host in the config", o.host);
  if (c.redis.embedded)
    return make_error(errc::config::kInvalid,
                      "/redis/embedded is true: the private Redis of `h3pipe start` gets a new "
                      "port and credentials at each start, which units cannot name; set "
                      "/redis/embedded false with /redis/host, /redis/port and "
                      "/redis/credentials_dir (docs/deploy.md, \"systemd\")");
  for (const auto& [what, p] : {std::pair{"--config", o.config_file}, {"--bin-dir", o.bin_dir}})
    if (!p.is_absolute())
      return make_error(errc::cli::kFlag, "{} {}: units need an absolute path", what, p.string());

  const fs::path state = fs::absolute(c.state_dir).lexically_normal();
  const std::vector<fs::path> writable = {state, fs::absolute(c.artifact_root).lexically_normal(),
                                          fs::absolute(c.output_root).lexically_normal()};
  std::vector<fs::path> read = {o.config_file, o.bin_dir};
  if (!c.redis.credentials_dir.empty()) read.push_back(c.redis.credentials_dir);
  if (!c.redis.password_file.empty()) read.push_back(c.redis.password_file);
  read.push_back(h->transfer_secret_key_file);

  // The shared Redis as `h3pipe start` runs it (supervisor/redis_plan.h): on the Redis host
  // redis-server on its Unix socket (TCP on bind:port only with allow_plaintext) and, with TLS, an
  // stunnel server on bind:port; on every other host an stunnel client on tunnel.sock.  The files
  // they read (the ACL from the credentials, the stunnel config) are written before each start
  // by `h3pipe systemd prepare`, on the host, where the credentials are.
  const bool redis_here = runs_shared_redis(c, *h);
  const bool tls = supervisor::redis_tls(c);
  const bool tunnel = !redis_here && c.redis.managed && tls;
  const fs::path redis_dir = state / "redis";
  std::vector<UnitFile> units;
  std::vector<std::string> wants, infra;
  const std::vector<std::string> prepare = {
      (o.bin_dir / "h3pipe").string(), "systemd", "prepare", "--host", h->name, "--config",
      o.config_file.string()};
  const auto infra_unit = [&](const std::string& name, const std::string& what,
                              const std::string& type, const std::vector<std::string>& argv) {
    std::string t;
    t += "# Generated by `h3pipe systemd units --host " + h->name +
         "`; edit the config, not this.\n";
    t += "[Unit]\nDescription=h3pipe " + what + " on " + h->name + "\n";
    t += "Wants=network-online.target\nAfter=network-online.target";
    for (const auto& i : infra) t += " " + i;
    t += std::string("\nPartOf=") + kTargetUnit + "\n\n[Service]\nType=" + type + "\n";
    if (type == "notify") t += "NotifyAccess=main\n";
    t += identity(o);
    t += "ExecStartPre=" + exec_line(prepare) + "\n";
    t += "ExecStart=" + exec_line(argv) + "\n";
    t += "Restart=on-failure\nRestartSec=2s\nTimeoutStartSec=" + o.start_timeout + "\n";
    t += "TimeoutStopSec=60s\nLimitNOFILE=65536\n";
    // The Redis host's prepare makes redis-admin.password in the credentials on first start.
    std::vector<fs::path> rw = {redis_dir};
    if (redis_here) rw.push_back(fs::absolute(c.redis.credentials_dir).lexically_normal());
    t += hardening(rw, read, false);
    t += std::string("\n[Install]\nWantedBy=") + kTargetUnit + "\n";
    units.push_back({name, t});
    wants.push_back(name);
    infra.push_back(name);
  };
  if (redis_here) {
    if (c.redis.credentials_dir.empty() || c.redis.port <= 0)
      return make_error(errc::config::kInvalid,
                        "host {} runs the shared Redis (/redis/managed, /redis/host {}): its unit "
                        "needs /redis/port and /redis/credentials_dir",
                        h->name, c.redis.host);
    const std::string bind = h->bind.empty() ? h->address : h->bind;
    // AOF everysec, the ACL users, default off, no RDB snapshots; READY=1 by --supervised systemd.
    infra_unit("h3pipe-redis.service", "shared Redis", "notify", [&] {
      auto argv = supervisor::redis_server_argv(o.redis_server, tls ? 0 : c.redis.port,
                                                tls ? "127.0.0.1" : bind, redis_dir / "redis.sock",
                                                redis_dir);
      argv.insert(argv.end(), {"--supervised", "systemd"});
      return argv;
    }());
  }
  if ((redis_here && tls) || tunnel) {
    const std::string conf = redis_here ? "stunnel-server.conf" : "stunnel-client.conf";
    infra_unit("h3pipe-redis-tls.service",
               redis_here ? "TLS server of the shared Redis" : "TLS client to the shared Redis",
               "simple", {o.stunnel, (redis_dir / conf).string()});
  }
  // This host's services reach Redis on its socket (the Redis host) or the tunnel's.
  const std::string redis_flag = redis_here ? (redis_dir / "redis.sock").string()
                                 : tunnel   ? (redis_dir / "tunnel.sock").string()
                                            : "";
  for (const HostService& s : services_on(c, *h)) {
    std::vector<std::string> argv = {(o.bin_dir / ("h3pipe-" + s.service)).string(), "--config",
                                     o.config_file.string(), "--host", h->name};
    if (!redis_flag.empty()) argv.insert(argv.end(), {"--redis", redis_flag});
    if (s.pool) argv.insert(argv.end(), {"--pool", s.pool->name});
    const bool gpu = uses_gpus(c, s);
    std::string t;
    t += "# Generated by `h3pipe systemd units --host " + h->name +
         "`; edit the config, not this.\n";
    t += "[Unit]\nDescription=h3pipe " + s.service + " " + s.instance + " on " + h->name + "\n";
    t += "Wants=network-online.target\nAfter=network-online.target";
    for (const auto& i : infra) t += " " + i;
    t += std::string("\nPartOf=") + kTargetUnit + "\n\n[Service]\n";
    // READY=1 once /readyz answers 200 (common/runner/sd_notify.h).
    t += "Type=notify\nNotifyAccess=main\n";
    t += identity(o);
    if (!c.redis.credentials_dir.empty()) {
      const auto u = supervisor::user_for(fs::absolute(c.redis.credentials_dir), s.service);
      t += "Environment=" + unit_quote("H3PIPE_REDIS_USER=" + u.user) + "\n";
      t += "Environment=" + unit_quote("H3PIPE_REDIS_PASSWORD_FILE=" + u.password_file.string()) +
           "\n";
    }
    t += "ExecStart=" + exec_line(argv) + "\n";
    t += "Restart=on-failure\nRestartSec=2s\nTimeoutStartSec=" + o.start_timeout + "\n";
    // A stage drains its task on SIGTERM (the runner's graceful stop) before systemd kills it.
    t += "TimeoutStopSec=120s\nKillMode=mixed\n";
    t += hardening(writable, read, gpu);
    t += std::string("\n[Install]\nWantedBy=") + kTargetUnit + "\n";
    const std::string name = "h3pipe-" + s.name() + ".service";
    units.push_back({name, t});
    wants.push_back(name);
  }
  std::string t;
  t += "# Generated by `h3pipe systemd units --host " + h->name + "`; edit the config, not this.\n";
  t += "[Unit]\nDescription=h3pipe services of host " + h->name + "\n";
  std::string w;
  for (const auto& u : wants) w += (w.empty() ? "" : " ") + u;
  if (!w.empty()) t += "Wants=" + w + "\n";
  t += "\n[Install]\nWantedBy=multi-user.target\n";
  units.push_back({kTargetUnit, t});
  return units;
}

}  // namespace h3pipe::deploy
