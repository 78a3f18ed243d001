#include <unistd.h>

#include <fstream>

#include "cli/cli.h"
#include "common/runner/runner.h"
#include "common/runtime/settings_check.h"
#include "common/supervisor/credentials.h"
#include "common/supervisor/stack_file.h"
#include "common/supervisor/state_dir.h"
#include "common/supervisor/supervisor.h"

namespace h3pipe::cli {
namespace fs = std::filesystem;

fs::path bin_dir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return fs::current_path();
  buf[n] = 0;
  return fs::path(buf).parent_path();
}

// Every command loads its config here: parsed, and every runtime's settings checked as the
// services will (runtime/settings_check.h), so a command and the stack agree on what is valid.
std::string config_file_in_use(const Global& g) {
  if (!g.config_file.empty()) return g.config_file;
  auto def = config::embedded_default();
  if (!def.ok()) return "";
  if (!g.state_dir.empty()) config::override_state_dir(*def, g.state_dir);
  // The running stack may have been started with another config: use that one.
  if (auto st = supervisor::running(*def)) return st->value("config", "");
  return "";
}

// --state-dir is the state dir, also over a config that names one.
Result<config::Cluster> load_cluster(const Global& g) {
  const auto with_flag = [&](Result<config::Cluster> c) {
    if (c.ok() && !g.state_dir.empty()) config::override_state_dir(*c, g.state_dir);
    return c;
  };
  if (const std::string file = config_file_in_use(g); !file.empty())
    return with_flag(runtime::load_config(file));
  auto def = with_flag(config::embedded_default());
  if (!def.ok()) return def;
  if (auto s = runtime::check_settings(*def, runtime::SettingsScope::kConfig); !s.ok())
    return make_error(errc::config::kInvalid, "the embedded config:\n{}", s.error().message);
  return def;
}

namespace {

// What a stack command reads or creates in the state dir, checked before any of it is read
// (supervisor/state_dir.h, issue #22): the dir and the folders above it, stack.json and its
// sidecar, the lock, the operator's password and the transfer outboxes (resume writes there).
// `start` checks only what it reads before the supervisor makes the rest private.
Status check_stack_files(const config::Cluster& c, bool starting) {
  H3_TRY(supervisor::check_state_dir(c.state_dir));
  std::vector<fs::path> files = {supervisor::stack_file(c.state_dir),
                                 supervisor::stack_file(c.state_dir).string() + ".sha256"};
  if (!starting) {
    files.push_back(supervisor::lock_file(c.state_dir));
    files.push_back(
        supervisor::user_for(supervisor::secrets_dir(c.state_dir), "operator").password_file);
    for (const auto& h : c.hosts) files.push_back(c.state_dir / "transfer" / h.name / "outbox");
  }
  for (const auto& f : files) H3_TRY(supervisor::check_in_state_dir(c.state_dir, f));
  return {};
}

}  // namespace

Result<config::Cluster> load_stack_cluster(const Global& g, bool starting) {
  if (g.config_file.empty()) {
    // The default state dir's stack.json names the config in use: checked before it is read.
    auto def = config::embedded_default();
    if (def.ok()) {
      if (!g.state_dir.empty()) config::override_state_dir(*def, g.state_dir);
      H3_TRY(check_stack_files(*def, true));
    }
  }
  auto c = load_cluster(g);
  if (!c.ok()) return c;
  H3_TRY(check_stack_files(*c, starting));
  return c;
}

Result<std::pair<std::string, int>> parse_redis_flag(const std::string& v) {
  const auto colon = v.rfind(':');
  const std::string host = colon == std::string::npos ? "" : v.substr(0, colon);
  const std::string port = colon == std::string::npos ? "" : v.substr(colon + 1);
  int n = 0;
  bool digits = !port.empty() && port.size() <= 5;
  for (char ch : port) digits = digits && ch >= '0' && ch <= '9';
  if (digits) n = std::stoi(port);
  if (host.empty() || !digits || n < 1 || n > 65535)
    return make_error(errc::cli::kFlag, "--redis \"{}\": expected HOST:PORT with a port 1-65535",
                      v);
  return std::pair<std::string, int>{host, n};
}

// connect(): redis_login.cpp.

int cmd_start(const Global& g, const std::string& host) {
  auto c = load_stack_cluster(g, true);
  if (!c.ok()) {
    fmt::print(stderr, "{}\n", c.error().message);
    return 2;
  }
  // What this machine must provide for the pools it is about to start (a program on PATH, ...):
  // refused here, with the errors preflight and the services give, before anything starts.
  const std::string here = host.empty() && c->hosts.size() == 1 ? c->hosts.front().name : host;
  if (!here.empty() && c->find_host(here)) {
    if (auto s = runtime::check_settings(*c, runtime::SettingsScope::kHost, here); !s.ok()) {
      fmt::print(stderr, "start: invalid runtime settings on host {}:\n{}\n", here,
                 s.error().message);
      return 2;
    }
  }
  // Already running with this config and host (start is idempotent), another stack here, or a
  // restart without the --config this state dir was started with (start_record.cpp).
  nlohmann::json j;
  if (auto rc = start_precheck(g, *c, host, &j)) return *rc;
  if (!j.is_null()) {
    fmt::print(
        "h3pipe local stack is already running (supervisor pid {}, host \"{}\"); services "
        "already up stay up\n",
        j.value("supervisor_pid", 0), j.value("host", ""));
  } else {
    supervisor::StartOptions o;
    o.config_file = g.config_file;
    o.host = host;
    o.bin_dir = bin_dir();
    auto st = supervisor::start(*c, o);
    if (!st.ok()) return fail(st.error(), "start");
    j = std::move(*st);
    write_start_record(g, *c, j);
    fmt::print("h3pipe local stack is up (supervisor pid {})\n", j["supervisor_pid"].get<int>());
  }
  const auto& jr = j["redis"];
  const std::string persistence = jr.value("persistence", "unknown");
  if (jr.value("embedded", true)) {
    int redis_pid = 0;
    for (const auto& p : j["processes"])
      if (p["name"] == "redis") redis_pid = p["pid"].get<int>();
    fmt::print(
        "  redis      unix:{}{}  pid {}  (data {}/redis, {})\n", jr["host"].get<std::string>(),
        jr.value("tcp_port", 0) > 0 ? fmt::format(" and 127.0.0.1:{}", jr["tcp_port"].get<int>())
                                    : "",
        redis_pid, c->state_dir.string(), persistence);
  } else if (jr.value("managed", false)) {
    // The shared Redis this host runs (/redis/managed): its socket here, and what other hosts use.
    int redis_pid = 0;
    for (const auto& p : j["processes"])
      if (p["name"] == "redis") redis_pid = p["pid"].get<int>();
    fmt::print(
        "  redis      unix:{}  pid {}  shared: other hosts reach {}:{} ({}; data {}/redis, {})\n",
        jr["host"].get<std::string>(), redis_pid, c->redis.host, c->redis.port,
        jr.value("tls", "off") == "server" ? "TLS through stunnel" : "plain RESP",
        c->state_dir.string(), persistence);
  } else if (jr.value("tls", "off") == "client") {
    fmt::print("  redis      unix:{}  stunnel TLS client to {}:{} (shared Redis; persistence {})\n",
               jr["host"].get<std::string>(), c->redis.host, c->redis.port, persistence);
  } else {
    // A shared Redis is not this stack's: no pid here, and its persistence is what it answered.
    fmt::print("  redis      {}:{}  (external, not started by this stack; persistence {})\n",
               jr["host"].get<std::string>(), jr["port"].get<int>(), persistence);
  }
  for (const auto& p : j["processes"]) {
    std::string name = p["name"];
    if (name == "redis") continue;  // above
    std::string ports;
    std::ifstream rf(c->state_dir / "run" / (name + ".json"));
    nlohmann::json r;
    if (rf && (rf >> r) && r.contains("api_url"))  // h3pipe-api (docs/api.md): its URL
      ports = fmt::format("{}  metrics :{} ready :{}", r["api_url"].get<std::string>(),
                          r.value("metrics_port", 0), r["health_port"].get<int>());
    else if (r.is_object() && r.contains("metrics_port"))
      ports = fmt::format("metrics :{} ready :{}", r["metrics_port"].get<int>(),
                          r["health_port"].get<int>());
    fmt::print("  {:<22} pid {:<7} {}  log {}\n", name, p["pid"].get<int>(), ports,
               p["log"].get<std::string>());
  }
  fmt::print("  artifacts  {}\n  outputs    {}\n", c->artifact_root.string(),
             c->output_root.string());
  write_prometheus_targets(*c, j);  // prometheus_cmds.cpp
  return 0;
}

// --host names the host whose stack this is (what `stop --all` runs on each host): a stack of
// another host under this state dir is left alone.
int cmd_stop(const Global& g, const std::string& host) {
  auto c = load_stack_cluster(g);
  if (!c.ok()) {
    fmt::print(stderr, "{}\n", c.error().message);
    return 2;
  }
  if (!host.empty()) {
    if (!c->find_host(host)) {
      fmt::print(stderr, "stop: --host \"{}\" is not a host of the config\n", host);
      return 2;
    }
    if (auto st = supervisor::running(*c); st && st->value("host", "") != host) {
      fmt::print(stderr, "stop: the stack under {} runs host \"{}\", not \"{}\"; left running\n",
                 c->state_dir.string(), st->value("host", ""), host);
      return 1;
    }
  }
  auto s = supervisor::stop(*c);
  if (!s.ok()) return fail(s.error(), "stop");
  fmt::print("h3pipe local stack stopped\n");
  return 0;
}

}  // namespace h3pipe::cli
