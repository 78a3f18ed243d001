#include "common/supervisor/supervise.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "common/artifacts/artifacts.h"
#include "common/core/bounded_file.h"
#include "common/core/json_parse.h"
#include "common/queue/redis_config.h"
#include "common/queue/server.h"
#include "common/supervisor/credentials.h"
#include "common/supervisor/stack_file.h"

extern char** environ;

namespace h3pipe::supervisor {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

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

std::string redis_problem(const queue::RedisAddress& a) {
  auto r = queue::Redis::connect(a);
  if (!r.ok()) return r.error().message;
  const Status s = queue::ping(**r);
  return s.ok() ? "" : s.error().message;
}

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

// The supervisor's environment with `add` (NAME=VALUE) replacing or added to it.
std::vector<std::string> child_environment(const std::vector<std::string>& add) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string_view kv(*e);
    bool replaced = false;
    for (const auto& a : add)
      if (kv.substr(0, kv.find('=') + 1) == std::string_view(a).substr(0, a.find('=') + 1))
        replaced = true;
    if (!replaced) env_strings.emplace_back(kv);
  }
  env_strings.insert(env_strings.end(), add.begin(), add.end());
  return env_strings;
}

// fork + exec rather than posix_spawn: the child must die with the supervisor
// (PR_SET_PDEATHSIG; a supervisor killed with -9 leaves no invisible services behind, issue #14),
// and must not outlive a supervisor that died before the prctl took effect.
pid_t spawn(const Child& c) {
  std::vector<std::string> env_strings = child_environment(c.env);
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

// The children of one stack and their lives: Redis (and its stunnel) first up and last down,
// then every service of this host, each restarted when it dies.
class Supervision {
 public:
  Supervision(const config::Cluster& c, const StartOptions& o, const std::string& host,
              const RedisPlan& plan)
      : c_(c),
        o_(o),
        host_(host),
        plan_(plan),
        logs_(c.state_dir / "logs"),  // logs/, redis/, run/: made private by start()
        cfg_(o.config_file.empty() ? "" : fs::absolute(o.config_file).string()),
        addr_(supervisor_address(c, plan)) {}

  // What this host runs: Redis and its stunnel, a service per pool, transfer, the API.
  void plan_children() {
    add_infrastructure();
    for (const auto* p : c_.pools_on(host_)) {
      const char* svc = p->stage == config::StageKind::kEncode   ? "encoder"
                        : p->stage == config::StageKind::kSample ? "sampler"
                                                                 : "decoder";
      add_service(svc, p->name, p->name);
    }
    if (c_.hosts.size() > 1 && fs::exists(o_.bin_dir / "h3pipe-transfer"))
      add_service("transfer", host_, "");
    add_api();
  }

  // Redis (and its stunnel) first, and wait for it, so services do not start into connection
  // errors.  A shared Redis of another host is not ours to run: the services use the plan's way.
  void start_children() {
    for (std::size_t i = 0; i < n_infra_; ++i) {
      if (i == 0 && !plan_.run_redis) {
        children_[0].pid = 0;  // placeholder: never spawned, never restarted
        continue;
      }
      children_[i].pid = spawn(children_[i]);
      children_[i].started = Clock::now();
    }
    for (int i = 0; i < 200 && !redis_problem(addr_).empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    for (std::size_t i = n_infra_; i < children_.size(); ++i) {
      children_[i].pid = spawn(children_[i]);
      children_[i].started = Clock::now();
    }
    write_stack();
  }

  // Until SIGTERM: reap, restart, learn ports, keep stack.json current.
  void watch() {
    Clock::time_point next_port_check{};
    while (!g_term) {
      int status = 0;
      const pid_t dead = ::waitpid(-1, &status, WNOHANG);
      const auto now = Clock::now();
      bool changed = false;
      for (auto& ch : children_) {
        if (ch.pid == 0) continue;  // the shared Redis placeholder
        if (dead > 0 && ch.pid == dead) {
          record_exit(ch, status, now);
          changed = true;
        }
        if (ch.pid < 0 && now >= ch.next_start) {
          ch.pid = spawn(ch);
          ch.started = now;
          ch.restarts++;
          changed = true;
        }
      }
      for (auto& ch : children_)
        if (ch.pid > 0 && now >= next_port_check) changed = learn_port(ch, ch.pid) || changed;
      if (now >= next_port_check) next_port_check = now + std::chrono::milliseconds(100);
      if (changed) write_stack();
      if (dead <= 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Graceful: services first (they drain), then the stunnel, then Redis (AOF flushed on
  // shutdown); stack.json goes last.
  void stop_children() {
    for (std::size_t i = children_.size(); i-- > n_infra_;)
      if (children_[i].pid > 0) ::kill(children_[i].pid, SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(15);
    for (std::size_t i = children_.size(); i-- > 1;) {
      if (i == n_infra_ - 1 && children_[i].pid > 0) ::kill(children_[i].pid, SIGTERM);  // stunnel
      end_child(children_[i], deadline);
    }
    if (plan_.run_redis && children_[0].pid > 0) {
      ::kill(children_[0].pid, SIGTERM);
      ::waitpid(children_[0].pid, nullptr, 0);
    }
    std::error_code ec;
    fs::remove(stack_file(c_.state_dir), ec);
    fs::remove(stack_file(c_.state_dir).string() + ".sha256", ec);
  }

 private:
  // On its Unix socket in the 0700 state dir; TCP only where the plan needs it (issue #35 D1).
  void add_infrastructure() {
    Child r{.name = "redis",
            .argv = redis_server_argv("/usr/bin/redis-server", plan_.tcp_port,
                                      plan_.tcp_bind.empty() ? "127.0.0.1" : plan_.tcp_bind,
                                      plan_.socket, c_.state_dir / "redis"),
            .log = logs_ / "redis.log"};
    // Per-service ACL users, the default user off (credentials.h); rendered by start().
    // Redis rewrites its process title, so leftovers are found by this file (end_leftovers).
    r.argv.push_back("--pidfile");
    r.argv.push_back((c_.state_dir / "redis" / "redis.pid").string());
    children_.push_back(r);
    if (plan_.tls_server || plan_.tls_client)  // the TLS hop between hosts (redis_plan.h)
      children_.push_back({.name = "stunnel",
                           .argv = {stunnel_binary(), plan_.stunnel_conf.string()},
                           .log = logs_ / "stunnel.log",
                           .unlink_before = plan_.tls_client ? plan_.tunnel_socket : fs::path()});
    n_infra_ = children_.size();  // Redis and its stunnel: first up, last down
  }

  void add_service(const std::string& svc, const std::string& instance, const std::string& pool) {
    Child ch{.name = svc + "-" + instance,
             .argv = {(o_.bin_dir / ("h3pipe-" + svc)).string()},
             .log = logs_ / (svc + "-" + instance + ".log")};
    if (!cfg_.empty()) {
      ch.argv.push_back("--config");
      ch.argv.push_back(cfg_);
    }
    ch.argv.insert(ch.argv.end(), {"--host", host_, "--state-dir", c_.state_dir.string()});
    if (queue::is_unix_socket(plan_.local.host)) {
      ch.argv.push_back("--redis");
      ch.argv.push_back(plan_.local.host);
    }
    if (!pool.empty()) {
      ch.argv.push_back("--pool");
      ch.argv.push_back(pool);
    }
    if (const fs::path& creds = plan_.credentials_dir; !creds.empty()) {
      const RedisUser u = user_for(creds, svc);
      ch.env = {"H3PIPE_REDIS_USER=" + u.user,
                "H3PIPE_REDIS_PASSWORD_FILE=" + u.password_file.string()};
    }
    const config::Pool* p = pool.empty() ? nullptr : c_.find_pool(pool);
    ch.metrics_port = p ? p->metrics_port : c_.find_host(host_)->transfer_metrics_port;
    children_.push_back(ch);
  }

  // h3pipe-api (issue #37, docs/api.md) when built, on the host's api_bind and api_port
  // (loopback and a free port unless configured) and its Prometheus port api_metrics_port: it
  // logs in as the operator through this stack.json; its URL is in run/api-<host>.json (and
  // /readyz there); with the host's api_tls_cert/api_tls_key it serves HTTPS.
  void add_api() {
    if (!fs::exists(o_.bin_dir / "h3pipe-api")) return;
    const std::string name = "api-" + host_;
    Child ch{.name = name,
             .argv = {(o_.bin_dir / "h3pipe-api").string()},
             .log = logs_ / (name + ".log")};
    if (!cfg_.empty()) ch.argv.insert(ch.argv.end(), {"--config", cfg_});
    ch.argv.insert(ch.argv.end(),
                   {"--state-dir", c_.state_dir.string(), "--host", host_, "--run-file",
                    (c_.state_dir / "run" / (name + ".json")).string()});
    // Its Redis from this plan, as the services get theirs: it starts before stack.json is
    // written, and must never fall back to the config's host:port (issue #35 D1).
    if (queue::is_unix_socket(plan_.local.host))
      ch.argv.insert(ch.argv.end(), {"--redis", plan_.local.host});
    if (const fs::path& creds = plan_.credentials_dir; !creds.empty()) {
      const RedisUser u = user_for(creds, "operator");
      ch.env = {"H3PIPE_REDIS_USER=" + u.user,
                "H3PIPE_REDIS_PASSWORD_FILE=" + u.password_file.string()};
    }
    const config::Host& h = *c_.find_host(host_);
    if (!h.api_tls_cert.empty())  // its own certificate (checked by start: api_tls.h)
      ch.argv.insert(ch.argv.end(), {"--tls-cert", h.api_tls_cert, "--tls-key", h.api_tls_key});
    ch.metrics_port = h.api_metrics_port;
    children_.push_back(ch);
  }

  // A child that died: how (stack.json), and when to start it again.
  void record_exit(Child& ch, int status, Clock::time_point now) {
    learn_port(ch, ch.pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) == kExitMetricsPortInUse) forget_port(ch);
    ch.exits++;  // `start` stops waiting on a service that exited (issue #34 P1)
    ch.last_exit = WIFSIGNALED(status) ? fmt::format("killed by signal {}", WTERMSIG(status))
                                       : fmt::format("exit {}", WEXITSTATUS(status));
    // A death within 2 s of its start is a crash loop: back off exponentially (100 ms .. 5 s).
    // A process that had been up longer was killed while healthy (OOM killer, an operator, a
    // chaos run): restart it at once, so its leased task resumes without waiting out the lease.
    const bool quick = now - ch.started < std::chrono::seconds(2);
    ch.backoff_ms = quick ? std::min(std::max(ch.backoff_ms, 50) * 2, 5000) : 20;
    ch.next_start = now + std::chrono::milliseconds(ch.backoff_ms);
    ch.pid = -1;
  }

  // A port a service's first run chose is kept: every later start gets it as --metrics-port.
  bool learn_port(Child& ch, pid_t pid) {
    if (ch.metrics_port > 0 || ch.name.rfind("redis", 0) == 0) return false;
    ch.metrics_port = metrics_port_of(c_.state_dir / "run" / (ch.name + ".json"), pid);
    if (ch.metrics_port <= 0) return false;
    ch.argv.insert(ch.argv.end(), {"--metrics-port", std::to_string(ch.metrics_port)});
    return true;
  }
  // ... unless another process took it while the service was down (the runner exits 98 when it
  // cannot bind it): the next start picks a free one again, learned the same way.
  static void forget_port(Child& ch) {
    const auto it = std::find(ch.argv.begin(), ch.argv.end(), "--metrics-port");
    if (it == ch.argv.end() || it + 1 == ch.argv.end()) return;  // the config's port: kept
    std::fprintf(stderr, "supervisor: %s: metrics port %s is taken; restarting on a free one\n",
                 ch.name.c_str(), (it + 1)->c_str());
    ch.argv.erase(it, it + 2);
    ch.metrics_port = 0;
  }

  // Waits for a signalled child until `deadline`, then kills it.
  static void end_child(Child& ch, Clock::time_point deadline) {
    while (ch.pid > 0 && Clock::now() < deadline) {
      if (::waitpid(ch.pid, nullptr, WNOHANG) == ch.pid)
        ch.pid = -1;
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (ch.pid > 0) {
      ::kill(ch.pid, SIGKILL);
      ::waitpid(ch.pid, nullptr, 0);
    }
  }

  void write_stack() {
    nlohmann::json j = {{"supervisor_pid", ::getpid()},
                        {"supervisor_start_time", process_start_time(::getpid())},
                        {"host", host_},
                        {"config", cfg_},
                        {"state_dir", c_.state_dir.string()},
                        {"redis",
                         {{"host", addr_.host},
                          {"port", addr_.port},
                          {"embedded", c_.redis.embedded},
                          {"managed", plan_.run_redis && !c_.redis.embedded},
                          {"tcp_port", plan_.tcp_port},
                          {"tls", plan_.tls_server   ? "server"
                                  : plan_.tls_client ? "client"
                                                     : "off"},
                          {"credentials_dir", plan_.credentials_dir.string()}}},
                        {"artifact_root", c_.artifact_root.string()},
                        {"output_root", c_.output_root.string()}};
    for (const auto& ch : children_)
      j["processes"].push_back({{"name", ch.name},
                                {"pid", ch.pid},
                                {"metrics_port", ch.metrics_port},
                                {"log", ch.log.string()},
                                {"restarts", ch.restarts},
                                {"exits", ch.exits},
                                {"last_exit", ch.last_exit}});
    (void)artifacts::write_atomic(stack_file(c_.state_dir), j.dump(2) + "\n");
  }

  const config::Cluster& c_;
  const StartOptions& o_;
  const std::string& host_;
  const RedisPlan& plan_;
  const fs::path logs_;
  const std::string cfg_;
  const queue::RedisAddress addr_;
  std::vector<Child> children_;
  std::size_t n_infra_ = 0;
};

}  // namespace

void supervise(const config::Cluster& c, const StartOptions& o, const std::string& host,
               const RedisPlan& plan) {
  // The name `stop` checks (stack_file.h), beside the lock and the start time.
  ::prctl(PR_SET_NAME, kSupervisorComm);
  struct sigaction sa {};
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  Supervision s(c, o, host, plan);
  s.plan_children();
  s.start_children();
  s.watch();
  s.stop_children();
  ::_exit(0);
}

}  // namespace h3pipe::supervisor
