// runner::run (common/runner/runner.h), the service runner of every binary, in this process: what
// it gives the body (host, pool, instance, Redis address, the ports in the run file), what it
// refuses before the body runs (flags, config, host, pool, an unsafe state dir: exit 2), a taken
// metrics port (98, so the supervisor picks another), a body that throws (1), SIGTERM (ctx.stop,
// and no body while the roots it writes are not writable), and redis_address's environment.
#include "common/runner/runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/test_support.h"

namespace h3pipe::runner {
namespace {

namespace fs = std::filesystem;

const ServiceInfo kEncoder{
    .name = "encoder", .needs_pool = true, .stage = config::StageKind::kEncode};

class RunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");  // run() starts threads
    write_config(ts::sim_cluster_json(dir_.path(), 6379));
  }
  void write_config(const nlohmann::json& j) { std::ofstream(cfg_) << j.dump(2); }
  // runner::run with these flags after the program name; `called` says whether the body ran.
  int run_with(std::vector<std::string> args, const Body& body,
               const ServiceInfo& info = kEncoder) {
    args.insert(args.begin(), "h3pipe-" + info.name);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    called_ = false;
    return run(static_cast<int>(args.size()), argv.data(), info, [&](Context& ctx) {
      called_ = true;
      return body(ctx);
    });
  }
  // The end of a death test's child: its temp dir (a TempDir of its own) is not left behind.
  [[noreturn]] void finish(int code) {
    std::error_code ec;
    fs::remove_all(dir_.path(), ec);
    std::_Exit(code);
  }
  std::vector<std::string> flags(std::vector<std::string> more = {}) {
    std::vector<std::string> f = {"--config", cfg_.string()};
    f.insert(f.end(), more.begin(), more.end());
    return f;
  }

  ts::TempDir dir_{"h3runner"};
  fs::path cfg_ = dir_.path() / "cluster.json", state_ = dir_.path() / "state";
  bool called_ = false;
};

TEST_F(RunnerTest, GivesTheBodyItsContextWritesTheRunFileAndReturnsItsCode) {
  nlohmann::json run_file;
  Context seen;
  const int rc = run_with(flags({"--pool", "enc", "--redis", "127.0.0.1:7777"}), [&](Context& ctx) {
    seen.host = ctx.host;
    seen.instance = ctx.instance;
    seen.redis = ctx.redis;
    seen.bind = ctx.bind;
    EXPECT_NE(ctx.pool, nullptr);
    if (ctx.pool) {
      EXPECT_EQ(ctx.pool->name, "enc");
    }
    EXPECT_NE(ctx.registry, nullptr);
    EXPECT_FALSE(ctx.stop->load());
    EXPECT_FALSE(ctx.health->ready()) << "ready before the body said so";
    std::ifstream in(state_ / "run" / "encoder-enc.json");
    run_file = nlohmann::json::parse(in, nullptr, false);
    return 5;
  });
  EXPECT_EQ(rc, 5);
  ASSERT_TRUE(called_);
  EXPECT_EQ(seen.host, "h1");
  EXPECT_EQ(seen.instance, "enc");
  EXPECT_EQ(seen.redis.host, "127.0.0.1");
  EXPECT_EQ(seen.redis.port, 7777);
  EXPECT_EQ(seen.bind, "127.0.0.1");
  ASSERT_TRUE(run_file.is_object()) << "no run file";
  EXPECT_EQ(run_file["pid"], ::getpid());
  EXPECT_EQ(run_file["service"], "encoder");
  EXPECT_EQ(run_file["instance"], "enc");
  EXPECT_GT(run_file["metrics_port"].get<int>(), 0);
  EXPECT_GT(run_file["health_port"].get<int>(), 0);
}

TEST_F(RunnerTest, ABodyThatThrowsExitsNonZero) {
  EXPECT_EQ(run_with(flags({"--pool", "enc"}),
                     [](Context&) -> int { throw std::runtime_error("broken invariant"); }),
            1);
  EXPECT_TRUE(called_);
}

TEST_F(RunnerTest, RefusesBadFlagsAndConfigsBeforeTheBody) {
  const auto never = [](Context&) { return 0; };
  EXPECT_NE(run_with(flags({"--pool", "enc", "--no-such-flag"}), never), 0);
  EXPECT_NE(run_with(flags(), never), 0) << "--pool is required for a stage service";
  EXPECT_EQ(run_with({"--config", (dir_.path() / "missing.json").string(), "--pool", "enc"}, never),
            2);
  EXPECT_EQ(run_with(flags({"--pool", "nope"}), never), 2);
  EXPECT_EQ(run_with(flags({"--pool", "samp"}), never), 2) << "a sample pool for the encoder";
  EXPECT_EQ(run_with(flags({"--pool", "enc", "--host", "h9"}), never), 2);
  // Two hosts: --host is required, and a pool runs only on its own host.
  auto two = ts::sim_cluster_json(dir_.path(), 6379);
  two["hosts"].push_back({{"name", "h2"}});
  write_config(two);
  EXPECT_EQ(run_with(flags({"--pool", "enc"}), never), 2);
  EXPECT_EQ(run_with(flags({"--pool", "enc", "--host", "h2"}), never), 2);
  EXPECT_FALSE(called_);
  EXPECT_FALSE(fs::exists(state_ / "run" / "encoder-enc.json"));
}

TEST_F(RunnerTest, ATakenMetricsPortExits98SoTheSupervisorPicksAnother) {
  const ts::HeldPort taken;
  ASSERT_TRUE(taken.ok());
  const std::string port = std::to_string(taken.port());
  EXPECT_EQ(run_with(flags({"--pool", "enc", "--metrics-port", port}), [](Context&) { return 0; }),
            98);
  EXPECT_FALSE(called_);
}

TEST_F(RunnerTest, RefusesCredentialsFromAStateDirOthersCanWrite) {
  fs::create_directories(state_ / "secrets");
  std::ofstream(state_ / "secrets" / "encoder.password") << "pw\n";
  ::chmod(state_.c_str(), 0777);
  ::setenv("H3PIPE_REDIS_PASSWORD_FILE", (state_ / "secrets" / "encoder.password").c_str(), 1);
  const int rc = run_with(flags({"--pool", "enc"}), [](Context&) { return 0; });
  ::unsetenv("H3PIPE_REDIS_PASSWORD_FILE");
  EXPECT_EQ(rc, 2);
  EXPECT_FALSE(called_);
}

// SIGTERM and SIGINT set ctx.stop (the body drains) instead of killing the process.  In a child
// process: the flag is process-wide and never cleared.
TEST_F(RunnerTest, SigtermSetsStopForTheBody) {
  EXPECT_EXIT(
      {
        const int rc = run_with(flags({"--pool", "enc"}), [](Context& ctx) {
          ::raise(SIGTERM);
          return ctx.stop->load() ? 0 : 1;
        });
        finish(rc);
      },
      ::testing::ExitedWithCode(0), "");
}

// A root it writes that cannot be written (a file where the artifact root should be): the body
// does not run; SIGTERM then ends run() with 0 ...
TEST_F(RunnerTest, NoBodyWhileARootIsNotWritableAndSigtermEndsTheWait) {
  auto j = ts::sim_cluster_json(dir_.path(), 6379);
  j["artifact_root"] = (dir_.path() / "blocked" / "artifacts").string();
  write_config(j);
  std::ofstream(dir_.path() / "blocked") << "a file, not a folder\n";
  EXPECT_EXIT(
      {
        std::thread stopper([&] {
          ts::wait_for([&] { return fs::exists(state_ / "run" / "encoder-enc.json"); }, 10);
          std::this_thread::sleep_for(std::chrono::milliseconds(700));  // a check or two fails
          ::kill(::getpid(), SIGTERM);
        });
        const int rc = run_with(flags({"--pool", "enc"}), [](Context&) { return 4; });
        stopper.join();
        finish(called_ ? 10 + rc : rc);
      },
      ::testing::ExitedWithCode(0), "");
}

// ... and once it becomes writable, the body runs.
TEST_F(RunnerTest, TheBodyRunsOnceTheRootBecomesWritable) {
  auto j = ts::sim_cluster_json(dir_.path(), 6379);
  j["artifact_root"] = (dir_.path() / "blocked" / "artifacts").string();
  write_config(j);
  std::ofstream(dir_.path() / "blocked") << "a file, not a folder\n";
  EXPECT_EXIT(
      {
        std::thread fixer([&] {
          ts::wait_for([&] { return fs::exists(state_ / "run" / "encoder-enc.json"); }, 10);
          std::this_thread::sleep_for(std::chrono::milliseconds(700));
          fs::remove(dir_.path() / "blocked");
        });
        const int rc = run_with(flags({"--pool", "enc"}), [](Context&) { return 4; });
        fixer.join();
        finish(called_ ? rc : 20 + rc);
      },
      ::testing::ExitedWithCode(4), "");
}

TEST(RedisAddressTest, TakesTheServiceCredentialsAndAddressFromTheEnvironment) {
  ts::TempDir dir;
  auto c = ts::sim_cluster(dir.path(), 6379);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  const auto plain = redis_address(*c);
  EXPECT_EQ(plain.host, "127.0.0.1");
  EXPECT_EQ(plain.port, 6379);
  std::ofstream(dir.path() / "pw") << "s3cret\n";
  ::setenv("H3PIPE_REDIS_USER", "h3-encoder", 1);
  ::setenv("H3PIPE_REDIS_PASSWORD_FILE", (dir.path() / "pw").c_str(), 1);
  ::setenv("H3PIPE_REDIS_ADDRESS", "10.1.2.3:7000", 1);
  const auto a = redis_address(*c);
  ::setenv("H3PIPE_REDIS_ADDRESS", "no-port", 1);  // not HOST:PORT: ignored
  const auto b = redis_address(*c);
  for (const char* v : {"H3PIPE_REDIS_USER", "H3PIPE_REDIS_PASSWORD_FILE", "H3PIPE_REDIS_ADDRESS"})
    ::unsetenv(v);
  EXPECT_EQ(a.user, "h3-encoder");
  EXPECT_EQ(a.password, "s3cret");
  EXPECT_EQ(a.host, "10.1.2.3");
  EXPECT_EQ(a.port, 7000);
  EXPECT_EQ(b.host, "127.0.0.1");
  EXPECT_EQ(b.port, 6379);
}

}  // namespace
}  // namespace h3pipe::runner
