#include "common/supervisor/supervisor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "common/artifacts/artifacts.h"
#include "common/core/bounded_file.h"
#include "common/core/json_parse.h"
#include "common/queue/redis.h"
#include "common/queue/redis_config.h"
#include "common/queue/server.h"
#include "common/supervisor/credentials.h"
#include "common/supervisor/redis_plan.h"
#include "common/supervisor/stack_file.h"
#include "common/supervisor/state_dir.h"

extern char** environ;

namespace h3pipe::supervisor {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
namespace {

volatile sig_atomic_t g_term = 0;
void on_term(int) {
  g_term = 1;
}

struct Child {
  std::string name;
  std::vector<std::string> argv;
  fs::path log;
  pid_t pid = -1;
  int restarts = 0;
  Clock::time_point started{};
  Clock::time_point next_start{};
  int backoff_ms = 100;
  std::vector<std::string> env{};  // NAME=VALUE added to (or replacing in) the supervisor's
  int exits = 0;                   // how often it has exited, and how the last time (stack.json)
  std::string last_exit{};
  std::filesystem::path unlink_before{};  // a stale socket it listens on (stunnel)
  // Its Prometheus port: the config's, else the one its first run chose (read from its run file,
  // then passed as --metrics-port to every restart, so a scrape target stays valid); 0 = unknown.
  int metrics_port = 0;
};

// The runner's exit status when it cannot bind the metrics port it was given (runner.cpp).
constexpr int kExitMetricsPortInUse = 98;

// The metrics port that process `pid` wrote in its run file (0: not written yet).
int metrics_port_of(const fs::path& run_file, pid_t pid) {
  auto text = read_bounded_file(run_file, {"a run file", kMaxSmallFileBytes});
  if (!text.ok()) return 0;
  std::string why;
  const auto j =
      json_reader::parse_limited(*text, {kMaxSmallFileBytes}, &why).value_or(nlohmann::json());
  if (!j.is_object() || j.value("pid", -1) != pid) return 0;
  return j.value("metrics_port", 0);
}

// fork + exec rather than posix_spawn: the child must die with the supervisor
// (PR_SET_PDEATHSIG; a supervisor killed with -9 leaves no invisible services behind, issue #14),
// and must not outlive a supervisor that died before the prctl took effect.
pid_t spawn(const Child& c) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string_view kv(*e);
    bool replaced = false;
    for (const auto& add : c.env)
      if (kv.substr(0, kv.find('=') + 1) == std::string_view(add).substr(0, add.find('=') + 1))
        replaced = true;
    if (!replaced) env_strings.emplace_back(kv);
  }
  env_strings.insert(env_strings.end(), c.env.begin(), c.env.end());
  std::vector<char*> envp, argv;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (const auto& a : c.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  if (!c.unlink_before.empty()) ::unlink(c.unlink_before.c_str());
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) return pid;  // -1 on failure
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(1);
  const int in = ::open("/dev/null", O_RDONLY);
  const int out = ::open(c.log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (in < 0 || out < 0) ::_exit(127);
  ::dup2(in, 0);
  ::dup2(out, 1);
  ::dup2(out, 2);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGPIPE, SIG_DFL);  // the supervisor ignores it (queue/redis.h); its children choose
  ::execve(argv[0], argv.data(), envp.data());
  ::_exit(127);
}

// "" when Redis answers PING at `a`, else why not.
std::string redis_problem(const queue::RedisAddress& a) {
  auto r = queue::Redis::connect(a);
  if (!r.ok()) return r.error().message;
  const Status s = queue::ping(**r);
  return s.ok() ? "" : s.error().message;
}
std::string redis_where(const queue::RedisAddress& a) {
  return queue::is_unix_socket(a.host) ? "unix:" + a.host : fmt::format("{}:{}", a.host, a.port);
}
bool redis_ping(const queue::RedisAddress& a) {
  return redis_problem(a).empty();
}

fs::path stack_path(const config::Cluster& c) {
  return stack_file(c.state_dir);
}

// How the supervisor itself reaches Redis: this host's way (redis_plan.h) as the plan's user:
// admin only where this stack runs Redis, else the operator (issue #34 P2), or the config's.
queue::RedisAddress supervisor_address(const config::Cluster& c, const RedisPlan& plan) {
  queue::RedisAddress a = plan.local;
  a.user = c.redis.user;
  a.password = c.redis.password();
  if (!plan.ping_role.empty()) {
    const RedisUser u = user_for(plan.credentials_dir, plan.ping_role);
    config::Redis r;
    r.password_file = u.password_file;
    a.user = u.user;
    a.password = r.password();
  }
  return a;
}

// The supervisor proper; runs in the daemonized child and never returns.
[[noreturn]] void supervise(const config::Cluster& c, const StartOptions& o,
                            const std::string& host, const RedisPlan& plan) {
  // The name `stop` checks (stack_file.h), beside the lock and the start time.
  ::prctl(PR_SET_NAME, kSupervisorComm);
  fs::path logs = c.state_dir / "logs";  // logs/, redis/, run/: made private by start()
  std::error_code ec;
  struct sigaction sa {};
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  std::vector<Child> children;
  {
    // On its Unix socket in the 0700 state dir; TCP only where the plan needs it (issue #35 D1).
    Child r{.name = "redis",
            .argv = redis_server_argv("/usr/bin/redis-server", plan.tcp_port,
                                      plan.tcp_bind.empty() ? "127.0.0.1" : plan.tcp_bind,
                                      plan.socket, c.state_dir / "redis"),
            .log = logs / "redis.log"};
    // Per-service ACL users, the default user off (credentials.h); rendered by start().
    // Redis rewrites its process title, so leftovers are found by this file (end_leftovers).
    r.argv.push_back("--pidfile");
    r.argv.push_back((c.state_dir / "redis" / "redis.pid").string());
    children.push_back(r);
  }
  if (plan.tls_server || plan.tls_client)  // the TLS hop between hosts (redis_plan.h)
    children.push_back({.name = "stunnel",
                        .argv = {stunnel_binary(), plan.stunnel_conf.string()},
                        .log = logs / "stunnel.log",
                        .unlink_before = plan.tls_client ? plan.tunnel_socket : fs::path()});
  const std::size_t n_infra = children.size();  // Redis and its stunnel: first up, last down
  std::string cfg = o.config_file.empty() ? "" : fs::absolute(o.config_file).string();
  auto service = [&](const std::string& svc, const std::string& instance, const std::string& pool) {
    Child ch{.name = svc + "-" + instance,
             .argv = {(o.bin_dir / ("h3pipe-" + svc)).string()},
             .log = logs / (svc + "-" + instance + ".log")};
    if (!cfg.empty()) {
      ch.argv.push_back("--config");
      ch.argv.push_back(cfg);
    }
    ch.argv.insert(ch.argv.end(), {"--host", host, "--state-dir", c.state_dir.string()});
    if (queue::is_unix_socket(plan.local.host)) {
      ch.argv.push_back("--redis");
      ch.argv.push_back(plan.local.host);
    }
    if (!pool.empty()) {
      ch.argv.push_back("--pool");
      ch.argv.push_back(pool);
    }
    if (const fs::path& creds = plan.credentials_dir; !creds.empty()) {
      const RedisUser u = user_for(creds, svc);
      ch.env = {"H3PIPE_REDIS_USER=" + u.user,
                "H3PIPE_REDIS_PASSWORD_FILE=" + u.password_file.string()};
    }
    const config::Pool* p = pool.empty() ? nullptr : c.find_pool(pool);
    ch.metrics_port = p ? p->metrics_port : c.find_host(host)->transfer_metrics_port;
    children.push_back(ch);
  };
  for (const auto* p : c.pools_on(host)) {
    const char* svc = p->stage == config::StageKind::kEncode   ? "encoder"
                      : p->stage == config::StageKind::kSample ? "sampler"
                                                               : "decoder";
    service(svc, p->name, p->name);
  }
  if (c.hosts.size() > 1 && fs::exists(o.bin_dir / "h3pipe-transfer"))
    service("transfer", host, "");
  // h3pipe-api (issue #37, docs/api.md) when built, on the host's api_bind and api_port (loopback
  // and a free port unless configured) and its Prometheus port api_metrics_port: it logs in as
  // the operator through this stack.json; its URL is in run/api-<host>.json (and /readyz there).
  if (fs::exists(o.bin_dir / "h3pipe-api")) {
    const std::string name = "api-" + host;
    Child ch{
        .name = name, .argv = {(o.bin_dir / "h3pipe-api").string()}, .log = logs / (name + ".log")};
    if (!cfg.empty()) ch.argv.insert(ch.argv.end(), {"--config", cfg});
    ch.argv.insert(ch.argv.end(),
                   {"--state-dir", c.state_dir.string(), "--host", host, "--run-file",
                    (c.state_dir / "run" / (name + ".json")).string()});
    ch.metrics_port = c.find_host(host)->api_metrics_port;
    children.push_back(ch);
  }

  // Redis (and its stunnel) first, and wait for it, so services do not start into connection
  // errors.  A shared Redis of another host is not ours to run: the services use the plan's way.
  const queue::RedisAddress addr = supervisor_address(c, plan);
  for (std::size_t i = 0; i < n_infra; ++i) {
    if (i == 0 && !plan.run_redis) {
      children[0].pid = 0;  // placeholder: never spawned, never restarted
      continue;
    }
    children[i].pid = spawn(children[i]);
    children[i].started = Clock::now();
  }
  for (int i = 0; i < 200 && !redis_ping(addr); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  for (std::size_t i = n_infra; i < children.size(); ++i) {
    children[i].pid = spawn(children[i]);
    children[i].started = Clock::now();
  }
  auto write_stack = [&] {
    nlohmann::json j = {{"supervisor_pid", ::getpid()},
                        {"supervisor_start_time", process_start_time(::getpid())},
                        {"host", host},
                        {"config", cfg},
                        {"state_dir", c.state_dir.string()},
                        {"redis",
                         {{"host", addr.host},
                          {"port", addr.port},
                          {"embedded", c.redis.embedded},
                          {"managed", plan.run_redis && !c.redis.embedded},
                          {"tcp_port", plan.tcp_port},
                          {"tls", plan.tls_server   ? "server"
                                  : plan.tls_client ? "client"
                                                    : "off"},
                          {"credentials_dir", plan.credentials_dir.string()}}},
                        {"artifact_root", c.artifact_root.string()},
                        {"output_root", c.output_root.string()}};
    for (const auto& ch : children)
      j["processes"].push_back({{"name", ch.name},
                                {"pid", ch.pid},
                                {"metrics_port", ch.metrics_port},
                                {"log", ch.log.string()},
                                {"restarts", ch.restarts},
                                {"exits", ch.exits},
                                {"last_exit", ch.last_exit}});
    (void)artifacts::write_atomic(stack_path(c), j.dump(2) + "\n");
  };
  write_stack();

  // A port a service's first run chose is kept: every later start gets it as --metrics-port.
  auto learn_port = [&](Child& ch, pid_t pid) {
    if (ch.metrics_port > 0 || ch.name.rfind("redis", 0) == 0) return false;
    ch.metrics_port = metrics_port_of(c.state_dir / "run" / (ch.name + ".json"), pid);
    if (ch.metrics_port <= 0) return false;
    ch.argv.insert(ch.argv.end(), {"--metrics-port", std::to_string(ch.metrics_port)});
    return true;
  };
  // ... unless another process took it while the service was down (the runner exits 98 when it
  // cannot bind it): the next start picks a free one again, learned the same way.
  auto forget_port = [&](Child& ch) {
    const auto it = std::find(ch.argv.begin(), ch.argv.end(), "--metrics-port");
    if (it == ch.argv.end() || it + 1 == ch.argv.end()) return;  // the config's port: kept
    std::fprintf(stderr, "supervisor: %s: metrics port %s is taken; restarting on a free one\n",
                 ch.name.c_str(), (it + 1)->c_str());
    ch.argv.erase(it, it + 2);
    ch.metrics_port = 0;
  };
  Clock::time_point next_port_check{};
  while (!g_term) {
    int status = 0;
    pid_t dead = ::waitpid(-1, &status, WNOHANG);
    auto now = Clock::now();
    bool changed = false;
    for (auto& ch : children) {
      if (ch.pid == 0) continue;  // the shared Redis placeholder
      if (dead > 0 && ch.pid == dead) {
        learn_port(ch, dead);
        if (WIFEXITED(status) && WEXITSTATUS(status) == kExitMetricsPortInUse) forget_port(ch);
        changed = true;
        ch.exits++;  // `start` stops waiting on a service that exited (issue #34 P1)
        ch.last_exit = WIFSIGNALED(status) ? fmt::format("killed by signal {}", WTERMSIG(status))
                                           : fmt::format("exit {}", WEXITSTATUS(status));
        // A death within 2 s of its start is a crash loop: back off exponentially (100 ms .. 5 s).
        // A process that had been up longer was killed while healthy (OOM killer, an operator, a
        // chaos run): restart it at once, so its leased task resumes without waiting out the lease.
        bool quick = now - ch.started < std::chrono::seconds(2);
        ch.backoff_ms = quick ? std::min(std::max(ch.backoff_ms, 50) * 2, 5000) : 20;
        ch.next_start = now + std::chrono::milliseconds(ch.backoff_ms);
        ch.pid = -1;
      }
      if (ch.pid < 0 && now >= ch.next_start) {
        ch.pid = spawn(ch);
        ch.started = now;
        ch.restarts++;
        changed = true;
      }
    }
    for (auto& ch : children)
      if (ch.pid > 0 && now >= next_port_check) changed = learn_port(ch, ch.pid) || changed;
    if (now >= next_port_check) next_port_check = now + std::chrono::milliseconds(100);
    if (changed) write_stack();
    if (dead <= 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Graceful: services first (they drain), then the stunnel, then Redis (AOF flushed on shutdown).
  for (std::size_t i = children.size(); i-- > n_infra;)
    if (children[i].pid > 0) ::kill(children[i].pid, SIGTERM);
  auto deadline = Clock::now() + std::chrono::seconds(15);
  for (std::size_t i = children.size(); i-- > 1;) {
    if (i == n_infra - 1 && children[i].pid > 0) ::kill(children[i].pid, SIGTERM);  // stunnel
    while (children[i].pid > 0 && Clock::now() < deadline) {
      if (::waitpid(children[i].pid, nullptr, WNOHANG) == children[i].pid)
        children[i].pid = -1;
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (children[i].pid > 0) {
      ::kill(children[i].pid, SIGKILL);
      ::waitpid(children[i].pid, nullptr, 0);
    }
  }
  if (plan.run_redis && children[0].pid > 0) {
    ::kill(children[0].pid, SIGTERM);
    ::waitpid(children[0].pid, nullptr, 0);
  }
  fs::remove(stack_path(c), ec);
  fs::remove(stack_path(c).string() + ".sha256", ec);
  ::_exit(0);
}

}  // namespace

int free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

std::optional<nlohmann::json> running(const config::Cluster& c) {
  auto st = read_stack(c.state_dir);
  if (!st.ok() || !*st || !prove_supervisor(c.state_dir, **st).supervisor) return std::nullopt;
  return **st;
}

namespace {

// Processes of an earlier stack of this state dir that outlived their supervisor (a supervisor of
// an older h3pipe killed with -9): services started with `--state-dir DIR`, and the redis-server
// of DIR/redis (by its argv, or its pid file).  Ended with SIGKILL before anything new starts.
int end_leftovers(const fs::path& state_dir) {
  const std::string dir = fs::absolute(state_dir).lexically_normal().string();
  const std::string redis_dir = (fs::absolute(state_dir) / "redis").lexically_normal().string();
  int ended = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    if (pid == ::getpid()) continue;
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    std::vector<std::string> argv;
    for (std::string a; std::getline(in, a, '\0');) argv.push_back(a);
    bool ours = false;
    for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
      const bool service = argv[i] == "--state-dir" &&
                           fs::path(argv[i + 1]).lexically_normal() == dir &&
                           fs::path(argv[0]).filename().string().rfind("h3pipe-", 0) == 0;
      const bool redis = argv[i] == "--dir" &&
                         fs::path(argv[i + 1]).lexically_normal() == redis_dir &&
                         fs::path(argv[0]).filename() == "redis-server";
      ours = ours || service || redis;
    }
    if (ours && ::kill(pid, SIGKILL) == 0) ++ended;
  }
  // Redis rewrites its process title: its pid file names it.
  std::ifstream pidfile(fs::path(redis_dir) / "redis.pid");
  pid_t redis_pid = 0;
  if (pidfile >> redis_pid && redis_pid > 0) {
    std::ifstream comm(fmt::format("/proc/{}/comm", redis_pid));
    std::string name;
    if (comm >> name && name.rfind("redis-server", 0) == 0 && ::kill(redis_pid, SIGKILL) == 0)
      ++ended;
  }
  return ended;
}

// A service's /readyz (its port from its run file): ready, not yet, or failed for good (the body
// says why).
enum class Readiness { kReady, kNotYet, kFailed };
Readiness service_ready(const fs::path& run_file, std::string* why) {
  auto text = read_bounded_file(run_file, {"a run file", kMaxSmallFileBytes});
  if (!text.ok()) return Readiness::kNotYet;
  std::string bad;
  auto parsed = json_reader::parse_limited(*text, {kMaxSmallFileBytes}, &bad);
  if (!parsed || !parsed->is_object() || !parsed->contains("health_port") ||
      !(*parsed)["health_port"].is_number_integer())
    return Readiness::kNotYet;
  const nlohmann::json& j = *parsed;
  // The service listens on its host's bind address (a namespace's own address in tests).
  std::string bind = j.value("bind", "127.0.0.1");
  if (bind.empty() || bind == "0.0.0.0") bind = "127.0.0.1";
  httplib::Client cli(bind, j["health_port"].get<int>());
  cli.set_connection_timeout(0, 300 * 1000);
  cli.set_read_timeout(1, 0);
  auto r = cli.Get("/readyz");
  if (r && r->status == 200) return Readiness::kReady;
  if (r && r->body.rfind("failed: ", 0) == 0) {
    *why = r->body.substr(8);
    while (!why->empty() && why->back() == '\n') why->pop_back();
    return Readiness::kFailed;
  }
  return Readiness::kNotYet;
}

// The last lines of a log that say why a service is not ready.
std::string log_tail(const fs::path& log, std::size_t lines = 3) {
  std::ifstream in(log);
  std::vector<std::string> all;
  for (std::string l; std::getline(in, l);) all.push_back(l);
  std::string out;
  for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i)
    out += "\n      " + all[i];
  return out.empty() ? "\n      (empty log)" : out;
}

// What the stack writes in and reads back from the state dir, made private before it starts
// (issue #22: a pre-existing 0777 logs/ or 0666 log kept its mode): the folders it creates files
// in, everything in them, and its own files at the top; refused when another user owns any.
Status make_stack_private(const config::Cluster& c) {
  for (const char* dir : {"logs", "redis", "run", "secrets", "transfer"}) {
    std::error_code ec;
    if (std::string_view(dir) == "transfer" &&
        !fs::exists(fs::symlink_status(c.state_dir / dir, ec)))
      continue;
    H3_TRY(make_private_tree(c.state_dir, c.state_dir / dir, true));
  }
  // The artifact and output roots when they are the state dir's (their files are the services').
  for (const fs::path& root : {c.artifact_root, c.output_root}) {
    const fs::path rel = root.lexically_normal().lexically_relative(c.state_dir.lexically_normal());
    if (!rel.empty() && *rel.begin() != ".." && rel != ".")
      H3_TRY(make_private_tree(c.state_dir, root, false));
  }
  for (const char* name : {"supervisor.log", "stack.json", "stack.json.sha256"}) {
    const fs::path p = c.state_dir / name;
    const int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT) continue;
    if (fd < 0)
      return make_error(errc::state_dir::kUnsafe, "refusing {}: {} (a symlink?)", p.string(),
                        std::strerror(errno));
    const Status s = tighten_fd(fd, p);
    ::close(fd);
    H3_TRY(s);
  }
  return {};
}

// What start can say of Redis's persistence: the private one runs with AOF everysec; a shared
// one is asked (CONFIG GET appendonly, which its ACL may refuse), never assumed.
nlohmann::json with_persistence(const config::Cluster& c, const RedisPlan& plan,
                                nlohmann::json st) {
  std::string persistence = "AOF on (appendfsync everysec)";
  if (!plan.run_redis) {
    persistence = "unknown";
    auto r = queue::Redis::connect(supervisor_address(c, plan));
    if (!r.ok()) {
      persistence = fmt::format("unknown ({})", r.error().message);
    } else if (auto v = queue::append_only(**r); !v.ok()) {
      persistence = fmt::format("unknown (CONFIG GET appendonly: {})", v.error().message);
    } else if (v->has_value()) {
      persistence = **v ? "AOF on" : "AOF off";
    }
  }
  st["redis"]["persistence"] = persistence;
  return st;
}

}  // namespace

Result<nlohmann::json> start(const config::Cluster& c, const StartOptions& o) {
  std::string host = o.host;
  if (host.empty()) {
    if (c.hosts.size() != 1)
      return make_error(errc::start::kHost, "--host is required: the config names {} hosts",
                        c.hosts.size());
    host = c.hosts.front().name;
  }
  if (!c.find_host(host))
    return make_error(errc::start::kHost, "--host {}: not a host in the config", host);
  if (c.redis.embedded && ::access("/usr/bin/redis-server", X_OK) != 0)
    return make_error(errc::start::kRedis,
                      "/usr/bin/redis-server is missing; run scripts/setup.sh");
  // The state dir holds credentials, every prompt (receipts) and the AOF: its owner's alone.
  // One owned by another user or open to others is refused before anything is read or written
  // in it (state_dir.h); what the stack creates or reuses in it is made private.
  H3_TRY(check_state_dir(c.state_dir));
  std::error_code ec;
  fs::create_directories(c.state_dir, ec);
  if (ec)
    return make_error(errc::io::kMkdir, "cannot create {}: {}", c.state_dir.string(), ec.message());
  H3_TRY(check_state_dir(c.state_dir));  // what create_directories found or made
  ::chmod(c.state_dir.c_str(), 0700);
  // One stack per state dir: the lock is held by the supervisor for its whole life (the fd is
  // inherited by the fork, closed on exec, so services never hold it).
  const fs::path lock_path = lock_file(c.state_dir);
  const int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lock < 0)
    return make_error(errc::io::kOpen, "cannot open {}: {}", lock_path.string(),
                      std::strerror(errno));
  if (auto s = tighten_fd(lock, lock_path); !s.ok()) {
    ::close(lock);
    return s.error();
  }
  if (::flock(lock, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock);
    auto r = running(c);
    return make_error(
        errc::start::kRunning, "a stack already runs for {}{}; run `h3pipe stop` first",
        c.state_dir.string(),
        r ? fmt::format(" (supervisor pid {})", (*r)["supervisor_pid"].get<int>()) : " (starting)");
  }
  if (auto s = make_stack_private(c); !s.ok()) {
    ::close(lock);
    return s.error();
  }
  if (const int n = end_leftovers(c.state_dir); n > 0)
    std::fprintf(stderr, "start: ended %d leftover process(es) of an earlier stack of %s\n", n,
                 c.state_dir.string().c_str());
  fs::remove(stack_path(c), ec);
  // How this host reaches Redis and what it runs for it (redis_plan.h), and the files for that:
  // the ACL of the Redis it runs, the stunnel config of the TLS hop.
  auto plan = plan_redis(c, host);
  Status files = plan.ok() ? Status{} : Status(plan.error());
  if (files.ok() && c.redis.embedded) {
    if (auto acl = prepare_local_acl(c.state_dir); !acl.ok()) files = acl.error();
  } else if (files.ok() && plan->run_redis)
    files = render_acl_file(plan->credentials_dir, c.state_dir / "redis" / "users.acl");
  if (files.ok() && !plan->stunnel_conf.empty()) {
    files = stunnel_binary().empty()
                ? make_error(errc::acl::kTls,
                             "stunnel is not installed (apt-get install stunnel4): the TLS hop to "
                             "Redis needs it, or set /redis/allow_plaintext on a trusted network")
                : write_private(plan->stunnel_conf, plan->stunnel_text);
  }
  if (!files.ok()) {
    ::close(lock);
    return files.error();
  }
  pid_t pid = ::fork();
  if (pid < 0) return make_error(errc::start::kFork, "fork failed");
  if (pid == 0) {
    ::setsid();
    if (::fork() != 0) ::_exit(0);  // double fork: the supervisor is nobody's child
    ::umask(077);                   // logs, run files, Redis data: private to the owner
    int devnull = ::open("/dev/null", O_RDWR);
    ::dup2(devnull, 0);
    int log = ::open((c.state_dir / "supervisor.log").c_str(),
                     O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0600);
    ::dup2(log, 1);
    ::dup2(log, 2);
    supervise(c, o, host, *plan);
  }
  ::close(lock);  // the supervisor holds its own copy
  ::waitpid(pid, nullptr, 0);
  // "Up" means Redis answers and every service answers /readyz 200.
  auto deadline = Clock::now() + std::chrono::milliseconds(o.ready_timeout_ms);
  std::optional<nlohmann::json> st;
  std::vector<std::string> not_ready;
  std::string redis_why;
  const queue::RedisAddress addr = supervisor_address(c, *plan);
  while (Clock::now() < deadline) {
    st = running(c);
    if (st) {
      not_ready.clear();
      redis_why = redis_problem(addr);
      if (!redis_why.empty()) not_ready.push_back("redis");
      // A process that exited is not waited for (issue #34 P1): its own log says why.
      std::string exited;
      for (const auto& p : (*st)["processes"])
        if (p.value("exits", 0) > 0)
          exited +=
              fmt::format("\n  {} exited ({}); the end of {}:{}", p["name"].get<std::string>(),
                          p.value("last_exit", "?"), p["log"].get<std::string>(),
                          log_tail(p["log"].get<std::string>(), 8));
      if (!exited.empty() && !redis_why.empty() && !plan->stunnel_conf.empty())
        exited +=
            fmt::format("\n  the end of {}:{}", (c.state_dir / "logs" / "stunnel.log").string(),
                        log_tail(c.state_dir / "logs" / "stunnel.log", 6));
      if (!exited.empty()) {
        (void)stop(c);
        return make_error(errc::start::kFailed, "the stack was stopped:{}{}", exited,
                          redis_why.empty()
                              ? ""
                              : fmt::format("\n  redis at {}: {}", redis_where(addr), redis_why));
      }
      std::string failed;
      for (const auto& p : (*st)["processes"]) {
        std::string name = p["name"];
        if (name == "redis" || name == "stunnel") continue;
        std::string why;
        const Readiness r = service_ready(c.state_dir / "run" / (name + ".json"), &why);
        if (r != Readiness::kReady) not_ready.push_back(name);
        if (r == Readiness::kFailed)
          failed += fmt::format("\n  {} cannot become ready: {}", name, why);
      }
      if (not_ready.empty()) return with_persistence(c, *plan, *st);
      if (!failed.empty()) {
        (void)stop(c);
        return make_error(errc::start::kFailed, "the stack was stopped:{}", failed);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Not up: stop what was started and say why, service by service.
  std::string why;
  if (!redis_why.empty()) {
    // The Redis this host reaches: its log where this stack runs it, the stunnel's where the hop
    // is TLS, else only what the ping said (a shared Redis's log is on its own host).
    why += fmt::format(
        "\n  redis at {}{} does not answer PING as {}: {}", redis_where(addr),
        plan->tls_client ? fmt::format(" (the stunnel client to {}:{})", c.redis.host, c.redis.port)
                         : "",
        addr.user.empty() ? "the default user" : addr.user, redis_why);
    for (const char* log : {"redis.log", "stunnel.log"})
      if ((std::string_view(log) == "redis.log" && plan->run_redis) ||
          (std::string_view(log) == "stunnel.log" && !plan->stunnel_conf.empty()))
        why += fmt::format("; the end of {}:{}", (c.state_dir / "logs" / log).string(),
                           log_tail(c.state_dir / "logs" / log));
  }
  if (st)
    for (const auto& p : (*st)["processes"])
      if (p["name"] != "redis" && std::find(not_ready.begin(), not_ready.end(),
                                            p["name"].get<std::string>()) != not_ready.end())
        why += fmt::format("\n  {} is not ready; the end of {}:{}", p["name"].get<std::string>(),
                           p["log"].get<std::string>(), log_tail(p["log"].get<std::string>()));
  (void)stop(c);
  return make_error(
      errc::start::kTimeout, "the stack did not become ready within {} ms and was stopped{}",
      o.ready_timeout_ms, why.empty() ? fmt::format("; see {}/logs/", c.state_dir.string()) : why);
}

// Only a process proven to be this state dir's supervisor is signalled (stack_file.h).  A
// stack.json whose supervisor is gone is removed, under the lock, so no start is racing it.
Status stop(const config::Cluster& c, int timeout_ms) {
  auto st = read_stack(c.state_dir);
  if (!st.ok()) return st.error();
  if (!*st) return make_error(errc::stop::kNone, "no stack runs for {}", c.state_dir.string());
  const Proof proof = prove_supervisor(c.state_dir, **st);
  if (!proof.supervisor) {
    std::string cleaned =
        "; nothing was signalled; stack.json left: the lock is held (a start under way?)";
    const int lock = ::open(lock_file(c.state_dir).c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (lock < 0 || ::flock(lock, LOCK_EX | LOCK_NB) == 0) {
      std::error_code ec;
      fs::remove(stack_path(c), ec);
      fs::remove(stack_path(c).string() + ".sha256", ec);
      cleaned = "; nothing was signalled; stack.json removed";
    }
    if (lock >= 0) ::close(lock);
    return make_error(errc::stop::kStale, "no stack runs here (stale stack.json, {}){}", proof.why,
                      cleaned);
  }
  const pid_t pid = (**st)["supervisor_pid"].get<pid_t>();
  const long long started = (**st)["supervisor_start_time"].get<long long>();
  ::kill(pid, SIGTERM);
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (same_process(pid, started) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  if (same_process(pid, started))
    return make_error(errc::stop::kTimeout, "supervisor {} did not stop within {} ms", pid,
                      timeout_ms);
  return {};
}

}  // namespace h3pipe::supervisor
