// End to end through the real local stack, continued (local_stack_e2e_test.cpp): batch limits,
// Redis restarts, stream submissions, run ids, resume, GPU groups, state dirs, hosts.  Label: e2e.
#include "tests/e2e/local_stack_fixture.h"

using namespace h3pipe;
using namespace h3pipe::e2e_stack;

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
  EXPECT_NE(
      out.find("above the 480000 KiB limit for a JSON lines batch file set by limits.max_batch"),
      std::string::npos)
      << out;
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
  pid_t waiter = ts::spawn({ts::bin("h3pipe"), "--config", (st.dir() / "cluster.json").string(),
                            "wait", run, "--timeout", "120"},
                           log.string());
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
  xadd({"run", run, "spec",
        R"({"jobId":"j00","prompt":"another prompt","width":64,"height":64,"frames":9})"});
  xadd({"run", run, "spec", R"({"jobId":"j00","prompt":""})"});
  xadd({"run", run});
  xadd({"spec", R"({"jobId":"x","prompt":"p"})"});
  // The two naming j00 are refused beside the run (issue #22: never a job, never the verdict);
  // the one without a spec is a failed job of its own.
  ASSERT_TRUE(ts::wait_for(
      [&] {
        return st.status(run).value("total", 0) == 2 &&
               st.status(run).value("refused_submissions", 0) == 2;
      },
      20))
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
  EXPECT_NE(st.status("invalid-runs").dump().find("run: the submission has no run field"),
            std::string::npos);
  EXPECT_TRUE(fs::exists(st.out(run) / "j00.mp4"));
}

// Issue #13's faults, each through the real stack and the job state machine.
TEST(LocalStack, TheSameRunIdSubmittedTwiceFinishesAndCountsEachJobOnce) {
  Stack st;
  auto f = st.dir() / "b.jsonl";
  std::ofstream(f) << batch(3, 9);
  const std::string submit =
      st.cli() + " run " + f.string() + " --run-id twice --background >/dev/null 2>&1";
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
    if (j["state"] == "cancelled") {
      EXPECT_EQ(j["error"].get<std::string>().find("cancelled at "), 0u) << j.dump();
    }
  // Resume: every job finishes (9 of 30 did: workers dropped the resumed tasks as cancelled).
  auto [rc, out] = ts::sh(st.cli() + " resume " + run);
  ASSERT_EQ(rc, 0) << out;
  ASSERT_EQ(st.wait(run, 60), 0) << st.status(run).dump();
  s = st.status(run);
  EXPECT_EQ(s["done"], 12);
  EXPECT_EQ(s["cancelled_jobs"], 0);
  for (int i = 0; i < 12; ++i)
    EXPECT_TRUE(fs::exists(st.out(run) / fmt::format("j{:02d}.mp4", i))) << i;
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
        gpu_busy.emplace_back(std::stoll(s["startUnixMs"].get<std::string>()),
                              std::stoll(s["endUnixMs"].get<std::string>()));
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
    const std::string cli =
        "cd " + dir.path().string() + " && H3PIPE_STATE=st-env " + ts::bin("h3pipe") + " " + how;
    auto [rc, out] = ts::sh(cli + " start 2>&1");
    ASSERT_EQ(rc, 0) << out;
    std::tie(rc, out) = ts::sh(cli + " run batch.jsonl 2>&1");
    EXPECT_EQ(rc, 0) << out;
    EXPECT_EQ(ts::sh(cli + " stop 2>&1").first, 0);
    EXPECT_EQ(mp4s_under(sd), 2u) << out;
  }
  EXPECT_FALSE(fs::exists(dir.path() / "elsewhere"))
      << "the flag is the state dir, not the config's";
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
