// How a stack reaches Redis (issue #34 P1, P2, P4 and items 1-2; issue #35 D1), with real
// redis-server and stunnel processes and the real CLI (build/bin/h3pipe):
//   - the embedded Redis is on a Unix socket in the 0700 state dir: a listener on the port Redis
//     would have used collects no password, before or after a kill -9 of Redis, with one host or
//     with two hosts' stacks on one machine (D1);
//   - `start` stops waiting when a service it started exits and shows that service's log (P1);
//   - a managed shared Redis on two "hosts" (127.0.0.1 and 127.0.0.2, a state dir each):
//     `credentials init/export`, the Redis host's start runs Redis + the stunnel TLS server, the
//     other host's start an stunnel client; only the Redis host holds redis-admin (P2); plain
//     RESP to the TLS port gets nothing; a job crosses both hosts through the hop.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "common/supervisor/redis_plan.h"
#include "tests/support/test_support.h"

namespace h3pipe {
namespace {
namespace ts = test_support;
namespace fs = std::filesystem;
using nlohmann::json;

// A hostile local listener: accepts on 127.0.0.1:port and keeps every byte it is sent.
class Squatter {
 public:
  explicit Squatter(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    bound_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd_, 64) == 0;
    if (bound_) thread_ = std::thread([this] { loop(); });
  }
  ~Squatter() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (int c : clients_) ::close(c);
    ::close(fd_);
  }
  bool bound() const { return bound_; }
  int accepted() const { return accepted_; }
  std::string received() {
    std::lock_guard<std::mutex> l(mu_);
    return data_;
  }

 private:
  void loop() {
    while (!stop_) {
      std::vector<pollfd> p = {{fd_, POLLIN, 0}};
      for (int c : clients_) p.push_back({c, POLLIN, 0});
      if (::poll(p.data(), p.size(), 50) <= 0) continue;
      if (p[0].revents & POLLIN) {
        const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) {
          clients_.push_back(c);
          ++accepted_;
        }
      }
      for (std::size_t i = 1; i < p.size(); ++i)
        if (p[i].revents & (POLLIN | POLLHUP)) {
          char buf[4096];
          const ssize_t n = ::read(p[i].fd, buf, sizeof buf);
          if (n > 0) {
            std::lock_guard<std::mutex> l(mu_);
            data_.append(buf, static_cast<std::size_t>(n));
          }
        }
    }
  }
  int fd_ = -1;
  bool bound_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::vector<int> clients_;
  std::thread thread_;
  std::mutex mu_;
  std::string data_;
};

// Stops the stacks of these configs when the test ends, passed or not.
struct StopOnExit {
  std::vector<fs::path> configs;
  ~StopOnExit() {
    for (const auto& c : configs)
      ts::sh(ts::bin("h3pipe") + " --config " + c.string() + " stop >/dev/null 2>&1");
  }
};

json sim_pools(const std::vector<std::pair<std::string, std::string>>& host_stage) {
  json pools = json::array();
  for (const auto& [host, stage] : host_stage)
    pools.push_back({{"name", host + "-" + stage},
                     {"host", host},
                     {"stage", stage},
                     {"profiles", {{"default", {{"kind", "fixed"}, {"seconds", 0.01}}}}}});
  return pools;
}

json base(const fs::path& state) {
  return {{"name", "shared-redis"},
          {"state_dir", state.string()},
          {"stages",
           {{"encode", {{"runtime", {{"name", "sim"}}}}},
            {"sample", {{"runtime", {{"name", "sim"}}}}},
            {"decode", {{"runtime", {{"name", "sim"}}}}}}},
          {"queue", {{"lease_ms", 3000}, {"renew_ms", 500}, {"sweep_ms", 200}, {"block_ms", 50}}}};
}

fs::path write(const fs::path& p, const json& j) {
  std::ofstream(p) << j.dump(2);
  return p;
}

std::string cli(const fs::path& config) {
  return ts::bin("h3pipe") + " --config " + config.string();
}

const std::string kJob =
    R"({"jobId":"j1","prompt":"x","width":64,"height":64,"frames":9,"fps":12,"seed":1})";

// One host "h" with the embedded Redis on 127.0.0.1:port (which the stack must leave alone) and
// sim pools, in dir/cluster.json with its state in dir/state.
fs::path one_host_embedded(const fs::path& dir, int port) {
  json cfg = base(dir / "state");
  cfg["redis"] = {{"embedded", true}, {"port", port}};
  cfg["hosts"] = {{{"name", "h"}}};
  cfg["pools"] = sim_pools({{"h", "encode"}, {"h", "sample"}, {"h", "decode"}});
  return write(dir / "cluster.json", cfg);
}

int redis_pid(const fs::path& state) {
  json j;
  std::ifstream(state / "stack.json") >> j;
  for (const auto& p : j["processes"])
    if (p["name"] == "redis") return p["pid"];
  return -1;
}

// #35 D1: a local user that listens on the port the config names for the embedded Redis (or the
// one a restart of Redis frees) collects nothing: Redis, the services and the CLI use the Unix
// socket in the state dir, before and after Redis is killed with -9.
TEST(SharedRedis, PortSquatterGetsNoPasswordFromTheLocalStack) {
  ts::TempDir dir;
  const int port = ts::free_tcp_port();
  const fs::path config = one_host_embedded(dir.path(), port);
  StopOnExit guard{{config}};
  auto [rc, out] = ts::sh(cli(config) + " start 2>&1");
  ASSERT_EQ(rc, 0) << out;
  // Nothing of the stack holds the port: the squatter gets it while the stack runs.
  Squatter squatter(port);
  ASSERT_TRUE(squatter.bound()) << "the stack listens on 127.0.0.1:" << port;
  std::ofstream(dir.path() / "b.jsonl") << kJob << "\n";
  auto run = ts::sh(cli(config) + " run " + (dir.path() / "b.jsonl").string() + " 2>&1");
  EXPECT_EQ(run.first, 0) << run.second;
  // Redis killed with -9 and restarted by the supervisor: still the socket, still nothing sent.
  const int before = redis_pid(dir.path() / "state");
  ASSERT_GT(before, 0);
  ::kill(before, SIGKILL);
  ASSERT_TRUE(ts::wait_for(
      [&] {
        const int now = redis_pid(dir.path() / "state");
        return now > 0 && now != before;
      },
      20));
  std::ofstream(dir.path() / "b2.jsonl")
      << R"({"jobId":"j2","prompt":"y","width":64,"height":64,"frames":9,"fps":12,"seed":2})"
      << "\n";
  run = ts::sh(cli(config) + " run " + (dir.path() / "b2.jsonl").string() + " 2>&1");
  EXPECT_EQ(run.first, 0) << run.second;
  EXPECT_EQ(ts::sh(cli(config) + " status >/dev/null 2>&1").first, 0);
  EXPECT_EQ(squatter.accepted(), 0);
  EXPECT_EQ(squatter.received().find("AUTH"), std::string::npos) << squatter.received();
  EXPECT_EQ(squatter.received(), "");
  struct stat sb {};
  ASSERT_EQ(::stat((dir.path() / "state" / "redis" / "redis.sock").c_str(), &sb), 0);
  EXPECT_TRUE(S_ISSOCK(sb.st_mode));
  EXPECT_EQ(sb.st_mode & 077, 0u) << "the socket is its owner's";
  EXPECT_EQ(ts::sh(cli(config) + " stop 2>&1").first, 0);
}

// The NUL-separated strings of /proc/PID/FILE (cmdline, environ).
std::vector<std::string> proc_strings(pid_t pid, const char* file) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + file, std::ios::binary);
  std::vector<std::string> out;
  for (std::string s; std::getline(in, s, '\0');) out.push_back(s);
  return out;
}

// #35 D1, h3pipe-api: the supervisor starts its services before it writes stack.json, and the API
// found its Redis only through stack.json: until then (or while stack.json could not be read) it
// fell back to the config's 127.0.0.1:port, and a squatter there got its login and its first
// commands (XGROUP CREATE h3pipe:events webhooks, ZRANGE webhooks:due, HSET api:hosts; seen once
// in PortSquatterGetsNothingFromTwoHostsOnOneMachine).  Now `start` hands it the stack's socket and
// the operator's credentials as the services get theirs.  Deterministic: the API is started again
// exactly as the supervisor started it (its argv and H3PIPE_ environment), with stack.json moved
// aside (the supervisor held by SIGSTOP meanwhile): it must be ready through the socket and send
// the squatter nothing.
TEST(SharedRedis, PortSquatterGetsNothingFromAnApiStartedBeforeStackJson) {
  ts::TempDir dir;
  const int port = ts::free_tcp_port();
  Squatter squatter(port);
  ASSERT_TRUE(squatter.bound());
  const fs::path config = one_host_embedded(dir.path(), port);
  StopOnExit guard{{config}};
  auto [rc, out] = ts::sh(cli(config) + " start 2>&1");
  ASSERT_EQ(rc, 0) << out;
  const fs::path stack_json = dir.path() / "state" / "stack.json";
  json stack;
  std::ifstream(stack_json) >> stack;
  pid_t api = -1;
  for (const auto& p : stack["processes"])
    if (p["name"] == "api-h") api = p["pid"];
  ASSERT_GT(api, 0) << stack["processes"].dump();
  std::vector<std::string> argv = proc_strings(api, "cmdline");
  const auto flag = std::find(argv.begin(), argv.end(), "--redis");
  ASSERT_NE(flag, argv.end()) << "the supervisor names the API's Redis";
  ASSERT_NE(flag + 1, argv.end());
  EXPECT_EQ(flag[1], stack["redis"]["host"].get<std::string>()) << "the stack's socket";
  for (std::size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == "--run-file") argv[i + 1] = (dir.path() / "api-again.json").string();
  std::vector<std::pair<std::string, std::string>> env;  // its H3PIPE_ variables, for the spawn
  for (const auto& kv : proc_strings(api, "environ"))
    if (const auto eq = kv.find('='); kv.rfind("H3PIPE_", 0) == 0 && eq != std::string::npos)
      env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));

  const int supervisor = stack["supervisor_pid"];
  ASSERT_EQ(::kill(supervisor, SIGSTOP), 0);
  struct Resume {
    int pid;
    fs::path held, back;
    ~Resume() {
      std::error_code ec;
      fs::rename(held, back, ec);
      ::kill(pid, SIGCONT);
    }
  } resume{supervisor, stack_json.string() + ".held", stack_json};
  fs::rename(stack_json, resume.held);
  for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  const pid_t again = ts::spawn(argv, (dir.path() / "api-again.log").string());
  for (const auto& [k, v] : env) ::unsetenv(k.c_str());
  ASSERT_GT(again, 0);
  struct End {  // whatever fails below
    pid_t pid;
    ~End() {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
  } end{again};
  int again_port = 0;
  const bool up = ts::wait_for(
      [&] {
        std::ifstream f(dir.path() / "api-again.json");
        const json r = json::parse(f, nullptr, /*allow_exceptions=*/false);
        again_port = r.is_object() ? r.value("health_port", 0) : 0;
        return again_port > 0;
      },
      20);
  std::string answer;
  if (up)
    ts::wait_for(
        [&] {
          answer = ts::sh("curl -s -m 5 http://127.0.0.1:" + std::to_string(again_port) + "/readyz")
                       .second;
          return answer == "ready\n";
        },
        10);
  ASSERT_TRUE(up) << "the API started again writes its run file";
  EXPECT_EQ(answer, "ready\n") << "ready through the socket without stack.json";
  EXPECT_EQ(squatter.accepted(), 0) << squatter.received();
  EXPECT_EQ(squatter.received(), "");
}

// #35 D1 residual: a config that names two hosts, both started on this machine (a state dir
// each, as a rehearsal or netns test does).  The embedded Redis used to listen on 127.0.0.1:port
// too whenever the config named more than one host, although nothing of either stack connects
// there (each host's start runs its own Redis, its services use its socket): a squatter on the
// port then got the AUTH of anything pointed at it, and before that, the port held by the squatter
// stopped `start`.  Now no stack listens there and no byte reaches the squatter through starts,
// a job, a kill -9 of Redis, `status` and `stop`.
TEST(SharedRedis, PortSquatterGetsNothingFromTwoHostsOnOneMachine) {
  ts::TempDir dir;
  const int port = ts::free_tcp_port();
  Squatter squatter(port);  // first: the port the config names, before any stack binds it
  ASSERT_TRUE(squatter.bound());
  std::vector<fs::path> configs;
  const json hosts = {{{"name", "a"}, {"transfer_port", ts::free_tcp_port()}},
                      {{"name", "b"}, {"transfer_port", ts::free_tcp_port()}}};
  for (const std::string h : {"a", "b"}) {
    json cfg = base(dir.path() / ("state-" + h));
    cfg["redis"] = {{"embedded", true}, {"port", port}};
    cfg["hosts"] = hosts;
    cfg["transfer"] = {{"curve", false}};
    cfg["pools"] = sim_pools({{"a", "encode"}, {"a", "sample"}, {"a", "decode"}, {"b", "sample"}});
    configs.push_back(write(dir.path() / ("cluster-" + h + ".json"), cfg));
  }
  StopOnExit guard{configs};
  for (const std::string h : {"a", "b"}) {
    auto [rc, out] = ts::sh(cli(configs[h == "a" ? 0 : 1]) + " start --host " + h + " 2>&1");
    ASSERT_EQ(rc, 0) << "host " << h << ":\n" << out;
    EXPECT_EQ(out.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << out;
    json st;
    std::ifstream(dir.path() / ("state-" + h) / "stack.json") >> st;
    EXPECT_EQ(st["redis"]["tcp_port"], 0) << "host " << h << "'s Redis listens on TCP";
  }
  std::ofstream(dir.path() / "b.jsonl") << kJob << "\n";
  auto run = ts::sh(cli(configs[0]) + " run " + (dir.path() / "b.jsonl").string() + " 2>&1");
  EXPECT_EQ(run.first, 0) << run.second;
  const int before = redis_pid(dir.path() / "state-a");
  ASSERT_GT(before, 0);
  ::kill(before, SIGKILL);
  ASSERT_TRUE(ts::wait_for(
      [&] {
        const int now = redis_pid(dir.path() / "state-a");
        return now > 0 && now != before;
      },
      20));
  // The new redis-server writes its pid file before it has loaded the AOF and listens: status
  // answers once it does (exit 5 until then).
  EXPECT_TRUE(ts::wait_for(
      [&] { return ts::sh(cli(configs[0]) + " status >/dev/null 2>&1").first == 0; }, 20));
  EXPECT_EQ(ts::sh(cli(configs[1]) + " status >/dev/null 2>&1").first, 0);
  for (const auto& c : configs) EXPECT_EQ(ts::sh(cli(c) + " stop 2>&1").first, 0);
  EXPECT_EQ(squatter.accepted(), 0);
  EXPECT_EQ(squatter.received(), "");
}

// #34 P1: a service that exits ends the wait at once, with its own last log lines; no blame on a
// redis.log this stack never had.
TEST(SharedRedis, StartStopsWaitingWhenAServiceExits) {
  ts::TempDir dir;
  json cfg = base(dir.path() / "state");
  cfg["redis"] = {{"host", "127.0.0.1"}, {"port", ts::free_tcp_port()}, {"embedded", false}};
  cfg["hosts"] = {{{"name", "h"}}};
  cfg["pools"] = sim_pools({{"h", "encode"}, {"h", "sample"}, {"h", "decode"}});
  const fs::path config = write(dir.path() / "cluster.json", cfg);
  StopOnExit guard{{config}};
  const auto t0 = std::chrono::steady_clock::now();
  auto [rc, out] = ts::sh(cli(config) + " start 2>&1");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(rc, 0) << out;
  EXPECT_LT(s, 20.0) << "start waited out its 30 s timeout:\n" << out;
  EXPECT_NE(out.find("exited (exit"), std::string::npos) << out;
  EXPECT_NE(out.find("stopped (rc 3)"), std::string::npos) << "the service's own log:\n" << out;
  EXPECT_NE(out.find("onnection refused"), std::string::npos) << out;
  EXPECT_EQ(out.find("(empty log)"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir.path() / "state" / "stack.json")) << "the stack was stopped";
}

std::set<std::string> names_in(const fs::path& d) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(d)) out.insert(e.path().filename().string());
  return out;
}

// #34 items 1-2, P2, P4: the shared Redis run by h3pipe, its credentials made and handed out by
// h3pipe, the hop between hosts TLS through stunnel.
TEST(SharedRedis, ManagedRedisAcrossTwoHostsThroughTheStunnelHop) {
  if (supervisor::stunnel_binary().empty())
    GTEST_SKIP() << "stunnel4 is not installed (apt-get install stunnel4)";
  ts::TempDir dir;
  const fs::path d = dir.path();
  const int redis_port = ts::free_tcp_port();
  json cfg = base(d / "state-r");
  cfg["redis"] = {{"host", "127.0.0.1"},
                  {"port", redis_port},
                  {"embedded", false},
                  {"managed", true},
                  {"credentials_dir", "creds"}};
  cfg["hosts"] = {{{"name", "r"},
                   {"address", "127.0.0.1"},
                   {"bind", "127.0.0.1"},
                   {"transfer_port", ts::free_tcp_port()},
                   {"transfer_public_key_file", "keys/r.pub"},
                   {"transfer_secret_key_file", "keys/r.key"}},
                  {{"name", "s"},
                   {"address", "127.0.0.2"},
                   {"bind", "127.0.0.2"},
                   {"transfer_port", ts::free_tcp_port()},
                   {"transfer_public_key_file", "keys/s.pub"},
                   {"transfer_secret_key_file", "keys/s.key"}}};
  cfg["pools"] = sim_pools({{"s", "encode"}, {"s", "sample"}, {"r", "decode"}});
  cfg["links"] = {{{"from", "s"}, {"to", "r"}, {"gbps", 1.0}}};
  const fs::path made = write(d / "cluster.json", cfg);
  for (const char* h : {"r", "s"})
    ASSERT_EQ(ts::sh(ts::bin("h3pipe") + " keygen --dir " + (d / "keys").string() + " --name " + h +
                     " >/dev/null 2>&1")
                  .first,
              0);

  // credentials init: every password, the CA, the server pair and s's client pair, private.
  auto [irc, iout] = ts::sh(cli(made) + " credentials init 2>&1");
  ASSERT_EQ(irc, 0) << iout;
  EXPECT_EQ(fs::status(d / "creds").permissions() & fs::perms::all, fs::perms::owner_all);
  for (const auto& e : fs::directory_iterator(d / "creds"))
    EXPECT_EQ(fs::status(e.path()).permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::owner_write)
        << e.path();
  EXPECT_EQ(
      names_in(d / "creds"),
      (std::set<std::string>{
          "redis-decoder.password", "redis-encoder.password", "redis-operator.password",
          "redis-sampler.password", "redis-transfer.password", "redis-ca.pem", "redis-ca.key",
          "redis-server.pem", "redis-server.key", "redis-client-s.pem", "redis-client-s.key"}));
  // A second init keeps everything (a running Redis keeps its users).
  const auto op = d / "creds/redis-operator.password";
  const std::string op_before = ts::sh("cat " + op.string()).second;
  EXPECT_EQ(ts::sh(cli(made) + " credentials init >/dev/null 2>&1").first, 0);
  EXPECT_EQ(ts::sh("cat " + op.string()).second, op_before);

  // export: exactly what each host needs; never the CA key, never admin off the Redis host.
  auto [src, sout] = ts::sh(cli(made) + " credentials export --host s -o " +
                            (d / "host-s/creds").string() + " 2>&1");
  ASSERT_EQ(src, 0) << sout;
  EXPECT_EQ(names_in(d / "host-s/creds"),
            (std::set<std::string>{"redis-encoder.password", "redis-sampler.password",
                                   "redis-transfer.password", "redis-operator.password",
                                   "redis-ca.pem", "redis-client-s.pem", "redis-client-s.key"}));
  auto [rrc, rout] = ts::sh(cli(made) + " credentials export --host r -o " +
                            (d / "host-r/creds").string() + " 2>&1");
  ASSERT_EQ(rrc, 0) << rout;
  // redis-admin is nowhere yet: the Redis host's start makes it there.
  EXPECT_FALSE(names_in(d / "host-r/creds").count("redis-admin.password"));
  EXPECT_TRUE(names_in(d / "host-r/creds").count("redis-server.key"));
  EXPECT_FALSE(names_in(d / "host-r/creds").count("redis-ca.key"));
  EXPECT_NE(ts::sh(cli(made) + " credentials export --host nope -o " + (d / "x").string() + " 2>&1")
                .second.find("not a host"),
            std::string::npos);

  // Each "machine": the same config, its own credentials folder and state dir.
  auto host_config = [&](const std::string& h) {
    json c = cfg;
    c["state_dir"] = (d / ("state-" + h)).string();
    c["redis"]["credentials_dir"] = (d / ("host-" + h) / "creds").string();
    for (auto& hj : c["hosts"])
      for (const char* k : {"transfer_public_key_file", "transfer_secret_key_file"})
        hj[k] = (d / hj[k].get<std::string>()).string();
    return write(d / ("cluster-" + h + ".json"), c);
  };
  const fs::path cr = host_config("r"), cs = host_config("s");
  StopOnExit guard{{cs, cr}};
  auto [r1, o1] = ts::sh(cli(cr) + " start --host r 2>&1");
  ASSERT_EQ(r1, 0) << o1 << ts::sh("cat " + (d / "state-r/logs/*.log").string()).second;
  EXPECT_NE(o1.find("TLS through stunnel"), std::string::npos) << o1;
  EXPECT_TRUE(fs::exists(d / "host-r/creds/redis-admin.password"));
  EXPECT_FALSE(fs::exists(d / "creds/redis-admin.password"));
  json sr;
  std::ifstream(d / "state-r/stack.json") >> sr;
  EXPECT_EQ(sr["redis"]["tls"], "server");
  EXPECT_EQ(sr["redis"]["tcp_port"], 0) << "redis-server itself is on its socket only";
  // Plain RESP to the TLS port: no reply a Redis client could read as Redis.
  {
    auto plain = queue::Redis::connect({"127.0.0.1", redis_port, "", "", 2000});
    const bool answered = plain.ok() && (*plain)->command({"PING"}).ok();
    EXPECT_FALSE(answered);
  }
  auto [r2, o2] = ts::sh(cli(cs) + " start --host s 2>&1");
  ASSERT_EQ(r2, 0) << o2 << ts::sh("cat " + (d / "state-s/logs/*.log").string()).second;
  json ss;
  std::ifstream(d / "state-s/stack.json") >> ss;
  EXPECT_EQ(ss["redis"]["tls"], "client");
  EXPECT_EQ(fs::path(ss["redis"]["host"].get<std::string>()), d / "state-s/redis/tunnel.sock");
  EXPECT_FALSE(fs::exists(d / "host-s/creds/redis-admin.password"));
  // A job from host s's CLI: encode on r, sample on s, decode on r, all through the hop.
  std::ofstream(d / "b.jsonl") << kJob << "\n";
  auto [jr, jo] = ts::sh(cli(cs) + " run " + (d / "b.jsonl").string() + " --background 2>&1");
  ASSERT_EQ(jr, 0) << jo;
  std::string run_id = jo.substr(0, jo.find_last_not_of("\n") + 1);
  run_id = run_id.substr(run_id.rfind('\n') + 1);
  auto [wr, wo] = ts::sh(cli(cs) + " wait " + run_id + " --timeout 60 2>&1");
  EXPECT_EQ(wr, 0) << wo << ts::sh("tail -n 20 " + (d / "state-*/logs/*.log").string()).second;
  auto [pr, po] = ts::sh(cli(cs) + " preflight --host s 2>&1");
  EXPECT_NE(po.find("PASS    redis.tls"), std::string::npos) << po;
  EXPECT_EQ(ts::sh(cli(cs) + " stop 2>&1").first, 0);
  EXPECT_EQ(ts::sh(cli(cr) + " stop 2>&1").first, 0);
}

// #35 D1 between hosts: a TLS server whose certificate is not the cluster's (another CA, the
// right address) in front of a squatter gets no byte of RESP from a host's stack, so no AUTH: the
// stunnel client refuses the handshake, and `start` says why.
TEST(SharedRedis, AServerOfAnotherCaGetsNoPassword) {
  const std::string stunnel = supervisor::stunnel_binary();
  if (stunnel.empty()) GTEST_SKIP() << "stunnel4 is not installed (apt-get install stunnel4)";
  ts::TempDir dir;
  const fs::path d = dir.path();
  const int redis_port = ts::free_tcp_port();
  json cfg = base(d / "state-s");
  cfg["redis"] = {{"host", "127.0.0.1"},
                  {"port", redis_port},
                  {"embedded", false},
                  {"managed", true},
                  {"credentials_dir", (d / "host-s").string()}};
  cfg["hosts"] = {{{"name", "r"},
                   {"address", "127.0.0.1"},
                   {"bind", "127.0.0.1"},
                   {"transfer_port", ts::free_tcp_port()}},
                  {{"name", "s"}, {"address", "127.0.0.2"}, {"bind", "127.0.0.2"}}};
  cfg["pools"] = sim_pools({{"s", "encode"}, {"s", "sample"}, {"r", "decode"}});
  cfg["links"] = {{{"from", "s"}, {"to", "r"}, {"gbps", 1.0}}};
  cfg["transfer"] = {{"curve", false}};
  const fs::path config = write(d / "cluster.json", cfg);
  ASSERT_EQ(ts::sh(cli(config) + " credentials init --dir " + (d / "ours").string() + " >/dev/null")
                .first,
            0);
  ASSERT_EQ(ts::sh(cli(config) + " credentials export --dir " + (d / "ours").string() +
                   " --host s -o " + (d / "host-s").string() + " >/dev/null")
                .first,
            0);
  // The rogue: a CA of its own, a server certificate for the right address, in front of a
  // listener that keeps every byte.
  ASSERT_EQ(
      ts::sh(cli(config) + " credentials init --dir " + (d / "rogue").string() + " >/dev/null")
          .first,
      0);
  const int sink_port = ts::free_tcp_port();
  Squatter sink(sink_port);
  ASSERT_TRUE(sink.bound());
  const fs::path conf = d / "rogue.conf";
  std::ofstream(conf) << fmt::format(
      "foreground = yes\npid =\nsyslog = no\n[rogue]\naccept = 127.0.0.1:{}\n"
      "connect = 127.0.0.1:{}\ncert = {}\nkey = {}\n",
      redis_port, sink_port, (d / "rogue/redis-server.pem").string(),
      (d / "rogue/redis-server.key").string());
  const pid_t rogue = ts::spawn({stunnel, conf.string()}, (d / "rogue.log").string());
  ASSERT_GT(rogue, 0);
  ASSERT_TRUE(ts::wait_for(
      [&] {
        return ts::sh("grep -c 'Configuration successful' " + (d / "rogue.log").string())
                   .second.rfind("1", 0) == 0;
      },
      10))
      << ts::sh("cat " + (d / "rogue.log").string()).second;
  StopOnExit guard{{config}};
  auto [rc, out] = ts::sh(cli(config) + " start --host s 2>&1");
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("tunnel.sock"), std::string::npos) << out;
  EXPECT_NE(out.find("closed the connection before answering AUTH"), std::string::npos) << out;
  EXPECT_NE(out.find("stunnel.log"), std::string::npos) << out;
  if (std::getenv("H3PIPE_TEST_PRINT")) std::cout << out << "\n";
  EXPECT_EQ(ts::sh(cli(config) + " status >/dev/null 2>&1").first == 0, false);
  EXPECT_EQ(sink.received().find("AUTH"), std::string::npos) << sink.received();
  EXPECT_EQ(sink.received(), "");
  const std::string client_log = ts::sh("cat " + (d / "state-s/logs/stunnel.log").string()).second;
  EXPECT_NE(client_log.find("certificate verify failed"), std::string::npos) << client_log;
  ::kill(rogue, SIGTERM);
  ::waitpid(rogue, nullptr, 0);
}

}  // namespace
}  // namespace h3pipe
