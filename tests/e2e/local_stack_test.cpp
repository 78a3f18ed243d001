// End to end through the real local stack: `h3pipe start` (private redis-server + real service
// processes), the CLI, ffprobe on the MP4s.  Label: e2e.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/artifacts/artifacts.h"
#include "common/core/sha256.h"
#include "common/queue/keys.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A local stack in a temp state dir with a config written by the test.
class Stack {
 public:
  explicit Stack(const json& overrides = json::object()) {
    json cfg = json::parse(R"({
      "name": "e2e", "queue": {"lease_ms": 1500, "renew_ms": 300, "sweep_ms": 200, "max_deliveries": 3, "block_ms": 50},
      "hosts": [{"name": "local"}],
      "pools": [
        {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
        {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 0.15}}},
        {"name": "s1", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 0.15}}},
        {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.02}}}
      ]})");
    cfg.merge_patch(overrides);
    cfg["state_dir"] = dir_.path().string();
    config_ = dir_.path() / "cluster.json";
    std::ofstream(config_) << cfg.dump(2);
    start();
  }
  ~Stack() { ts::sh(cli() + " stop >/dev/null 2>&1"); }
  void start() {
    auto [rc, out] = ts::sh(cli() + " start 2>&1");
    ASSERT_EQ(rc, 0) << out << log("supervisor.log");
  }
  void stop() { ASSERT_EQ(ts::sh(cli() + " stop >/dev/null 2>&1").first, 0); }
  std::string cli() const { return ts::bin("h3pipe") + " --config " + config_.string(); }
  fs::path out(const std::string& run) const { return dir_.path() / "outputs" / run; }
  std::string log(const std::string& name) const {
    std::ifstream in(dir_.path() / "logs" / name);
    if (!in) in = std::ifstream(dir_.path() / name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  json stack() const {
    json j;
    std::ifstream(dir_.path() / "stack.json") >> j;
    return j;
  }
  int pid_of(const std::string& name) const {
    const json s = stack();
    for (const auto& p : s["processes"]) if (p["name"] == name) return p["pid"];
    return -1;
  }
  std::unique_ptr<queue::Redis> redis(const std::string& role = "admin") const {
    return std::move(queue::Redis::connect(ts::stack_redis(stack(), role)).value());
  }
  std::string submit(const std::string& batch_text) {
    auto f = dir_.path() / "batch.jsonl";
    std::ofstream(f) << batch_text;
    auto [rc, out] = ts::sh(cli() + " run " + f.string() + " --background 2>/dev/null");
    EXPECT_EQ(rc, 0);
    return out.substr(0, out.find('\n'));
  }
  int wait(const std::string& run, int timeout_s = 120) {
    return ts::sh(cli() + " wait " + run + " --timeout " + std::to_string(timeout_s) + " >/dev/null 2>&1").first;
  }
  json status(const std::string& run) { return json::parse(ts::sh(cli() + " status " + run + " --json").second); }
  const fs::path& dir() const { return dir_.path(); }

 private:
  ts::TempDir dir_;
  fs::path config_;
};

std::string batch(int n, int frames = 25, const std::string& extra = "") {
  std::string s;
  for (int i = 0; i < n; ++i)
    s += fmt::format(R"({{"jobId":"j{:02d}","prompt":"clip {}","width":128,"height":96,"frames":{},"fps":12,"seed":{}{}}})",
                     i, i, frames, i, extra) + "\n";
  return s;
}

json ffprobe(const fs::path& mp4) {
  auto [rc, out] = ts::sh("ffprobe -v error -count_frames -show_entries stream=codec_name,codec_type,width,height,nb_read_frames,r_frame_rate,channels,sample_rate -of json " + mp4.string());
  return rc == 0 ? json::parse(out) : json();
}

}  // namespace

TEST(LocalStack, TwentyJobsGiveTwentyVerifiedMp4sAndReceipts) {
  Stack st;
  std::string run = st.submit(batch(20));
  ASSERT_EQ(st.wait(run), 0) << st.log("sampler-s0.log");
  int mp4s = 0;
  for (int i = 0; i < 20; ++i) {
    auto mp4 = st.out(run) / fmt::format("j{:02d}.mp4", i);
    auto rec = st.out(run) / fmt::format("j{:02d}.pipeline.json", i);
    ASSERT_TRUE(fs::exists(mp4)) << mp4;
    ++mp4s;
    auto p = ffprobe(mp4);
    ASSERT_EQ(p["streams"].size(), 2u);
    for (const auto& s : p["streams"]) {
      if (s["codec_type"] == "video") {
        EXPECT_EQ(s["codec_name"], "h264");
        EXPECT_EQ(s["width"], 128);
        EXPECT_EQ(s["height"], 96);
        EXPECT_EQ(s["nb_read_frames"], "25");
        EXPECT_EQ(s["r_frame_rate"], "12/1");
      } else {
        EXPECT_EQ(s["codec_name"], "aac");
        EXPECT_EQ(s["channels"], 2);
        EXPECT_EQ(s["sample_rate"], "48000");
      }
    }
    json r;
    std::ifstream(rec) >> r;
    EXPECT_EQ(r["mp4Sha256"], *sha256_file(mp4));
    ASSERT_EQ(r["stages"].size(), 3u);
    EXPECT_EQ(r["stages"][1]["outputSha256"], r["stages"][2]["inputSha256"]) << "latent chain of custody";
    EXPECT_EQ(r["stages"][0]["outputSha256"], r["stages"][1]["inputSha256"]) << "conditioning chain of custody";
    EXPECT_EQ(r["stages"][2]["runtime"], "sim");
  }
  EXPECT_EQ(mp4s, 20);
  auto s = st.status(run);
  EXPECT_EQ(s["done"], 20);
  EXPECT_EQ(s["failed"], 0);
}

TEST(LocalStack, BadBatchEnqueuesNothingAndNamesLineAndField) {
  Stack st;
  auto f = st.dir() / "bad.jsonl";
  std::ofstream(f) << batch(2) << R"({"jobId":"x","prompt":"p","width":100})" << "\n";
  auto [rc, out] = ts::sh(st.cli() + " run " + f.string() + " 2>&1");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("bad.jsonl:3: width: 100 is not a multiple of 16"), std::string::npos) << out;
  auto r = st.redis();
  EXPECT_EQ(queue::reply_int(r->command({"XLEN", keys::submit()})->get()), 0);
}

TEST(LocalStack, RedisCliSubmissionIsValidatedLikeTheCli) {
  Stack st;
  auto r = st.redis("operator");
  ASSERT_TRUE(r->command({"XADD", keys::submit(), "*", "run", "viaredis", "spec", R"({"jobId":"good","prompt":"p","width":64,"height":64,"frames":9})"}).ok());
  ASSERT_TRUE(r->command({"XADD", keys::submit(), "*", "run", "viaredis", "spec", R"({"jobId":"bad","prompt":""})"}).ok());
  ASSERT_TRUE(r->command({"XADD", keys::submit(), "*", "run", "viaredis", "spec", "{not json"}).ok());
  ASSERT_TRUE(ts::wait_for([&] { return st.status("viaredis").value("total", 0) == 3; }, 20));
  EXPECT_EQ(st.wait("viaredis", 60), 1) << "one bad spec -> exit 1";
  auto s = st.status("viaredis");
  std::map<std::string, json> by;
  for (const auto& j : s["jobs"]) by[j["job_id"]] = j;
  EXPECT_EQ(by["good"]["state"], "done");
  EXPECT_EQ(by["bad"]["state"], "failed");
  EXPECT_NE(by["bad"]["error"].get<std::string>().find("prompt: required"), std::string::npos);
  EXPECT_EQ(s["failed"], 2);
}

TEST(LocalStack, KilledSamplerTaskIsReclaimedAndCompletesExactlyOnce) {
  Stack st(json::parse(R"({"pools": [
        {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
        {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 1.5}}},
        {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}}]})"));
  std::string run = st.submit(batch(3));
  auto r = st.redis();
  // Kill the sampler while it is inside j00's sample stage.
  ASSERT_TRUE(ts::wait_for([&] {
    return queue::reply_str(r->command({"HGET", keys::job(run, "j00"), "exec:sample"})->get()) == "1";
  }, 20));
  int pid = st.pid_of("sampler-s0");
  ASSERT_GT(pid, 0) << st.stack().dump();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(st.wait(run), 0);
  for (const char* j : {"j00", "j01", "j02"}) {
    auto h = r->command({"HGET", keys::job(run, j), "done:sample"});
    EXPECT_EQ(queue::reply_str(h->get()), "1") << j << ": the sample output was committed exactly once";
    EXPECT_TRUE(fs::exists(st.out(run) / (std::string(j) + ".mp4")));
  }
  EXPECT_EQ(queue::reply_str(r->command({"HGET", keys::job(run, "j00"), "attempts:sample"})->get()), "2")
      << "the killed delivery and the one that completed";
  // The sim sampler writes its latent first and then sleeps out the profile: a kill during the
  // sleep leaves a verified output that the second delivery skips (exec 1), a kill during the
  // write leaves none and the stage runs again (exec 2).  Never more.
  auto exec = queue::reply_str(r->command({"HGET", keys::job(run, "j00"), "exec:sample"})->get());
  EXPECT_TRUE(exec == "1" || exec == "2") << exec;
  EXPECT_GE(st.stack()["processes"][2]["restarts"].get<int>(), 1) << "the supervisor restarted the sampler";
}

TEST(LocalStack, PoisonJobIsDeadLetteredWhileOthersComplete) {
  Stack st;
  std::string text = batch(4) + R"({"jobId":"poison","prompt":"p","width":64,"height":64,"frames":9,"params":{"sim.crash":"abort"}})" + "\n";
  std::string run = st.submit(text);
  EXPECT_EQ(st.wait(run), 1);
  auto s = st.status(run);
  EXPECT_EQ(s["done"], 4);
  EXPECT_EQ(s["failed"], 1);
  auto r = st.redis();
  auto dl = r->command({"XRANGE", keys::dead_letter(), "-", "+"});
  ASSERT_EQ(dl->get()->elements, 1u);
  std::string fields;
  for (size_t i = 0; i < dl->get()->element[0]->element[1]->elements; ++i)
    fields += queue::reply_str(dl->get()->element[0]->element[1]->element[i]) + "|";
  EXPECT_NE(fields.find("job|poison|"), std::string::npos) << fields;
  EXPECT_NE(fields.find("max_deliveries 3"), std::string::npos) << fields;
  EXPECT_EQ(queue::reply_str(r->command({"HGET", keys::job(run, "poison"), "attempts:sample"})->get()), "4");
}

TEST(LocalStack, StopMidRunThenStartAndResumeRedoesOnlyWhatIsMissing) {
  Stack st(json::parse(R"({"pools": [
        {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
        {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 0.3}}},
        {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}}]})"));
  std::string run = st.submit(batch(8));
  ASSERT_TRUE(ts::wait_for([&] { return st.status(run)["stages"].value("decode", 0) >= 2; }, 30));
  st.stop();
  int done_before = 0;
  for (int i = 0; i < 8; ++i) done_before += fs::exists(st.out(run) / fmt::format("j{:02d}.mp4", i));
  ASSERT_GE(done_before, 2);
  ASSERT_LT(done_before, 8);
  st.start();
  auto [rc, out] = ts::sh(st.cli() + " resume " + run);
  ASSERT_EQ(rc, 0) << out;
  ASSERT_EQ(st.wait(run), 0);
  auto r = st.redis();
  for (int i = 0; i < 8; ++i) {
    std::string j = fmt::format("j{:02d}", i);
    EXPECT_TRUE(fs::exists(st.out(run) / (j + ".mp4")));
    for (const char* stage : {"encode", "sample", "decode"}) {
      auto d = queue::reply_str(r->command({"HGET", keys::job(run, j), std::string("done:") + stage})->get());
      EXPECT_EQ(d, "1") << j << " " << stage << ": each stage output committed once";
    }
  }
}

TEST(LocalStack, ExecRuntimeRunsABatchWithAScriptAsEveryStage) {
  std::string script = ts::source("examples/exec/stage.py");
  auto stage = [&](const char* name, bool with_input) {
    json cmd = {"/usr/bin/python3", script, name, "{spec_json}"};
    if (with_input) cmd.push_back("{input}");
    cmd.push_back("{output}");
    return json{{"runtime", {{"name", "exec"}, {"settings", {{"command", cmd}, {"timeout_s", 60}}}}}};
  };
  Stack st(json{{"stages", {{"encode", stage("encode", false)}, {"sample", stage("sample", true)},
                            {"decode", stage("decode", true)}}}});
  std::string run = st.submit(batch(3));
  ASSERT_EQ(st.wait(run), 0) << st.log("sampler-s0.log");
  for (int i = 0; i < 3; ++i) {
    auto mp4 = st.out(run) / fmt::format("j{:02d}.mp4", i);
    auto p = ffprobe(mp4);
    ASSERT_EQ(p["streams"].size(), 2u) << mp4;
    json r;
    std::ifstream(st.out(run) / fmt::format("j{:02d}.pipeline.json", i)) >> r;
    EXPECT_EQ(r["stages"][1]["runtime"], "exec");
    EXPECT_EQ(r["mp4Sha256"], *sha256_file(mp4));
  }
}

// A runtime that cannot load keeps its service up and not ready; `h3pipe start` then reports the
// stack not up, prints the service's reason, and stops everything it started (issue #14: it used
// to say "up" while jobs waited on a service that could never run them).
TEST(LocalStack, BadWeightsFileFailsStartWithTheTensorNameAndLeavesNothingRunning) {
  ts::TempDir w;
  fs::path weights = w.path() / "broken.safetensors";
  // A header that promises a tensor the file does not hold (truncated data).
  std::string header = R"({"enc.embed.weight":{"dtype":"F32","shape":[256,64],"data_offsets":[0,65536]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  std::ofstream(weights, std::ios::binary) << bytes << header << std::string(100, '\0');
  ts::TempDir dir;
  json cfg = json::parse(R"({
    "name": "e2e", "hosts": [{"name": "local"}],
    "stages": {"encode": {"runtime": {"name": "builtin"}}},
    "pools": [
      {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"seconds": 0.01}}},
      {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"seconds": 0.01}}},
      {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"seconds": 0.01}}}]})");
  cfg["stages"]["encode"]["runtime"]["settings"] = {{"weights_file", weights.string()}};
  cfg["state_dir"] = dir.path().string();
  std::ofstream(dir.path() / "cluster.json") << cfg.dump(2);
  const std::string cli = ts::bin("h3pipe") + " --config " + (dir.path() / "cluster.json").string();
  auto [rc, out] = ts::sh(cli + " start 2>&1");
  std::cerr << out;
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("encoder-enc cannot become ready: runtime.permanent"), std::string::npos) << out;
  EXPECT_NE(out.find("broken.safetensors"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir.path() / "stack.json")) << "the stack was stopped";
  EXPECT_NE(ts::sh(cli + " status 2>&1").first, 0);
  EXPECT_EQ(ts::sh("exec pgrep -a -f -- '--state-dir " + dir.path().string() + "'").second, "");
}

// The local stack is its owner's (issue #14): Redis refuses anonymous clients and the default
// user, each service has its own ACL user, and the state dir, the credentials and the AOF are
// private.
TEST(LocalStack, RedisNeedsCredentialsAndTheStateIsPrivate) {
  Stack st;
  const int port = st.stack()["redis"]["port"].get<int>();
  auto anon = queue::Redis::connect({"127.0.0.1", port});
  ASSERT_TRUE(anon.ok());
  auto ping = (*anon)->command({"PING"});
  ASSERT_FALSE(ping.ok());
  EXPECT_NE(ping.error().message.find("NOAUTH"), std::string::npos) << ping.error().message;
  auto as_default = queue::Redis::connect({"127.0.0.1", port, "default", "x"});
  EXPECT_TRUE(!as_default.ok() || !(*as_default)->command({"PING"}).ok());
  // The operator may submit and read; it may not rewrite the server or wipe it.
  auto op = st.redis("operator");
  EXPECT_FALSE(op->command({"FLUSHALL"}).ok());
  EXPECT_FALSE(op->command({"CONFIG", "SET", "appendfsync", "no"}).ok());
  auto mode = [](const fs::path& p) { return fs::status(p).permissions() & fs::perms::all; };
  EXPECT_EQ(mode(st.dir()), fs::perms::owner_all);
  EXPECT_EQ(mode(st.dir() / "secrets"), fs::perms::owner_all);
  for (const auto& e : fs::directory_iterator(st.dir() / "secrets"))
    EXPECT_EQ(mode(e.path()), fs::perms::owner_read | fs::perms::owner_write) << e.path();
  EXPECT_EQ(mode(st.dir() / "redis" / "users.acl"), fs::perms::owner_read | fs::perms::owner_write);
  std::ifstream acl(st.dir() / "redis" / "users.acl");
  const std::string acl_text{std::istreambuf_iterator<char>(acl), {}};
  for (const auto& e : fs::directory_iterator(st.dir() / "secrets")) {
    std::ifstream pw(e.path());
    std::string line;
    std::getline(pw, line);
    EXPECT_EQ(acl_text.find(line), std::string::npos) << "a clear password in users.acl";
  }
  const std::string run = st.submit(batch(1));
  EXPECT_EQ(st.wait(run, 60), 0);
  for (const auto& e : fs::recursive_directory_iterator(st.dir() / "redis"))
    if (e.is_regular_file())
      EXPECT_EQ(mode(e.path()) & (fs::perms::group_all | fs::perms::others_all), fs::perms::none)
          << e.path();
}

// One stack per state dir; a supervisor killed with -9 takes its services and Redis with it, and
// the next start begins clean (issue #14).
TEST(LocalStack, OneStackPerStateDirAndNoOrphansAfterKill9) {
  Stack st;
  auto [rc, out] = ts::sh(st.cli() + " start 2>&1");
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("already runs"), std::string::npos) << out;
  const json before = st.stack();
  std::vector<int> pids;
  for (const auto& p : before["processes"]) pids.push_back(p["pid"].get<int>());
  ASSERT_EQ(::kill(before["supervisor_pid"].get<int>(), SIGKILL), 0);
  EXPECT_TRUE(ts::wait_for([&] {
    for (int pid : pids)
      if (::kill(pid, 0) == 0) return false;
    return true;
  }, 20)) << "a child outlived its supervisor";
  st.start();
  const std::string run = st.submit(batch(2));
  EXPECT_EQ(st.wait(run, 60), 0);
}

// A batch file is read only if it is a regular file within what a batch can hold: `run
// /dev/zero` used to read forever and die of bad_alloc (issue #14).  No stack needed: the file is
// refused before Redis is reached.
TEST(Cli, BatchFilesAreReadWithinTheirLimits) {
  ts::TempDir dir;
  const std::string cli = ts::bin("h3pipe") + " --state-dir " + dir.path().string();
  auto [rc, out] = ts::sh(cli + " run /dev/zero 2>&1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("/dev/zero: not a regular file"), std::string::npos) << out;
  const fs::path big = dir.path() / "big.jsonl";
  { std::ofstream(big) << ""; }
  fs::resize_file(big, 8ull << 30);  // sparse 8 GiB: above 10,000 jobs of the default limits
  std::tie(rc, out) = ts::sh(cli + " run " + big.string() + " 2>&1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("above the 480000 KiB limit for a JSON lines batch file set by limits.max_batch"), std::string::npos) << out;
}

// `wait` names an unknown run (exit 4) and rides out a Redis restart: the run goes on from the
// AOF and wait still ends 0 (it used to exit 1 at the first error, issue #14).
TEST(LocalStack, WaitRidesOutARedisRestartAndNamesAnUnknownRun) {
  Stack st(json::parse(R"({"pools": [
        {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
        {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 0.4}}},
        {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}}]})"));
  EXPECT_EQ(st.wait("no-such-run", 10), 4);
  const std::string run = st.submit(batch(6));
  const fs::path log = st.dir() / "wait.log";
  pid_t waiter = ts::spawn({ts::bin("h3pipe"), "--config", (st.dir() / "cluster.json").string(), "wait",
                            run, "--timeout", "120"}, log.string());
  ASSERT_GT(waiter, 0);
  ASSERT_TRUE(ts::wait_for([&] { return st.status(run)["stages"].value("sample", 0) >= 1; }, 30));
  const int redis_pid = st.pid_of("redis");
  ASSERT_GT(redis_pid, 0);
  ASSERT_EQ(::kill(redis_pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(waiter, &status, 0), waiter);
  std::ifstream in(log);
  const std::string out{std::istreambuf_iterator<char>(in), {}};
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_NE(out.find("6 done, 0 failed"), std::string::npos) << out;
}

// The stream door refuses what it cannot take, with the reason in `status`, and never touches an
// existing job: another spec for a finished job, a bad spec naming it, no `spec`, no `run`
// (issues #13, #14: a bad spec flipped a done job to failed; the others were dropped or filed
// under run "default").
TEST(LocalStack, StreamSubmissionsRefuseWithReasonsAndLeaveExistingJobsAlone) {
  Stack st;
  const std::string run = st.submit(batch(1));
  ASSERT_EQ(st.wait(run, 60), 0);
  auto r = st.redis("operator");
  const std::string same = st.status(run)["jobs"][0].dump();
  auto xadd = [&](std::vector<std::string> fields) {
    std::vector<std::string> argv = {"XADD", keys::submit(), "*"};
    argv.insert(argv.end(), fields.begin(), fields.end());
    ASSERT_TRUE(r->command(argv).ok());
  };
  xadd({"run", run, "spec", R"({"jobId":"j00","prompt":"another prompt","width":64,"height":64,"frames":9})"});
  xadd({"run", run, "spec", R"({"jobId":"j00","prompt":""})"});
  xadd({"run", run});
  xadd({"spec", R"({"jobId":"x","prompt":"p"})"});
  // The two naming j00 are refused beside the run (issue #22: never a job, never the verdict);
  // the one without a spec is a failed job of its own.
  ASSERT_TRUE(ts::wait_for([&] { return st.status(run).value("total", 0) == 2 && st.status(run).value("refused_submissions", 0) == 2; }, 20))
      << st.status(run).dump();
  ASSERT_TRUE(ts::wait_for([&] { return st.status("invalid-runs").value("total", 0) >= 1; }, 20));
  const json s = st.status(run);
  std::string reasons;
  for (const auto& j : s["jobs"]) {
    if (j["jobId"] == "j00") {
      EXPECT_EQ(j.value("state", ""), "done") << j.dump();
    } else {
      reasons += j.value("error", "") + "\n";
    }
  }
  for (const auto& rf : s["refused"]) reasons += rf.value("reason", "") + "\n";
  EXPECT_NE(reasons.find("j00 already exists in run"), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("prompt: required"), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("spec: the submission has no spec field"), std::string::npos) << reasons;
  EXPECT_NE(st.status("invalid-runs").dump().find("run: the submission has no run field"), std::string::npos);
  EXPECT_TRUE(fs::exists(st.out(run) / "j00.mp4"));
}

// Issue #13's faults, each through the real stack and the job state machine.
TEST(LocalStack, TheSameRunIdSubmittedTwiceFinishesAndCountsEachJobOnce) {
  Stack st;
  auto f = st.dir() / "b.jsonl";
  std::ofstream(f) << batch(3, 9);
  const std::string submit = st.cli() + " run " + f.string() + " --run-id twice --background >/dev/null 2>&1";
  ASSERT_EQ(ts::sh(submit).first, 0);
  ASSERT_EQ(st.wait("twice", 60), 0);
  // The second submission of the same batch: nothing new to do, and `wait` ends (it hung at
  // decode 3/6: the run expected six jobs).
  ASSERT_EQ(ts::sh(submit).first, 0);
  ASSERT_EQ(st.wait("twice", 30), 0);
  const json s = st.status("twice");
  EXPECT_EQ(s["total"], 3);
  EXPECT_EQ(s["done"], 3);
  EXPECT_EQ(s["stages"], json::parse(R"({"encode": 3, "sample": 3, "decode": 3})")) << s.dump();
  EXPECT_EQ(s["illegal_transitions"], 0);
}

TEST(LocalStack, ResumeAfterCancelFinishesEveryJobAndCancelledIsItsOwnOutcome) {
  Stack st(json::parse(R"({"pools": [
        {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
        {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 0.2}}},
        {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}}]})"));
  const std::string run = st.submit(batch(12, 9));
  ASSERT_TRUE(ts::wait_for([&] { return st.status(run)["stages"].value("decode", 0) >= 2; }, 30));
  ASSERT_EQ(ts::sh(st.cli() + " cancel " + run + " >/dev/null").first, 0);
  // Every job ends done or cancelled; `wait` says so with exit 1.
  EXPECT_EQ(st.wait(run, 30), 1);
  json s = st.status(run);
  EXPECT_GT(s["cancelled_jobs"].get<int>(), 0) << s.dump();
  EXPECT_EQ(s["failed"], 0) << s.dump();
  for (const auto& j : s["jobs"])
    if (j["state"] == "cancelled")
      EXPECT_EQ(j["error"].get<std::string>().find("cancelled at "), 0u) << j.dump();
  // Resume: every job finishes (9 of 30 did: workers dropped the resumed tasks as cancelled).
  auto [rc, out] = ts::sh(st.cli() + " resume " + run);
  ASSERT_EQ(rc, 0) << out;
  ASSERT_EQ(st.wait(run, 60), 0) << st.status(run).dump();
  s = st.status(run);
  EXPECT_EQ(s["done"], 12);
  EXPECT_EQ(s["cancelled_jobs"], 0);
  for (int i = 0; i < 12; ++i) EXPECT_TRUE(fs::exists(st.out(run) / fmt::format("j{:02d}.mp4", i))) << i;
}

TEST(LocalStack, ResumeAfterADeletedReceiptRedoesItAndTheRunFinishesWithEveryJobOnce) {
  Stack st;
  const std::string run = st.submit(batch(4, 9));
  ASSERT_EQ(st.wait(run, 60), 0);
  fs::remove(st.out(run) / "j01.pipeline.json");
  auto [rc, out] = ts::sh(st.cli() + " resume " + run);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("re-enqueued 0 encode, 0 sample, 1 decode"), std::string::npos) << out;
  ASSERT_EQ(st.wait(run, 60), 0);
  const json s = st.status(run);
  EXPECT_EQ(s["done"], 4) << s.dump();
  EXPECT_EQ(s["finished"], true);
  EXPECT_EQ(s["stages"]["decode"], 4) << s.dump();  // jobs, not executions
  EXPECT_TRUE(artifacts::verify(st.out(run) / "j01.pipeline.json").ok());
}

// A GPU group live (issue #13): an encoder on a sampler's GPUs and that sampler take turns
// through the group's lease in Redis; the receipts show no encode overlapping a sampling.
TEST(LocalStack, AnEncoderAndASamplerSharingGpusNeverRunAtOnce) {
  Stack st(json::parse(R"({"pools": [
        {"name": "enc", "host": "local", "stage": "encode", "shares_gpus_with": "s0", "profiles": {"default": {"kind": "fixed", "seconds": 0.08}}},
        {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 0.12}}},
        {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}}]})"));
  const std::string run = st.submit(batch(6, 9));
  ASSERT_EQ(st.wait(run, 60), 0);
  std::vector<std::pair<long long, long long>> gpu_busy;  // (start, end) of every encode and sample
  for (int i = 0; i < 6; ++i) {
    json r;
    std::ifstream(st.out(run) / fmt::format("j{:02d}.pipeline.json", i)) >> r;
    for (const auto& s : r["stages"])
      if (s["pool"] == "enc" || s["pool"] == "s0")
        gpu_busy.emplace_back(std::stoll(s["startUnixMs"].get<std::string>()), std::stoll(s["endUnixMs"].get<std::string>()));
  }
  ASSERT_EQ(gpu_busy.size(), 12u);
  std::sort(gpu_busy.begin(), gpu_busy.end());
  for (std::size_t i = 1; i < gpu_busy.size(); ++i)
    EXPECT_LE(gpu_busy[i - 1].second, gpu_busy[i].first) << "overlap at " << i;
}

// `--state-dir` is the state dir, relative or not, also over a config that names another one
// (the flag was only the default for a config naming none); so is a relative $H3PIPE_STATE for
// a config naming none.  A relative one used to stop `start`: redis-server changes into its data
// dir before it reads its ACL file, so it looked for st/redis/users.acl under st/redis.
TEST(LocalStack, ARelativeStateDirRunsTheStackThereAndTheFlagBeatsTheConfig) {
  ts::TempDir dir;
  json cfg = json::parse(R"({
    "name": "rel", "state_dir": "elsewhere",
    "queue": {"lease_ms": 1500, "renew_ms": 300, "sweep_ms": 200, "max_deliveries": 3, "block_ms": 50},
    "hosts": [{"name": "local"}],
    "pools": [
      {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
      {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 0.05}}},
      {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.02}}}
    ]})");
  std::ofstream(dir.path() / "named.json") << cfg.dump(2);
  cfg.erase("state_dir");
  std::ofstream(dir.path() / "unnamed.json") << cfg.dump(2);
  std::ofstream(dir.path() / "batch.jsonl") << batch(2);
  auto mp4s_under = [&](const std::string& sd) {
    std::size_t n = 0;
    if (fs::exists(dir.path() / sd / "outputs"))
      for (const auto& e : fs::recursive_directory_iterator(dir.path() / sd / "outputs"))
        n += e.path().extension() == ".mp4";
    return n;
  };
  for (const auto& [how, sd] : {std::pair{"--config named.json --state-dir st", "st"},
                                 std::pair{"--config unnamed.json", "st-env"}}) {
    SCOPED_TRACE(how);
    const std::string cli = "cd " + dir.path().string() + " && H3PIPE_STATE=st-env " + ts::bin("h3pipe") + " " + how;
    auto [rc, out] = ts::sh(cli + " start 2>&1");
    ASSERT_EQ(rc, 0) << out;
    std::tie(rc, out) = ts::sh(cli + " run batch.jsonl 2>&1");
    EXPECT_EQ(rc, 0) << out;
    EXPECT_EQ(ts::sh(cli + " stop 2>&1").first, 0);
    EXPECT_EQ(mp4s_under(sd), 2u) << out;
  }
  EXPECT_FALSE(fs::exists(dir.path() / "elsewhere")) << "the flag is the state dir, not the config's";
}

// `stop --host NAME` (what `stop --all` runs on each host over ssh; `stop` once refused the
// flag, so `stop --all` stopped nothing) stops the stack here only if it is that host's.
TEST(LocalStack, StopWithAHostStopsOnlyThatHostsStack) {
  Stack st;
  auto [rc, out] = ts::sh(st.cli() + " stop --host nowhere 2>&1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("\"nowhere\" is not a host of the config"), std::string::npos) << out;
  // The same state dir seen through a config of two hosts: the stack here is host local's.
  json two;
  std::ifstream(st.dir() / "cluster.json") >> two;
  two["hosts"].push_back({{"name", "other"}, {"address", "192.0.2.7"}});
  std::ofstream(st.dir() / "two.json") << two.dump(2);
  const std::string cli2 = ts::bin("h3pipe") + " --config " + (st.dir() / "two.json").string();
  std::tie(rc, out) = ts::sh(cli2 + " stop --host other 2>&1");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("runs host \"local\", not \"other\"; left running"), std::string::npos) << out;
  EXPECT_EQ(::kill(st.stack()["supervisor_pid"].get<int>(), 0), 0) << "the stack still runs";
  std::tie(rc, out) = ts::sh(cli2 + " stop --host local 2>&1");
  EXPECT_EQ(rc, 0) << out;
}
