#include "common/supervisor/supervisor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "common/artifacts/artifacts.h"
#include "common/queue/redis.h"

extern char** environ;

namespace h3pipe::supervisor {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
namespace {

volatile sig_atomic_t g_term = 0;
void on_term(int) { g_term = 1; }

struct Child {
  std::string name;
  std::vector<std::string> argv;
  fs::path log;
  pid_t pid = -1;
  int restarts = 0;
  Clock::time_point started{};
  Clock::time_point next_start{};
  int backoff_ms = 100;
};

pid_t spawn(const Child& c) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, c.log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> argv;
  for (const auto& a : c.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

bool redis_ping(const queue::RedisAddress& a) {
  auto r = queue::Redis::connect(a);
  if (!r.ok()) return false;
  auto p = (*r)->command({"PING"});
  return p.ok();
}

fs::path stack_file(const config::Cluster& c) { return c.state_dir / "stack.json"; }

bool alive(pid_t pid) { return pid > 0 && ::kill(pid, 0) == 0; }

// The supervisor proper; runs in the daemonized child and never returns.
[[noreturn]] void supervise(const config::Cluster& c, const StartOptions& o, const std::string& host, int redis_port) {
  fs::path logs = c.state_dir / "logs";
  std::error_code ec;
  fs::create_directories(logs, ec);
  fs::create_directories(c.state_dir / "redis", ec);
  fs::create_directories(c.state_dir / "run", ec);
  struct sigaction sa {};
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  std::vector<Child> children;
  {
    Child r{"redis", {"/usr/bin/redis-server", "--port", std::to_string(redis_port), "--bind", "127.0.0.1",
                      "--dir", (c.state_dir / "redis").string(), "--appendonly", "yes", "--appendfsync",
                      "everysec", "--save", "", "--protected-mode", "yes", "--daemonize", "no"},
            logs / "redis.log"};
    std::string pw = c.redis.password();
    if (!pw.empty()) {
      r.argv.push_back("--requirepass");
      r.argv.push_back(pw);
    }
    children.push_back(r);
  }
  std::string cfg = o.config_file.empty() ? "" : fs::absolute(o.config_file).string();
  auto service = [&](const std::string& svc, const std::string& instance, const std::string& pool) {
    Child ch{svc + "-" + instance, {(o.bin_dir / ("h3pipe-" + svc)).string()}, logs / (svc + "-" + instance + ".log")};
    if (!cfg.empty()) { ch.argv.push_back("--config"); ch.argv.push_back(cfg); }
    ch.argv.insert(ch.argv.end(), {"--host", host, "--state-dir", c.state_dir.string()});
    if (c.redis.embedded) {
      ch.argv.push_back("--redis");
      ch.argv.push_back(fmt::format("127.0.0.1:{}", redis_port));
    }
    if (!pool.empty()) { ch.argv.push_back("--pool"); ch.argv.push_back(pool); }
    children.push_back(ch);
  };
  for (const auto* p : c.pools_on(host)) {
    const char* svc = p->stage == config::StageKind::kEncode   ? "encoder"
                      : p->stage == config::StageKind::kSample ? "sampler"
                                                               : "decoder";
    service(svc, p->name, p->name);
  }
  if (c.hosts.size() > 1 && fs::exists(o.bin_dir / "h3pipe-transfer")) service("transfer", host, "");

  // Redis first, and wait for it, so services do not start into connection errors.  A shared
  // (non-embedded) Redis is not ours to run: the services use the config's address.
  queue::RedisAddress addr{c.redis.embedded ? "127.0.0.1" : c.redis.host, c.redis.embedded ? redis_port : c.redis.port,
                           c.redis.user, c.redis.password()};
  if (!c.redis.embedded) children[0].pid = 0;  // placeholder: never spawned, never restarted
  else {
    children[0].pid = spawn(children[0]);
    children[0].started = Clock::now();
  }
  for (int i = 0; i < 200 && !redis_ping(addr); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  for (std::size_t i = 1; i < children.size(); ++i) {
    children[i].pid = spawn(children[i]);
    children[i].started = Clock::now();
  }
  auto write_stack = [&] {
    nlohmann::json j = {{"supervisor_pid", ::getpid()}, {"host", host}, {"config", cfg},
                        {"state_dir", c.state_dir.string()}, {"redis", {{"host", addr.host}, {"port", addr.port}, {"embedded", c.redis.embedded}}},
                        {"artifact_root", c.artifact_root.string()}, {"output_root", c.output_root.string()}};
    for (const auto& ch : children)
      j["processes"].push_back({{"name", ch.name}, {"pid", ch.pid}, {"log", ch.log.string()}, {"restarts", ch.restarts}});
    (void)artifacts::write_atomic(stack_file(c), j.dump(2) + "\n");
  };
  write_stack();

  while (!g_term) {
    int status = 0;
    pid_t dead = ::waitpid(-1, &status, WNOHANG);
    auto now = Clock::now();
    bool changed = false;
    for (auto& ch : children) {
      if (ch.pid == 0) continue;  // the shared Redis placeholder
      if (dead > 0 && ch.pid == dead) {
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
    if (changed) write_stack();
    if (dead <= 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Graceful: services first (they drain), then Redis (AOF flushed on shutdown).
  for (std::size_t i = children.size(); i-- > 1;)
    if (children[i].pid > 0) ::kill(children[i].pid, SIGTERM);
  auto deadline = Clock::now() + std::chrono::seconds(15);
  for (std::size_t i = 1; i < children.size(); ++i) {
    while (children[i].pid > 0 && Clock::now() < deadline) {
      if (::waitpid(children[i].pid, nullptr, WNOHANG) == children[i].pid) children[i].pid = -1;
      else std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (children[i].pid > 0) { ::kill(children[i].pid, SIGKILL); ::waitpid(children[i].pid, nullptr, 0); }
  }
  if (c.redis.embedded && children[0].pid > 0) {
    ::kill(children[0].pid, SIGTERM);
    ::waitpid(children[0].pid, nullptr, 0);
  }
  fs::remove(stack_file(c), ec);
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
  std::ifstream in(stack_file(c));
  if (!in) return std::nullopt;
  nlohmann::json j;
  try { in >> j; } catch (...) { return std::nullopt; }
  if (!alive(j.value("supervisor_pid", -1))) return std::nullopt;
  return j;
}

Result<nlohmann::json> start(const config::Cluster& c, const StartOptions& o) {
  if (auto r = running(c)) return make_error("start.running", "a stack already runs for {} (supervisor pid {}); run `h3pipe stop` first",
                                             c.state_dir.string(), (*r)["supervisor_pid"].get<int>());
  std::string host = o.host;
  if (host.empty()) {
    if (c.hosts.size() != 1) return make_error("start.host", "--host is required: the config names {} hosts", c.hosts.size());
    host = c.hosts.front().name;
  }
  if (!c.find_host(host)) return make_error("start.host", "--host {}: not a host in the config", host);
  if (c.redis.embedded && ::access("/usr/bin/redis-server", X_OK) != 0)
    return make_error("start.redis", "/usr/bin/redis-server is missing; run scripts/setup.sh");
  std::error_code ec;
  fs::create_directories(c.state_dir, ec);
  fs::remove(stack_file(c), ec);
  int port = !c.redis.embedded ? c.redis.port : c.redis.port > 0 ? c.redis.port : free_loopback_port();
  pid_t pid = ::fork();
  if (pid < 0) return make_error("start.fork", "fork failed");
  if (pid == 0) {
    ::setsid();
    if (::fork() != 0) ::_exit(0);  // double fork: the supervisor is nobody's child
    int devnull = ::open("/dev/null", O_RDWR);
    ::dup2(devnull, 0);
    int log = ::open((c.state_dir / "supervisor.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(log, 1);
    ::dup2(log, 2);
    supervise(c, o, host, port);
  }
  ::waitpid(pid, nullptr, 0);
  // Wait for the stack file, Redis, and each service's readiness.
  auto deadline = Clock::now() + std::chrono::milliseconds(o.ready_timeout_ms);
  std::optional<nlohmann::json> st;
  while (Clock::now() < deadline) {
    st = running(c);
    if (st) {
      queue::RedisAddress addr{c.redis.embedded ? "127.0.0.1" : c.redis.host, port, c.redis.user, c.redis.password()};
      bool all = redis_ping(addr);
      for (const auto& p : (*st)["processes"]) {
        std::string name = p["name"];
        if (name == "redis") continue;
        if (!fs::exists(c.state_dir / "run" / (name + ".json"))) all = false;
      }
      if (all) return *st;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return make_error("start.timeout", "the stack did not become ready within {} ms; see {}/logs/", o.ready_timeout_ms,
                    c.state_dir.string());
}

Status stop(const config::Cluster& c, int timeout_ms) {
  auto st = running(c);
  if (!st) return make_error("stop.none", "no stack runs for {}", c.state_dir.string());
  pid_t pid = (*st)["supervisor_pid"].get<int>();
  ::kill(pid, SIGTERM);
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (alive(pid) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  if (alive(pid)) return make_error("stop.timeout", "supervisor {} did not stop within {} ms", pid, timeout_ms);
  return {};
}

}  // namespace h3pipe::supervisor
