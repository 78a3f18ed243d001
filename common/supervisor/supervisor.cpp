#include "common/supervisor/supervisor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include "common/artifacts/artifacts.h"
#include "common/core/bounded_file.h"
#include "common/core/json_parse.h"
#include "common/queue/redis.h"
#include "common/queue/redis_config.h"
#include "common/queue/server.h"
#include "common/supervisor/api_tls.h"
#include "common/supervisor/credentials.h"
#include "common/supervisor/redis_plan.h"
#include "common/supervisor/stack_file.h"
#include "common/supervisor/state_dir.h"
#include "common/supervisor/supervise.h"

namespace h3pipe::supervisor {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
namespace {

// Where Redis is, for a message: its socket or HOST:PORT.
std::string redis_where(const queue::RedisAddress& a) {
  return queue::is_unix_socket(a.host) ? "unix:" + a.host : fmt::format("{}:{}", a.host, a.port);
}

fs::path stack_path(const config::Cluster& c) {
  return stack_file(c.state_dir);
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
  // h3pipe-api with its own certificate (api_tls.h): over HTTPS, trusting that certificate.
  std::optional<ProbeAnswer> r;
  if (j.contains("tls_cert") && j["tls_cert"].is_string()) {
    r = https_get_trusting(bind, j["health_port"].get<int>(), "/readyz",
                           j["tls_cert"].get<std::string>(), 1000);
  } else {
    httplib::Client cli(bind, j["health_port"].get<int>());
    cli.set_connection_timeout(0, 300 * 1000);
    cli.set_read_timeout(1, 0);
    r.emplace();
    if (auto res = cli.Get("/readyz")) *r = {res->status, res->body, ""};
  }
  if (r->status == 200) return Readiness::kReady;
  if (r->status != 0 && r->body.rfind("failed: ", 0) == 0) {
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

// --host, or the config's only host.
Result<std::string> host_of(const config::Cluster& c, const StartOptions& o) {
  std::string host = o.host;
  if (host.empty()) {
    if (c.hosts.size() != 1)
      return make_error(errc::start::kHost, "--host is required: the config names {} hosts",
                        c.hosts.size());
    host = c.hosts.front().name;
  }
  if (!c.find_host(host))
    return make_error(errc::start::kHost, "--host {}: not a host in the config", host);
  return host;
}

// The state dir holds credentials, every prompt (receipts) and the AOF: its owner's alone.
// One owned by another user or open to others is refused before anything is read or written
// in it (state_dir.h); what the stack creates or reuses in it is made private.  One stack per
// state dir: returns the lock, which the supervisor holds for its whole life (the fd is
// inherited by the fork, closed on exec, so services never hold it).  Leftovers of an earlier
// stack are ended and its stack.json removed.
Result<int> claim_state_dir(const config::Cluster& c) {
  H3_TRY(check_state_dir(c.state_dir));
  std::error_code ec;
  fs::create_directories(c.state_dir, ec);
  if (ec)
    return make_error(errc::io::kMkdir, "cannot create {}: {}", c.state_dir.string(), ec.message());
  H3_TRY(check_state_dir(c.state_dir));  // what create_directories found or made
  ::chmod(c.state_dir.c_str(), 0700);
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
  return lock;
}

// The files of what this host runs for Redis (redis_plan.h): the ACL of the Redis it runs, the
// stunnel config of the TLS hop.
Status write_redis_files(const config::Cluster& c, const RedisPlan& plan) {
  if (c.redis.embedded) {
    if (auto acl = prepare_local_acl(c.state_dir); !acl.ok()) return acl.error();
  } else if (plan.run_redis) {
    H3_TRY(render_acl_file(plan.credentials_dir, c.state_dir / "redis" / "users.acl"));
  }
  if (plan.stunnel_conf.empty()) return {};
  if (stunnel_binary().empty())
    return make_error(errc::acl::kTls,
                      "stunnel is not installed (apt-get install stunnel4): the TLS hop to "
                      "Redis needs it, or set /redis/allow_plaintext on a trusted network");
  return write_private(plan.stunnel_conf, plan.stunnel_text);
}

// Forks the supervisor: a double fork (nobody's child), a session of its own, umask 077, its
// output in supervisor.log.  The lock goes with it.
Status daemonize(const config::Cluster& c, const StartOptions& o, const std::string& host,
                 const RedisPlan& plan, int lock) {
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(lock);
    return make_error(errc::start::kFork, "fork failed");
  }
  if (pid == 0) {
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    ::umask(077);  // logs, run files, Redis data: private to the owner
    int devnull = ::open("/dev/null", O_RDWR);
    ::dup2(devnull, 0);
    int log = ::open((c.state_dir / "supervisor.log").c_str(),
                     O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0600);
    ::dup2(log, 1);
    ::dup2(log, 2);
    supervise(c, o, host, plan);
  }
  ::close(lock);  // the supervisor holds its own copy
  ::waitpid(pid, nullptr, 0);
  return {};
}

// The processes of stack `st` that exited while start waited (issue #34 P1: not waited for),
// each with the end of its own log; "" when none did.
std::string exited_report(const config::Cluster& c, const RedisPlan& plan, const nlohmann::json& st,
                          const std::string& redis_why) {
  std::string exited;
  for (const auto& p : st["processes"])
    if (p.value("exits", 0) > 0)
      exited += fmt::format("\n  {} exited ({}); the end of {}:{}", p["name"].get<std::string>(),
                            p.value("last_exit", "?"), p["log"].get<std::string>(),
                            log_tail(p["log"].get<std::string>(), 8));
  if (!exited.empty() && !redis_why.empty() && !plan.stunnel_conf.empty())
    exited += fmt::format("\n  the end of {}:{}", (c.state_dir / "logs" / "stunnel.log").string(),
                          log_tail(c.state_dir / "logs" / "stunnel.log", 6));
  return exited;
}

// Each service of stack `st` not ready yet goes to `not_ready`; returns why those that cannot
// become ready say so ("" when none).
std::string readiness_report(const config::Cluster& c, const nlohmann::json& st,
                             std::vector<std::string>* not_ready) {
  std::string failed;
  for (const auto& p : st["processes"]) {
    std::string name = p["name"];
    if (name == "redis" || name == "stunnel") continue;
    std::string why;
    const Readiness r = service_ready(c.state_dir / "run" / (name + ".json"), &why);
    if (r != Readiness::kReady) not_ready->push_back(name);
    if (r == Readiness::kFailed) failed += fmt::format("\n  {} cannot become ready: {}", name, why);
  }
  return failed;
}

// Why a stack did not become ready, service by service.
std::string timeout_report(const config::Cluster& c, const RedisPlan& plan,
                           const queue::RedisAddress& addr, const std::string& redis_why,
                           const std::optional<nlohmann::json>& st,
                           const std::vector<std::string>& not_ready) {
  std::string why;
  if (!redis_why.empty()) {
    // The Redis this host reaches: its log where this stack runs it, the stunnel's where the hop
    // is TLS, else only what the ping said (a shared Redis's log is on its own host).
    why += fmt::format(
        "\n  redis at {}{} does not answer PING as {}: {}", redis_where(addr),
        plan.tls_client ? fmt::format(" (the stunnel client to {}:{})", c.redis.host, c.redis.port)
                        : "",
        addr.user.empty() ? "the default user" : addr.user, redis_why);
    for (const char* log : {"redis.log", "stunnel.log"})
      if ((std::string_view(log) == "redis.log" && plan.run_redis) ||
          (std::string_view(log) == "stunnel.log" && !plan.stunnel_conf.empty()))
        why += fmt::format("; the end of {}:{}", (c.state_dir / "logs" / log).string(),
                           log_tail(c.state_dir / "logs" / log));
  }
  if (st)
    for (const auto& p : (*st)["processes"])
      if (p["name"] != "redis" && std::find(not_ready.begin(), not_ready.end(),
                                            p["name"].get<std::string>()) != not_ready.end())
        why += fmt::format("\n  {} is not ready; the end of {}:{}", p["name"].get<std::string>(),
                           p["log"].get<std::string>(), log_tail(p["log"].get<std::string>()));
  return why;
}

// "Up" means Redis answers and every service answers /readyz 200.  A process that exits, or a
// service that cannot become ready, ends the wait; so does the deadline.  The stack is stopped
// unless it came up.
Result<nlohmann::json> wait_until_ready(const config::Cluster& c, const StartOptions& o,
                                        const RedisPlan& plan) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(o.ready_timeout_ms);
  std::optional<nlohmann::json> st;
  std::vector<std::string> not_ready;
  std::string redis_why;
  const queue::RedisAddress addr = supervisor_address(c, plan);
  while (Clock::now() < deadline) {
    st = running(c);
    if (st) {
      not_ready.clear();
      redis_why = redis_problem(addr);
      if (!redis_why.empty()) not_ready.push_back("redis");
      if (const std::string exited = exited_report(c, plan, *st, redis_why); !exited.empty()) {
        (void)stop(c);
        return make_error(errc::start::kFailed, "the stack was stopped:{}{}", exited,
                          redis_why.empty()
                              ? ""
                              : fmt::format("\n  redis at {}: {}", redis_where(addr), redis_why));
      }
      const std::string failed = readiness_report(c, *st, &not_ready);
      if (not_ready.empty()) return with_persistence(c, plan, *st);
      if (!failed.empty()) {
        (void)stop(c);
        return make_error(errc::start::kFailed, "the stack was stopped:{}", failed);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string why = timeout_report(c, plan, addr, redis_why, st, not_ready);
  (void)stop(c);
  return make_error(
      errc::start::kTimeout, "the stack did not become ready within {} ms and was stopped{}",
      o.ready_timeout_ms, why.empty() ? fmt::format("; see {}/logs/", c.state_dir.string()) : why);
}

}  // namespace

Result<nlohmann::json> start(const config::Cluster& c, const StartOptions& o) {
  auto host = host_of(c, o);
  if (!host.ok()) return host.error();
  // h3pipe-api's own certificate (/hosts/*/api_tls_*): refused before anything starts.
  H3_TRY(check_api_tls(c, *host));
  if (c.redis.embedded && ::access("/usr/bin/redis-server", X_OK) != 0)
    return make_error(errc::start::kRedis,
                      "/usr/bin/redis-server is missing; run scripts/setup.sh");
  auto lock = claim_state_dir(c);
  if (!lock.ok()) return lock.error();
  // How this host reaches Redis and what it runs for it (redis_plan.h), and the files for that.
  auto plan = plan_redis(c, *host);
  const Status files = plan.ok() ? write_redis_files(c, *plan) : Status(plan.error());
  if (!files.ok()) {
    ::close(*lock);
    return files.error();
  }
  H3_TRY(daemonize(c, o, *host, *plan, *lock));
  return wait_until_ready(c, o, *plan);
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
