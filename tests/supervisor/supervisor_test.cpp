// common/supervisor's own behaviour (issue #40 item 4), with real processes: `start` (in
// supervisor_driver, a binary named h3pipe) runs a real redis-server and fake_service.py as every
// service of a one-host config, waits for Redis and every /readyz, restarts a dead child (at once
// after a healthy run, with a growing backoff while it crash-loops), keeps the metrics port a
// service chose unless it is taken, stops services before Redis on SIGTERM, refuses a second
// stack and an unsafe state dir, and keeps what it writes private.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/queue/server.h"
#include "common/supervisor/stack_file.h"
#include "tests/support/test_support.h"

namespace h3pipe::supervisor {
namespace {

namespace fs = std::filesystem;

// Alive and not a zombie (a stopped stack's children may wait for init to reap them).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

// The processes whose command line names `dir` (the services get --state-dir).
std::vector<pid_t> processes_naming(const fs::path& dir) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    const std::string cmdline((std::istreambuf_iterator<char>(in)), {});
    const pid_t pid = std::stoi(name);
    if (cmdline.find(dir.string()) != std::string::npos && alive(pid)) out.push_back(pid);
  }
  return out;
}

int mode_bits(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 0777) : -1;
}

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/usr/bin/redis-server", X_OK) != 0 || ::access("/usr/bin/python3", X_OK) != 0)
      GTEST_SKIP() << "needs /usr/bin/redis-server and /usr/bin/python3";
    fs::create_directories(ctrl_);
    fs::create_directories(bin_);
    for (const char* svc : {"h3pipe-encoder", "h3pipe-sampler", "h3pipe-decoder"})
      fs::create_symlink(ts::source("tests/supervisor/fake_service.py"), bin_ / svc);
    ::setenv("H3_FAKE_CTRL", ctrl_.c_str(), 1);  // inherited by the supervisor and its children
    std::ofstream(cfg_) << ts::sim_cluster_json(dir_.path(), 0, {{"redis", {{"embedded", true}}}});
    auto c = config::load_file(cfg_);
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    cluster_ = *c;
  }
  void TearDown() override {
    if (running(cluster_)) (void)stop(cluster_);
  }

  // supervisor::start through the driver: {ok, the stack} or {false, {code, message}}.
  struct Started {
    bool ok = false;
    nlohmann::json stack;
    std::string code, message;
  };
  Started start_stack(int ready_timeout_ms = 20000) {
    auto [rc, out] = ts::sh(fmt::format("{} start {} {} {} 2>&1", H3PIPE_SUPERVISOR_DRIVER,
                                        cfg_.string(), bin_.string(), ready_timeout_ms));
    Started s;
    if (rc == 0) {
      s.ok = true;
      s.stack = nlohmann::json::parse(out);
      return s;
    }
    const auto nl = out.find('\n');
    s.code = out.substr(0, nl);
    s.message = nl == std::string::npos ? "" : out.substr(nl + 1);
    return s;
  }
  void set_mode(const std::string& name, const std::string& mode) {
    std::ofstream(ctrl_ / ("mode-" + name)) << mode << "\n";
  }
  // What the fake services recorded (fake_service.py), of `name` only when given.
  std::vector<nlohmann::json> events(const std::string& name = "") {
    std::vector<nlohmann::json> out;
    std::ifstream in(ctrl_ / "events");
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && (name.empty() || j["name"] == name)) out.push_back(j);
    }
    return out;
  }
  std::vector<nlohmann::json> events_of(const std::string& name, const std::string& what) {
    std::vector<nlohmann::json> out;
    for (auto& e : events(name))
      if (e["what"] == what) out.push_back(e);
    return out;
  }
  static nlohmann::json process(const nlohmann::json& stack, const std::string& name) {
    for (const auto& p : stack["processes"])
      if (p["name"] == name) return p;
    return nullptr;
  }
  std::vector<pid_t> pids(const nlohmann::json& stack) {
    std::vector<pid_t> out;
    for (const auto& p : stack["processes"]) out.push_back(p["pid"].get<pid_t>());
    return out;
  }

  ts::TempDir dir_{"h3sup"};
  fs::path ctrl_ = dir_.path() / "ctrl", bin_ = dir_.path() / "bin",
           cfg_ = dir_.path() / "cluster.json", state_ = dir_.path() / "state";
  config::Cluster cluster_;
};

TEST_F(SupervisorTest, StartRunsRedisAndEveryServiceAndStopEndsThemServicesFirst) {
  const Started s = start_stack();
  ASSERT_TRUE(s.ok) << s.code << ": " << s.message;
  std::set<std::string> names;
  for (const auto& p : s.stack["processes"]) names.insert(p["name"].get<std::string>());
  EXPECT_EQ(names, (std::set<std::string>{"redis", "encoder-enc", "sampler-samp", "decoder-dec"}));
  for (pid_t pid : pids(s.stack)) EXPECT_TRUE(alive(pid)) << pid;
  EXPECT_EQ(s.stack["redis"]["persistence"], "AOF on (appendfsync everysec)");
  // Redis answers its admin user (the supervisor's credentials), and the stack is found again.
  auto r = queue::Redis::connect(ts::stack_redis(s.stack));
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_TRUE(queue::ping(**r).ok());
  const auto found = running(cluster_);
  ASSERT_TRUE(found);
  EXPECT_EQ((*found)["supervisor_pid"], s.stack["supervisor_pid"]);

  const Status stopped = stop(cluster_);
  ASSERT_TRUE(stopped.ok()) << stopped.error().to_string();
  EXPECT_FALSE(alive(s.stack["supervisor_pid"].get<pid_t>()));
  for (pid_t pid : pids(s.stack)) EXPECT_FALSE(alive(pid)) << pid;
  EXPECT_FALSE(fs::exists(stack_file(state_)));
  // Each service got SIGTERM (a drain, not a kill) while Redis still accepted connections.
  for (const char* name : {"encoder-enc", "sampler-samp", "decoder-dec"}) {
    const auto terms = events_of(name, "term");
    ASSERT_EQ(terms.size(), 1u) << name;
    EXPECT_TRUE(terms[0]["redis_up"].get<bool>()) << name << " was stopped after Redis";
  }
}

TEST_F(SupervisorTest, RestartsAKilledServiceAndBacksOffWhileItCrashLoops) {
  const Started s = start_stack();
  ASSERT_TRUE(s.ok) << s.code << ": " << s.message;
  const pid_t first = process(s.stack, "encoder-enc")["pid"].get<pid_t>();
  // The port its first run chose (its run file), learnt by the supervisor for every restart.
  ASSERT_TRUE(ts::wait_for(
      [&] {
        auto st = running(cluster_);
        return st && process(*st, "encoder-enc")["metrics_port"].get<int>() > 0;
      },
      5));
  const int port = process(*running(cluster_), "encoder-enc")["metrics_port"].get<int>();

  set_mode("encoder-enc", "exit 3");
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  // Five starts after the kill: the first at once, then 100, 200, 400, 800 ms after each death.
  ASSERT_TRUE(ts::wait_for([&] { return events_of("encoder-enc", "start").size() >= 6; }, 20));
  const auto starts = events_of("encoder-enc", "start");
  std::vector<double> gaps;
  for (std::size_t i = 2; i < 6; ++i)
    gaps.push_back(starts[i]["t"].get<double>() - starts[i - 1]["t"].get<double>());
  EXPECT_GE(gaps[1], 0.2);
  EXPECT_GE(gaps[2], 0.4);
  EXPECT_GE(gaps[3], 0.8);
  EXPECT_GT(gaps[3], gaps[0]) << "the backoff does not grow";
  for (std::size_t i = 1; i < 6; ++i) {
    const auto argv = starts[i]["argv"].get<std::vector<std::string>>();
    const auto it = std::find(argv.begin(), argv.end(), "--metrics-port");
    ASSERT_NE(it, argv.end()) << "restart " << i << " was not given the learnt port";
    EXPECT_EQ(*(it + 1), std::to_string(port));
  }
  {
    const auto st = running(cluster_);
    ASSERT_TRUE(st);
    const auto p = process(*st, "encoder-enc");
    EXPECT_GE(p["restarts"].get<int>(), 5);
    EXPECT_GE(p["exits"].get<int>(), 5);
    EXPECT_EQ(p["last_exit"], "exit 3");
  }

  // Someone else takes the port while it is down: the next start exits 98 and the one after it
  // runs on a free port, learnt again.
  ts::HeldPort squatter(port);
  ASSERT_TRUE(squatter.ok());
  ::remove((ctrl_ / "mode-encoder-enc").c_str());
  ASSERT_TRUE(ts::wait_for(
      [&] {
        auto st = running(cluster_);
        if (!st) return false;
        const auto p = process(*st, "encoder-enc");
        const int now = p["metrics_port"].get<int>();
        return now > 0 && now != port && alive(p["pid"].get<pid_t>());
      },
      20));
  squatter.release();
  EXPECT_EQ(events_of("encoder-enc", "metrics port taken").size(), 1u);
  const auto last =
      events_of("encoder-enc", "start").back()["argv"].get<std::vector<std::string>>();
  EXPECT_EQ(std::find(last.begin(), last.end(), "--metrics-port"), last.end());
  // The other services were left alone.
  EXPECT_EQ(events_of("sampler-samp", "start").size(), 1u);
}

TEST_F(SupervisorTest, SigtermEndsTheStackAndReleasesTheStateDir) {
  const Started s = start_stack();
  ASSERT_TRUE(s.ok) << s.code << ": " << s.message;
  const pid_t sup = s.stack["supervisor_pid"].get<pid_t>();
  ASSERT_EQ(::kill(sup, SIGTERM), 0);
  ASSERT_TRUE(ts::wait_for([&] { return !alive(sup); }, 20));
  for (pid_t pid : pids(s.stack)) EXPECT_FALSE(alive(pid)) << pid;
  EXPECT_FALSE(fs::exists(stack_file(state_)));
  EXPECT_FALSE(fs::exists(stack_file(state_).string() + ".sha256"));
  EXPECT_FALSE(running(cluster_));
  // The lock went with it: the next start on this state dir runs.
  const Started again = start_stack();
  ASSERT_TRUE(again.ok) << again.code << ": " << again.message;
  EXPECT_NE(again.stack["supervisor_pid"], s.stack["supervisor_pid"]);
}

TEST_F(SupervisorTest, KeepsTheStateDirAndEverythingItWritesPrivate) {
  // Left open by an earlier tool (issue #22): a 0777 logs/ and a 0666 log are tightened.
  fs::create_directories(state_ / "logs");
  ::chmod(state_.c_str(), 0700);
  ::chmod((state_ / "logs").c_str(), 0777);
  std::ofstream(state_ / "logs" / "encoder-enc.log") << "an earlier run\n";
  ::chmod((state_ / "logs" / "encoder-enc.log").c_str(), 0666);

  const Started s = start_stack();
  ASSERT_TRUE(s.ok) << s.code << ": " << s.message;
  EXPECT_EQ(mode_bits(state_), 0700);
  for (const char* d : {"logs", "run", "redis"}) EXPECT_EQ(mode_bits(state_ / d), 0700) << d;
  EXPECT_EQ(mode_bits(lock_file(state_)), 0600);
  int files = 0;
  for (const fs::path& d : {state_, state_ / "logs", state_ / "run", state_ / "redis"})
    for (const auto& e : fs::directory_iterator(d)) {
      if (!e.is_regular_file()) continue;
      ++files;
      EXPECT_EQ(mode_bits(e.path()) & 077, 0) << e.path() << " is open to others";
    }
  EXPECT_GE(files, 10);  // stack.json, the lock, the logs, run files, the ACL, redis.pid
}

TEST_F(SupervisorTest, RefusesAStateDirOthersCanWrite) {
  fs::create_directories(state_);
  ::chmod(state_.c_str(), 0777);
  const Started s = start_stack();
  EXPECT_FALSE(s.ok);
  EXPECT_EQ(s.code, "state_dir.unsafe");
  EXPECT_NE(s.message.find(state_.string()), std::string::npos) << s.message;
  EXPECT_TRUE(events().empty()) << "a service was started";
  EXPECT_FALSE(fs::exists(state_ / "logs"));
}

TEST_F(SupervisorTest, RefusesASecondStackOnTheSameStateDir) {
  const Started s = start_stack();
  ASSERT_TRUE(s.ok) << s.code << ": " << s.message;
  const Started second = start_stack();
  EXPECT_FALSE(second.ok);
  EXPECT_EQ(second.code, "start.running");
  EXPECT_NE(second.message.find(std::to_string(s.stack["supervisor_pid"].get<int>())),
            std::string::npos)
      << second.message;
  EXPECT_TRUE(alive(s.stack["supervisor_pid"].get<pid_t>())) << "the first stack was touched";
}

TEST_F(SupervisorTest, AServiceThatExitsFailsStartWithItsLogAndStopsTheStack) {
  set_mode("sampler-samp", "exit 7");
  const Started s = start_stack();
  ASSERT_FALSE(s.ok);
  EXPECT_EQ(s.code, "start.failed");
  EXPECT_NE(s.message.find("sampler-samp exited (exit 7)"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find((state_ / "logs" / "sampler-samp.log").string()), std::string::npos)
      << s.message;
  EXPECT_FALSE(running(cluster_));
  EXPECT_FALSE(fs::exists(stack_file(state_)));
  // No process of the stack is left (one stopped before it set its SIGTERM handler records no
  // "term": only its end is checked).
  ASSERT_TRUE(ts::wait_for([&] { return processes_naming(state_).empty(); }, 10))
      << "the other services were not stopped";
}

TEST_F(SupervisorTest, AServiceNeverReadyTimesOutNamingIt) {
  set_mode("decoder-dec", "never-ready");
  const Started s = start_stack(3000);
  ASSERT_FALSE(s.ok);
  EXPECT_EQ(s.code, "start.timeout");
  EXPECT_NE(s.message.find("decoder-dec is not ready"), std::string::npos) << s.message;
  EXPECT_EQ(s.message.find("encoder-enc is not ready"), std::string::npos) << s.message;
  EXPECT_FALSE(running(cluster_));
}

TEST_F(SupervisorTest, StopSaysWhenNothingRunsAndCleansAStaleStack) {
  const Status none = stop(cluster_);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, "stop.none");

  const Started s = start_stack();
  ASSERT_TRUE(s.ok) << s.code << ": " << s.message;
  const pid_t sup = s.stack["supervisor_pid"].get<pid_t>();
  // kill -9 of the supervisor: its children die with it (PR_SET_PDEATHSIG), stack.json stays.
  ASSERT_EQ(::kill(sup, SIGKILL), 0);
  ASSERT_TRUE(ts::wait_for(
      [&] {
        for (pid_t pid : pids(s.stack))
          if (alive(pid)) return false;
        return !alive(sup);
      },
      20));
  ASSERT_TRUE(fs::exists(stack_file(state_)));
  const Status stale = stop(cluster_);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.error().code, "stop.stale");
  EXPECT_NE(stale.error().message.find("stack.json removed"), std::string::npos)
      << stale.error().message;
  EXPECT_FALSE(fs::exists(stack_file(state_)));
}

}  // namespace
}  // namespace h3pipe::supervisor
