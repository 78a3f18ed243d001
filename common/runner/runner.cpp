#include "common/runner/runner.h"

#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <thread>

#include "common/artifacts/artifacts.h"
#include "common/logging/log.h"
#include "common/logging/protobuf_log.h"
#include "common/metrics/degraded.h"
#include "common/queue/redis_config.h"
#include "common/runner/sd_notify.h"
#include "common/runtime/settings_check.h"
#include "common/supervisor/state_dir.h"

namespace {

// This file's component logger (common/logging/log.h).
spdlog::logger& logger() {
  static const auto l = h3pipe::logging::get("runner");
  return *l;
}

}  // namespace

namespace h3pipe::runner {
namespace fs = std::filesystem;
namespace {

std::atomic<bool> g_stop{false};  // the one process-wide flag a signal handler may touch

void on_signal(int) {
  g_stop.store(true);
}

// A root this service writes: creates it (and its parents) and writes, syncs and removes a probe
// file in it.  The reason is what the operator needs (`mkdir /var/lib/h3pipe/artifacts:
// Permission denied`).
Status check_writable(const fs::path& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return make_error(errc::io::kMkdir, "cannot create {}: {}", root.string(), ec.message());
  const fs::path probe = root / fmt::format(".h3pipe-write-probe-{}", ::getpid());
  auto w = artifacts::write_atomic(probe, std::string("probe\n"));
  fs::remove(probe, ec);
  fs::remove(probe.string() + ".sha256", ec);
  if (!w.ok())
    return make_error(errc::io::kWrite, "cannot write in {}: {}", root.string(), w.error().message);
  return {};
}

// The roots a service writes: all of them the state dir and the artifact root; decoders also
// the output root.  Until every one is writable the service stays up and not ready, says why
// every 10 s, and never starts its work (issue #15: a root-owned data dir made services report
// ready and fail every job, and the transfer service crash-looped).
bool wait_for_writable_roots(const Context& ctx, const ServiceInfo& info) {
  std::vector<fs::path> roots = {ctx.cluster.state_dir / "run", ctx.cluster.artifact_root};
  if (info.stage == config::StageKind::kDecode) roots.push_back(ctx.cluster.output_root);
  auto last_log = std::chrono::steady_clock::time_point{};
  while (!g_stop.load()) {
    std::vector<std::string> problems;
    for (const auto& r : roots)
      if (auto st = check_writable(r); !st.ok()) problems.push_back(st.error().message);
    if (problems.empty()) return true;
    if (std::chrono::steady_clock::now() - last_log > std::chrono::seconds(10)) {
      logger().error("{} {}: not ready: {}", info.name, ctx.instance, fmt::join(problems, "; "));
      last_log = std::chrono::steady_clock::now();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return false;
}

}  // namespace

queue::RedisAddress redis_address(const config::Cluster& c) {
  queue::RedisAddress a = queue::address_of(c.redis);  // host, port, Sentinel, WAIT
  // Per-service ACL users (configs/redis/users.acl): one config file for the cluster, the
  // credentials from each service's environment.
  if (const char* u = std::getenv("H3PIPE_REDIS_USER"); u && *u) a.user = u;
  if (const char* f = std::getenv("H3PIPE_REDIS_PASSWORD_FILE"); f && *f) {
    config::Redis r;
    r.password_file = f;
    a.password = r.password();
  }
  // HOST:PORT for this host's processes (a local stunnel client, the Redis host's own network);
  // --redis still overrides it.
  if (const char* s = std::getenv("H3PIPE_REDIS_ADDRESS"); s && *s) queue::set_address(a, s);
  return a;
}

namespace {

struct Flags {
  std::string config_file, host, pool_name, bind, log_level = "info", redis_override, state_dir;
  int metrics_port = -1, health_port = 0;
};

// The command line into `f`; nullopt when it parsed, else the exit code (CLI11's: --help, a bad
// or missing flag).
std::optional<int> parse_flags(int argc, char** argv, const ServiceInfo& info, Flags* f) {
  CLI::App app{"h3pipe-" + info.name};
  app.add_option("--config", f->config_file,
                 "cluster config JSON (default: the embedded local config)");
  app.add_option("--host", f->host, "this host's name in the config (default: the only host)");
  app.add_option("--pool", f->pool_name, "the pool this process serves")->required(info.needs_pool);
  app.add_option("--bind", f->bind, "interface for metrics and health (default: the host's bind)");
  app.add_option("--metrics-port", f->metrics_port,
                 "Prometheus port (0 = free port; default: pool config or 0)");
  app.add_option("--health-port", f->health_port, "readiness port (0 = free port)");
  app.add_option("--redis", f->redis_override, "HOST:PORT overriding the config's redis address");
  app.add_option("--state-dir", f->state_dir, "override the config's state_dir");
  app.add_option("--log-level", f->log_level, "trace, debug, info, warn, error");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return std::nullopt;
}

// This host (--host, else the config's only one) and, for a stage service, its pool (--pool: on
// this host, running this service's stage) into ctx; nullptr after saying why not.
const config::Host* select_host_and_pool(const ServiceInfo& info, Flags& f, Context& ctx) {
  if (f.host.empty()) {
    if (ctx.cluster.hosts.size() != 1) {
      logger().critical("--host is required: the config names {} hosts", ctx.cluster.hosts.size());
      return nullptr;
    }
    f.host = ctx.cluster.hosts.front().name;
  }
  const config::Host* h = ctx.cluster.find_host(f.host);
  if (!h) {
    logger().critical("--host {}: not a host in the config", f.host);
    return nullptr;
  }
  ctx.host = f.host;
  if (!info.needs_pool) return h;
  ctx.pool = ctx.cluster.find_pool(f.pool_name);
  if (!ctx.pool) {
    logger().critical("--pool {}: not a pool in the config", f.pool_name);
    return nullptr;
  }
  if (ctx.pool->host != f.host) {
    logger().critical("--pool {}: runs on host {}, not {}", f.pool_name, ctx.pool->host, f.host);
    return nullptr;
  }
  if (info.stage && ctx.pool->stage != *info.stage) {
    logger().critical("--pool {}: runs stage {}, this service runs {}", f.pool_name,
                      config::stage_name(ctx.pool->stage), config::stage_name(*info.stage));
    return nullptr;
  }
  return h;
}

// The runtime settings as `plan`, `preflight` and `start` check them (runtime/settings_check.h):
// the same error, before the runtime is built; this pool's host checks only (in a container a
// service has only its own programs).
bool settings_ok(const Context& ctx) {
  if (auto s = runtime::check_settings(ctx.cluster, runtime::SettingsScope::kConfig); !s.ok()) {
    logger().critical("invalid config:\n{}", s.error().message);
    return false;
  }
  if (!ctx.pool) return true;
  if (auto s = runtime::check_settings(ctx.cluster, runtime::SettingsScope::kHost, ctx.host,
                                       ctx.pool->name);
      !s.ok()) {
    logger().critical("invalid runtime settings on host {}:\n{}", ctx.host, s.error().message);
    return false;
  }
  return true;
}

// Credentials the local stack put in its state dir are read only from a state dir nobody else
// can write, as the CLI checks it (supervisor/state_dir.h, issue #22).  Compose and Helm give
// the password from a secret outside the state dir; their volumes are not checked here.
bool credentials_trusted(const Context& ctx) {
  const char* f = std::getenv("H3PIPE_REDIS_PASSWORD_FILE");
  if (!f || !*f || !supervisor::in_state_dir(ctx.cluster.state_dir, f)) return true;
  Status s = supervisor::check_state_dir(ctx.cluster.state_dir);
  for (const fs::path& p : {fs::path(f), ctx.cluster.state_dir / "run"})
    if (s.ok()) s = supervisor::check_in_state_dir(ctx.cluster.state_dir, p);
  if (!s.ok()) logger().critical("{}", s.error().message);
  return s.ok();
}

// Everything before the service listens: the config (--state-dir applied), host and pool, the
// runtime settings, the credentials' state dir, Redis (--redis), the bind address and the
// metrics port (the config's fixed port, a pool's metrics_port or a host's
// transfer_metrics_port, else a free one; `h3pipe start` passes --metrics-port on a restart so
// Prometheus finds it again).  False after saying why.
bool load_context(const ServiceInfo& info, Flags& f, Context& ctx) {
  auto cluster =
      f.config_file.empty() ? config::embedded_default() : config::load_file(f.config_file);
  if (!cluster.ok()) {
    logger().critical("invalid config:\n{}", cluster.error().message);
    return false;
  }
  if (!f.state_dir.empty()) config::override_state_dir(*cluster, f.state_dir);
  ctx.cluster = std::move(cluster.value());
  const config::Host* h = select_host_and_pool(info, f, ctx);
  if (!h || !settings_ok(ctx)) return false;
  ctx.instance = ctx.pool ? ctx.pool->name : f.host;
  if (!credentials_trusted(ctx)) return false;
  ctx.redis = redis_address(ctx.cluster);
  if (!f.redis_override.empty() && !queue::set_address(ctx.redis, f.redis_override)) {
    ctx.redis.host = f.redis_override;  // a bare name: that host, no port (as before)
    ctx.redis.port = 0;
    ctx.redis.sentinels.clear();
  }
  ctx.bind = f.bind.empty() ? h->bind : f.bind;
  if (f.metrics_port < 0)
    f.metrics_port = ctx.pool                  ? ctx.pool->metrics_port
                     : info.name == "transfer" ? h->transfer_metrics_port
                                               : 0;
  return true;
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

// The body, whose exceptions are a broken invariant: said, and exit non-zero.
int run_body(const ServiceInfo& info, Context& ctx, const Body& body) {
  int rc = 1;
  try {
    rc = body(ctx);
  } catch (const std::exception& e) {
    logger().critical("{} {}: {}", info.name, ctx.instance, e.what());
  }
  logger().info("{} {} stopped (rc {})", info.name, ctx.instance, rc);
  return rc;
}

}  // namespace

int run(int argc, char** argv, const ServiceInfo& info, const Body& body) {
  Flags f;
  if (const auto rc = parse_flags(argc, argv, info, &f)) return *rc;
  logging::configure(info.name, f.log_level);
  logging::route_protobuf_logs();  // peers' malformed frames cannot flood the log
  Context ctx;
  if (!load_context(info, f, ctx)) return 2;
  logger().info("effective config: {}", config::to_json(ctx.cluster).dump());

  ctx.registry = std::make_shared<prometheus::Registry>();
  metrics::register_degraded(ctx.registry);
  auto ms = metrics::MetricsServer::start(ctx.bind, f.metrics_port, ctx.registry);
  if (!ms.ok()) {
    logger().critical("{}", ms.error().message);
    // 98 (EADDRINUSE): the supervisor then restarts it on a free port if it had only kept the
    // port of an earlier run (supervise.cpp, kExitMetricsPortInUse).
    return f.metrics_port > 0 ? 98 : 2;
  }
  auto hs = metrics::HealthServer::start(ctx.bind, f.health_port);
  if (!hs.ok()) {
    logger().critical("{}", hs.error().message);
    return 2;
  }
  ctx.health = hs->get();

  // Run file: where tools (preflight, tests, start) find this process's ports.
  fs::path run_dir = ctx.cluster.state_dir / "run";
  fs::path run_file = run_dir / fmt::format("{}-{}.json", info.name, ctx.instance);
  nlohmann::json rf = {{"pid", ::getpid()},
                       {"service", info.name},
                       {"instance", ctx.instance},
                       {"host", ctx.host},
                       {"bind", ctx.bind},
                       {"metrics_port", (*ms)->port()},
                       {"health_port", (*hs)->port()}};
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  const bool run_file_written = artifacts::write_atomic(run_file, rf.dump() + "\n").ok();
  logger().info("{} {} on host {}: metrics http://{}:{}/metrics, ready http://{}:{}/readyz",
                info.name, ctx.instance, ctx.host, ctx.bind, (*ms)->port(), ctx.bind,
                (*hs)->port());

  install_signal_handlers();
  ctx.stop = &g_stop;
  // Type=notify units (h3pipe systemd units): READY=1 once /readyz says ready, STATUS= lines.
  const ReadinessNotifier notifier(fmt::format("{} {} on {}", info.name, ctx.instance, ctx.host),
                                   fmt::format("metrics :{}", (*ms)->port()), ctx.bind,
                                   (*hs)->port(), &g_stop);
  if (!wait_for_writable_roots(ctx, info)) return 0;  // stopped while waiting
  if (!run_file_written) (void)artifacts::write_atomic(run_file, rf.dump() + "\n");
  return run_body(info, ctx, body);
}

}  // namespace h3pipe::runner
