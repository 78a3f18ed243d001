// h3pipe systemd units|install|prepare: the host's services as systemd units
// (common/deploy/systemd_units.h; docs/deploy.md, "systemd").
#include <fcntl.h>
#include <fmt/format.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "cli/cli.h"
#include "common/deploy/systemd_units.h"
#include "common/supervisor/credentials.h"
#include "common/supervisor/redis_plan.h"

namespace h3pipe::cli {
namespace fs = std::filesystem;
namespace {

struct UnitArgs {
  std::string host, out_dir, unit_dir = "/etc/systemd/system", bin_dir, config_path, user, group;
  std::string start_timeout = "30min";
  bool no_start = false;
};

std::string current_user() {
  const passwd* pw = ::getpwuid(::geteuid());
  return pw ? pw->pw_name : "";
}

// The units of --host for the config in use (--config, made absolute), or the error's exit code.
Result<std::vector<deploy::UnitFile>> units_for(const Global& g, const UnitArgs& a,
                                                config::Cluster* cluster) {
  if (g.config_file.empty())
    return make_error(errc::cli::kFlag,
                      "--config FILE is required: every unit names the config its service reads");
  auto c = load_cluster(g);
  if (!c.ok()) return c.error();
  deploy::UnitOptions o;
  o.host = a.host;
  o.config_file = a.config_path.empty() ? fs::absolute(g.config_file).lexically_normal()
                                        : fs::path(a.config_path);
  o.bin_dir = a.bin_dir.empty() ? bin_dir() : fs::path(a.bin_dir);
  o.user = a.user.empty() ? current_user() : a.user;
  if (a.user.empty() && o.user == "root") o.user.clear();  // root: no User= line
  o.group = a.group;
  o.start_timeout = a.start_timeout;
  if (const std::string st = supervisor::stunnel_binary(); !st.empty()) o.stunnel = st;
  auto u = deploy::render_units(*c, o);
  // PrivateTmp=yes gives every unit its own /tmp: a root or secret there is out of its sight.
  for (const fs::path& p : {c->state_dir, c->artifact_root, c->output_root,
                            fs::path(c->redis.credentials_dir), o.config_file})
    for (const char* t : {"/tmp/", "/var/tmp/"})
      if (u.ok() && p.string().rfind(t, 0) == 0)
        fmt::print(stderr,
                   "systemd: warning: {} is under {}: the units' PrivateTmp=yes hides it from "
                   "them; move it (e.g. /var/lib/h3pipe) before installing\n",
                   p.string(), t);
  if (u.ok() && cluster) *cluster = std::move(*c);
  return u;
}

Status write_unit(const fs::path& dir, const deploy::UnitFile& u) {
  const fs::path file = dir / u.name, tmp = dir / (u.name + ".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    return make_error(errc::io::kOpen, "cannot write {}: {}", tmp.string(), std::strerror(errno));
  ::fchmod(fd, 0644);
  const bool ok = ::write(fd, u.text.data(), u.text.size()) == static_cast<ssize_t>(u.text.size());
  ::close(fd);
  std::error_code ec;
  if (ok) fs::rename(tmp, file, ec);
  if (!ok || ec)
    return make_error(errc::io::kWrite, "cannot write {}: {}", file.string(),
                      ok ? ec.message() : std::strerror(errno));
  return {};
}

// Runs argv (PATH lookup), its output passed through; the exit status (127: not found).
int run(const std::vector<std::string>& argv) {
  std::vector<char*> a;
  for (const auto& w : argv) a.push_back(const_cast<char*>(w.c_str()));
  a.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execvp(a[0], a.data());
    ::_exit(127);
  }
  int st = 0;
  if (pid < 0 || ::waitpid(pid, &st, 0) != pid) return 127;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int cmd_units(const Global& g, const UnitArgs& a) {
  auto u = units_for(g, a, nullptr);
  if (!u.ok()) return fail(u.error(), "systemd units");
  std::error_code ec;
  fs::create_directories(a.out_dir, ec);
  for (const auto& f : *u)
    if (auto s = write_unit(a.out_dir, f); !s.ok()) return fail(s.error(), "systemd units");
  for (const auto& f : *u) fmt::print("{}\n", (fs::path(a.out_dir) / f.name).string());
  return kExitOk;
}

int cmd_install(const Global& g, const UnitArgs& a) {
  config::Cluster c;
  auto u = units_for(g, a, &c);
  if (!u.ok()) return fail(u.error(), "systemd install");
  // The roots the units may write (ReadWritePaths), made before ProtectSystem=strict applies.
  const std::string user = a.user.empty() ? current_user() : a.user;
  const passwd* pw = ::getpwnam(user.c_str());
  for (const fs::path& d : {c.state_dir, c.artifact_root, c.output_root}) {
    std::error_code ec;
    fs::create_directories(d, ec);
    if (ec)
      return fail(make_error(errc::io::kMkdir, "cannot create {}: {}", d.string(), ec.message()),
                  "systemd install");
    if (pw && ::geteuid() == 0) (void)::chown(d.c_str(), pw->pw_uid, pw->pw_gid);
  }
  (void)::chmod(c.state_dir.c_str(), 0700);
  for (const auto& f : *u)
    if (auto s = write_unit(a.unit_dir, f); !s.ok()) return fail(s.error(), "systemd install");
  fmt::print("systemd install: {} unit(s) in {}\n", u->size(), a.unit_dir);
  if (run({"systemctl", "daemon-reload"}) != 0 ||
      run({"systemctl", "enable", deploy::kTargetUnit}) != 0) {
    fmt::print(stderr, "systemd install: systemctl failed (is systemd this host's init?)\n");
    return kExitFailed;
  }
  if (a.no_start) return kExitOk;
  // start waits for every unit's READY=1 (Type=notify); a unit that failed leaves the target up,
  // so each is asked.
  (void)run({"systemctl", "start", deploy::kTargetUnit});
  int rc = kExitOk;
  for (const auto& f : *u) {
    if (f.name == deploy::kTargetUnit) continue;
    if (run({"systemctl", "is-active", "--quiet", f.name}) != 0) {
      fmt::print(stderr,
                 "systemd install: {} is not active: `systemctl status {}`, "
                 "`journalctl -u {}`\n",
                 f.name, f.name, f.name);
      rc = kExitFailed;
    }
  }
  if (rc == kExitOk) fmt::print("systemd install: {} is up\n", deploy::kTargetUnit);
  return rc;
}

// ExecStartPre of the Redis and TLS units: what `h3pipe start` writes before it runs them
// (supervisor/redis_plan.h): the ACL file from the credentials' passwords on the Redis host, the
// stunnel config of the TLS hop, a stale tunnel socket removed.
int cmd_prepare(const Global& g, const UnitArgs& a) {
  auto c = load_cluster(g);
  if (!c.ok()) return fail(c.error(), "systemd prepare");
  auto plan = supervisor::plan_redis(*c, a.host);
  if (!plan.ok()) return fail(plan.error(), "systemd prepare");
  const fs::path dir = c->state_dir / "redis";
  Status s = supervisor::make_private_dir(dir);
  if (s.ok() && plan->run_redis)
    s = supervisor::render_acl_file(plan->credentials_dir, dir / "users.acl");
  if (s.ok() && !plan->stunnel_conf.empty())
    s = supervisor::write_private(plan->stunnel_conf, plan->stunnel_text);
  if (s.ok() && plan->tls_client) {
    std::error_code ec;
    fs::remove(plan->tunnel_socket, ec);
  }
  if (!s.ok()) return fail(s.error(), "systemd prepare");
  return kExitOk;
}

}  // namespace

void register_systemd_commands(CLI::App& app, Global& g, int& rc) {
  static UnitArgs a;
  CLI::App* sd = app.add_subcommand("systemd", "systemd units of a host's services");
  sd->require_subcommand(1);
  const auto common = [](CLI::App* s) {
    s->add_option("--host", a.host, "the host in the config")->required();
    s->add_option("--bin-dir", a.bin_dir,
                  "where h3pipe-* are on that host (default: this h3pipe's folder)");
    s->add_option("--config-path", a.config_path,
                  "the config's absolute path on that host (default: --config, absolute)");
    s->add_option("--user", a.user, "User= of the units (default: the current user)");
    s->add_option("--group", a.group, "Group= of the units (default: the user's)");
    s->add_option("--start-timeout", a.start_timeout,
                  "TimeoutStartSec (model loads; default 30min)");
  };
  CLI::App* units = sd->add_subcommand(
      "units", "write one unit per service of --host (+ the shared Redis, + h3pipe.target) to -o");
  common(units);
  units->add_option("-o,--output", a.out_dir, "the folder to write them to")->required();
  units->callback([&g, &rc] { rc = cmd_units(g, a); });
  CLI::App* install = sd->add_subcommand(
      "install",
      "write the units into --unit-dir, enable h3pipe.target and start it (needs "
      "systemd as init and root)");
  common(install);
  install->add_option("--unit-dir", a.unit_dir, "default /etc/systemd/system");
  install->add_flag("--no-start", a.no_start, "enable only");
  install->callback([&g, &rc] { rc = cmd_install(g, a); });
  CLI::App* prepare = sd->add_subcommand(
      "prepare",
      "write what the Redis and TLS units read (the ACL, the stunnel config); their "
      "ExecStartPre");
  prepare->add_option("--host", a.host, "the host in the config")->required();
  prepare->callback([&g, &rc] { rc = cmd_prepare(g, a); });
}

}  // namespace h3pipe::cli
