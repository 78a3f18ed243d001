// End to end through the real local stack: `h3pipe start` (private redis-server + real service
// processes), the CLI, ffprobe on the MP4s.  Label: e2e.  The stack: local_stack_fixture.h.
#include "common/queue/reply.h"
#include "tests/e2e/local_stack_fixture.h"

using namespace h3pipe;
using namespace h3pipe::e2e_stack;

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
    EXPECT_EQ(r["stages"][1]["outputSha256"], r["stages"][2]["inputSha256"])
        << "latent chain of custody";
    EXPECT_EQ(r["stages"][0]["outputSha256"], r["stages"][1]["inputSha256"])
        << "conditioning chain of custody";
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
  std::ofstream(f) << batch(2) << R"({"jobId":"x","prompt":"p","width":100})"
                   << "\n";
  auto [rc, out] = ts::sh(st.cli() + " run " + f.string() + " 2>&1");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("bad.jsonl:3: width: 100 is not a multiple of 16"), std::string::npos) << out;
  auto r = st.redis();
  EXPECT_EQ(queue::reply_int(r->command({"XLEN", keys::submit()})->get()), 0);
}

TEST(LocalStack, RedisCliSubmissionIsValidatedLikeTheCli) {
  Stack st;
  auto r = st.redis("operator");
  ASSERT_TRUE(r->command({"XADD", keys::submit(), "*", "run", "viaredis", "spec",
                          R"({"jobId":"good","prompt":"p","width":64,"height":64,"frames":9})"})
                  .ok());
  ASSERT_TRUE(r->command({"XADD", keys::submit(), "*", "run", "viaredis", "spec",
                          R"({"jobId":"bad","prompt":""})"})
                  .ok());
  ASSERT_TRUE(
      r->command({"XADD", keys::submit(), "*", "run", "viaredis", "spec", "{not json"}).ok());
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
  ASSERT_TRUE(ts::wait_for(
      [&] {
        return queue::reply_str(
                   r->command({"HGET", keys::job(run, "j00"), "exec:sample"})->get()) == "1";
      },
      20));
  int pid = st.pid_of("sampler-s0");
  ASSERT_GT(pid, 0) << st.stack().dump();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(st.wait(run), 0);
  for (const char* j : {"j00", "j01", "j02"}) {
    auto h = r->command({"HGET", keys::job(run, j), "done:sample"});
    EXPECT_EQ(queue::reply_str(h->get()), "1")
        << j << ": the sample output was committed exactly once";
    EXPECT_TRUE(fs::exists(st.out(run) / (std::string(j) + ".mp4")));
  }
  EXPECT_EQ(queue::reply_str(r->command({"HGET", keys::job(run, "j00"), "attempts:sample"})->get()),
            "2")
      << "the killed delivery and the one that completed";
  // The sim sampler writes its latent first and then sleeps out the profile: a kill during the
  // sleep leaves a verified output that the second delivery skips (exec 1), a kill during the
  // write leaves none and the stage runs again (exec 2).  Never more.
  auto exec = queue::reply_str(r->command({"HGET", keys::job(run, "j00"), "exec:sample"})->get());
  EXPECT_TRUE(exec == "1" || exec == "2") << exec;
  EXPECT_GE(st.stack()["processes"][2]["restarts"].get<int>(), 1)
      << "the supervisor restarted the sampler";
}

TEST(LocalStack, PoisonJobIsDeadLetteredWhileOthersComplete) {
  Stack st;
  std::string text =
      batch(4) +
      R"({"jobId":"poison","prompt":"p","width":64,"height":64,"frames":9,"params":{"sim.crash":"abort"}})" +
      "\n";
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
  EXPECT_EQ(
      queue::reply_str(r->command({"HGET", keys::job(run, "poison"), "attempts:sample"})->get()),
      "4");
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
  for (int i = 0; i < 8; ++i)
    done_before += fs::exists(st.out(run) / fmt::format("j{:02d}.mp4", i));
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
      auto d = queue::reply_str(
          r->command({"HGET", keys::job(run, j), std::string("done:") + stage})->get());
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
    return json{
        {"runtime", {{"name", "exec"}, {"settings", {{"command", cmd}, {"timeout_s", 60}}}}}};
  };
  Stack st(json{{"stages",
                 {{"encode", stage("encode", false)},
                  {"sample", stage("sample", true)},
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
  std::string header =
      R"({"enc.embed.weight":{"dtype":"F32","shape":[256,64],"data_offsets":[0,65536]}})";
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
  EXPECT_NE(out.find("encoder-enc cannot become ready: runtime.permanent"), std::string::npos)
      << out;
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
  // On its Unix socket in the state dir (issue #35 D1), owner only, and on no TCP port.
  const std::string sock = st.stack()["redis"]["host"].get<std::string>();
  EXPECT_EQ(fs::path(sock), st.dir() / "redis" / "redis.sock");
  EXPECT_EQ(st.stack()["redis"]["port"].get<int>(), 0);
  EXPECT_EQ(st.stack()["redis"]["tcp_port"].get<int>(), 0);
  auto anon = queue::Redis::connect({sock, 0});
  ASSERT_TRUE(anon.ok());
  auto ping = (*anon)->command({"PING"});
  ASSERT_FALSE(ping.ok());
  EXPECT_NE(ping.error().message.find("NOAUTH"), std::string::npos) << ping.error().message;
  auto as_default = queue::Redis::connect({sock, 0, "default", "x"});
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
    if (e.is_regular_file()) {
      EXPECT_EQ(mode(e.path()) & (fs::perms::group_all | fs::perms::others_all), fs::perms::none)
          << e.path();
    }
}

// One stack per state dir; a supervisor killed with -9 takes its services and Redis with it, and
// the next start begins clean (issue #14).  The same start again is "already running", exit 0,
// nothing restarted; a start with another config in that state dir is refused (#34 P6).
TEST(LocalStack, OneStackPerStateDirAndNoOrphansAfterKill9) {
  Stack st;
  const json before = st.stack();
  auto [rc, out] = ts::sh(st.cli() + " start 2>&1");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("already running"), std::string::npos) << out;
  EXPECT_EQ(st.stack()["supervisor_pid"], before["supervisor_pid"]);
  const fs::path state = before["state_dir"].get<std::string>();
  fs::copy_file(state / "cluster.json", state / "other.json");
  auto [orc, oout] =
      ts::sh(ts::bin("h3pipe") + " --config " + (state / "other.json").string() + " start 2>&1");
  EXPECT_EQ(orc, 1) << oout;
  EXPECT_NE(oout.find("already runs"), std::string::npos) << oout;
  EXPECT_NE(oout.find((state / "cluster.json").string()), std::string::npos) << oout;
  EXPECT_EQ(st.stack()["supervisor_pid"], before["supervisor_pid"]);
  std::vector<int> pids;
  for (const auto& p : before["processes"]) pids.push_back(p["pid"].get<int>());
  ASSERT_EQ(::kill(before["supervisor_pid"].get<int>(), SIGKILL), 0);
  EXPECT_TRUE(ts::wait_for(
      [&] {
        for (int pid : pids)
          if (::kill(pid, 0) == 0) return false;
        return true;
      },
      20))
      << "a child outlived its supervisor";
  st.start();
  const std::string run = st.submit(batch(2));
  EXPECT_EQ(st.wait(run, 60), 0);
}

// A batch file is read only if it is a regular file within what a batch can hold: `run
// /dev/zero` used to read forever and die of bad_alloc (issue #14).  No stack needed: the file is
// refused before Redis is reached.
