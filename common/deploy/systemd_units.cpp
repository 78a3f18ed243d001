#include "common/deploy/systemd_units.h"

#include <fmt/format.h>

#include <set>

#include "common/deploy/services.h"
#include "common/supervisor/credentials.h"

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
    if (ch == '%') e += "%%";
    else if (ch == '$') e += "$$";
    else if (ch == '\\' || ch == '"') e += std::string("\\") + ch;
    else e += ch;
  }
  const bool plain = !w.empty() && w.find_first_of(" \t\"'\\;") == std::string::npos;
  return plain ? e : "\"" + e + "\"";
}

bool runs_shared_redis(const config::Cluster& c, const config::Host& h) {
  return !c.redis.embedded && (c.redis.host == h.name || c.redis.host == h.address);
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

  const std::vector<fs::path> writable = {c.state_dir, c.artifact_root, c.output_root};
  std::vector<fs::path> read = {o.config_file, o.bin_dir};
  if (!c.redis.credentials_dir.empty()) read.push_back(c.redis.credentials_dir);
  if (!c.redis.password_file.empty()) read.push_back(c.redis.password_file);
  read.push_back(h->transfer_secret_key_file);

  const bool redis_here = runs_shared_redis(c, *h);
  std::vector<UnitFile> units;
  std::vector<std::string> wants;
  if (redis_here) {
    if (c.redis.credentials_dir.empty() || c.redis.port <= 0)
      return make_error(errc::config::kInvalid,
                        "host {} runs the shared Redis (/redis/host {}): its unit needs "
                        "/redis/port and /redis/credentials_dir (the passwords of "
                        "configs/redis/users.acl's users)",
                        h->name, c.redis.host);
    const fs::path dir = c.state_dir / "redis";
    const std::string bind = h->bind.empty() ? h->address : h->bind;
    // The ACL file rendered from the credentials before each start (a rotated password takes
    // effect on restart), then redis-server as `h3pipe start` runs it: AOF everysec, the ACL
    // users, default off, no RDB snapshots; sd_notify through --supervised systemd.
    const std::vector<std::string> pre = {(o.bin_dir / "h3pipe").string(), "systemd", "redis-acl",
                                          "--config", o.config_file.string()};
    const std::vector<std::string> argv = {o.redis_server, "--port", std::to_string(c.redis.port),
                                           "--bind", bind, "--dir", dir.string(), "--appendonly",
                                           "yes", "--appendfsync", "everysec", "--save", "",
                                           "--protected-mode", "yes", "--aclfile",
                                           (dir / "users.acl").string(), "--supervised",
                                           "systemd", "--daemonize", "no"};
    std::string t;
    t += "# Generated by `h3pipe systemd units --host " + h->name + "`; edit the config, not this.\n";
    t += "[Unit]\nDescription=h3pipe shared Redis on " + h->name + "\n";
    t += "Wants=network-online.target\nAfter=network-online.target\n";
    t += std::string("PartOf=") + kTargetUnit + "\n\n[Service]\nType=notify\nNotifyAccess=main\n";
    t += identity(o);
    t += "ExecStartPre=" + exec_line(pre) + "\n";
    t += "ExecStart=" + exec_line(argv) + "\n";
    t += "Restart=on-failure\nRestartSec=2s\nTimeoutStartSec=" + o.start_timeout + "\n";
    t += "TimeoutStopSec=60s\nLimitNOFILE=65536\n";
    t += hardening({dir}, read, false);
    t += std::string("\n[Install]\nWantedBy=") + kTargetUnit + "\n";
    units.push_back({"h3pipe-redis.service", t});
    wants.push_back("h3pipe-redis.service");
  }
  for (const HostService& s : services_on(c, *h)) {
    std::vector<std::string> argv = {(o.bin_dir / ("h3pipe-" + s.service)).string(), "--config",
                                     o.config_file.string(), "--host", h->name};
    if (s.pool) argv.insert(argv.end(), {"--pool", s.pool->name});
    const bool gpu = uses_gpus(c, s);
    std::string t;
    t += "# Generated by `h3pipe systemd units --host " + h->name + "`; edit the config, not this.\n";
    t += "[Unit]\nDescription=h3pipe " + s.service + " " + s.instance + " on " + h->name + "\n";
    t += "Wants=network-online.target\nAfter=network-online.target";
    if (redis_here) t += " h3pipe-redis.service";
    t += std::string("\nPartOf=") + kTargetUnit + "\n\n[Service]\n";
    // READY=1 once /readyz answers 200 (common/runner/sd_notify.h).
    t += "Type=notify\nNotifyAccess=main\n";
    t += identity(o);
    if (!c.redis.credentials_dir.empty()) {
      const auto u = supervisor::user_for(c.redis.credentials_dir, s.service);
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
