// A forged stage task (issue #22 item 5): the operator user may XADD to every stage stream, so
// every worker checks a task's spec against the limits (spec::validate, as submission does)
// before it allocates.  Against the real local stack (`h3pipe start`: a private redis-server and
// real service processes, sim runtimes): out-of-range and malformed specs XADDed straight onto
// the encode, sample and decode streams fail their job after one delivery with the reason in the
// job's error and the dead-letter stream, every service process stays up, and a valid run still
// completes.  Also: an unknown jobClass in a batch is refused by the CLI as FILE:LINE (item 11).
// Label: e2e.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/proto/h3pipe.pb.h"
#include "common/queue/keys.h"
#include "common/queue/reply.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

class ForgedTasks : public ::testing::Test {
 protected:
  void SetUp() override {
    json cfg = json::parse(R"({
      "name": "forged", "queue": {"lease_ms": 1500, "renew_ms": 300, "sweep_ms": 200, "max_deliveries": 5, "block_ms": 50},
      "hosts": [{"name": "local"}],
      "classes": [{"name": "hd", "width": 128, "height": 96, "frames": 9}],
      "pools": [
        {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
        {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 0.05}}},
        {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.02}}}
      ]})");
    cfg["state_dir"] = d_.path().string();
    config_ = d_.path() / "cluster.json";
    std::ofstream(config_) << cfg.dump(2);
    auto [rc, out] = ts::sh(cli() + " start 2>&1");
    ASSERT_EQ(rc, 0) << out;
    std::ifstream(d_.path() / "stack.json") >> stack_;
    admin_ = std::move(queue::Redis::connect(ts::stack_redis(stack_, "admin")).value());
    op_ = std::move(queue::Redis::connect(ts::stack_redis(stack_, "operator")).value());
  }
  void TearDown() override { ts::sh(cli() + " stop >/dev/null 2>&1"); }

  std::string cli() const { return ts::bin("h3pipe") + " --config " + config_.string(); }
  std::string hget(const std::string& key, const std::string& field) {
    auto r = admin_->command({"HGET", key, field});
    return r.ok() ? queue::reply_str(r->get()) : "";
  }
  // (exit status, stdout: the run id; with `errors`, stderr too)
  std::pair<int, std::string> run_batch(const std::string& text, bool errors = false) {
    const fs::path f = d_.path() / "batch.jsonl";
    std::ofstream(f) << text;
    return ts::sh(cli() + " run " + f.string() + " --background" +
                  (errors ? " 2>&1" : " 2>/dev/null"));
  }

  ts::TempDir d_;
  fs::path config_;
  json stack_;
  std::unique_ptr<queue::Redis> admin_, op_;
};

pb::JobSpec valid_spec(const std::string& job) {
  pb::JobSpec s;
  s.set_job_id(job);
  s.set_prompt("a forged task");
  s.set_width(128);
  s.set_height(96);
  s.set_frames(9);
  s.set_fps(12);
  s.set_steps(2);
  return s;
}

struct Forgery {
  std::string name;
  std::function<void(pb::JobSpec&)> edit;
  std::string reason;  // in the job's error
};

TEST_F(ForgedTasks, AnOutOfRangeSpecOnAnyStageStreamFailsItsJobAtOnceAndTheWorkersCarryOn) {
  // A run the forged jobs join (the stack works before and after).
  auto [rc, out] =
      run_batch(R"({"jobId":"ok1","prompt":"fine","width":128,"height":96,"frames":9,"fps":12})"
                "\n");
  ASSERT_EQ(rc, 0) << out;
  const std::string run = out.substr(0, out.find('\n'));
  ASSERT_EQ(ts::sh(cli() + " wait " + run + " --timeout 120 >/dev/null 2>&1").first, 0);

  const std::vector<Forgery> forgeries = {
      {"huge",
       [](pb::JobSpec& s) {
         s.set_width(8192);
         s.set_height(8192);
       },
       "width: 8192 exceeds the limit 1920"},
      {"odd", [](pb::JobSpec& s) { s.set_width(100); }, "width: "},
      {"nosteps", [](pb::JobSpec& s) { s.set_steps(0); }, "steps: must be at least 1"},
      {"noframes",
       [](pb::JobSpec& s) {
         s.set_frames(0);
         s.set_fps(0);
       },
       "frames: must be at least 1"},
      {"noprompt", [](pb::JobSpec& s) { s.clear_prompt(); },
       "prompt: required and must not be empty"},
      {"class", [](pb::JobSpec& s) { s.set_job_class("xl"); },
       "jobClass: \"xl\" is not a job class"},
      {"otherjob", [](pb::JobSpec& s) { s.set_job_id("ok1"); }, "jobId: the task is for job"},
  };
  const std::vector<std::tuple<pb::Stage, std::string, std::string>> stages = {
      {pb::STAGE_ENCODE, "encode", keys::stream("encode")},
      {pb::STAGE_SAMPLE, "sample", keys::stream("sample")},
      {pb::STAGE_DECODE, "decode", keys::stream("decode@local")}};
  std::vector<std::tuple<std::string, std::string, std::string>> forged;  // job, stage, reason
  for (const auto& [stage, key, stream] : stages) {
    for (const auto& f : forgeries) {
      const std::string job = "forged-" + key + "-" + f.name;
      pb::JobSpec s = valid_spec(job);
      f.edit(s);
      pb::StageTask t;
      t.set_run_id(run);
      t.set_job_id(job);
      t.set_stage(stage);
      t.set_target_host("local");
      *t.mutable_spec() = s;
      // The job is at this stage (the forger's setup), then the task goes straight onto the stream
      // as the operator user, bypassing the submission check.
      ASSERT_TRUE(admin_->command({"HSET", keys::job(run, job), "state", key}).ok());
      ASSERT_TRUE(admin_->command({"HINCRBY", keys::run(run), "n:" + key, "1"}).ok());
      auto x = op_->command({"XADD", stream, "*", "task", t.SerializeAsString()});
      ASSERT_TRUE(x.ok()) << x.error().to_string();
      forged.emplace_back(job, key, f.reason);
    }
  }
  for (const auto& [job, key, reason] : forged) {
    SCOPED_TRACE(job);
    const std::string jk = keys::job(run, job);
    ASSERT_TRUE(ts::wait_for([&] { return hget(jk, "state") == "failed"; }, 60))
        << hget(jk, "state");
    const std::string error = hget(jk, "error");
    EXPECT_NE(error.find(key + " refused the task's spec"), std::string::npos) << error;
    EXPECT_NE(error.find(reason), std::string::npos) << error;
    EXPECT_EQ(hget(jk, "attempts:" + key), "1") << "dead-lettered on the first delivery";
  }
  // Each one is in the dead-letter stream with its reason.
  auto dead = admin_->command({"XRANGE", keys::dead_letter(), "-", "+"});
  ASSERT_TRUE(dead.ok());
  std::size_t refused = 0;
  for (std::size_t i = 0; i < dead->get()->elements; ++i) {
    const redisReply* fields = dead->get()->element[i]->element[1];
    for (std::size_t k = 0; k + 1 < fields->elements; k += 2)
      if (queue::reply_str(fields->element[k]) == "reason" &&
          queue::reply_str(fields->element[k + 1]).find("refused the task's spec") !=
              std::string::npos)
        ++refused;
  }
  EXPECT_EQ(refused, forged.size());
  // Every service process is still the one that started, and the stack still runs a job.
  json now;
  std::ifstream(d_.path() / "stack.json") >> now;
  for (const auto& p : stack_["processes"]) {
    EXPECT_EQ(::kill(p["pid"].get<int>(), 0), 0) << p["name"] << " died";
    for (const auto& q : now["processes"])
      if (q["name"] == p["name"]) {
        EXPECT_EQ(q["pid"], p["pid"]) << p["name"] << " was restarted";
      }
  }
  auto [rc2, out2] = run_batch(
      R"({"jobId":"ok2","prompt":"still fine","width":128,"height":96,"frames":9,"fps":12})"
      "\n");
  ASSERT_EQ(rc2, 0) << out2;
  const std::string run2 = out2.substr(0, out2.find('\n'));
  EXPECT_EQ(ts::sh(cli() + " wait " + run2 + " --timeout 120 >/dev/null 2>&1").first, 0);
}

TEST_F(ForgedTasks, AnUnknownJobClassIsRefusedAtSubmissionAsFileLine) {
  const std::string text =
      R"({"jobId":"a","prompt":"p","jobClass":"hd","width":128,"height":96,"frames":9})"
      "\n"
      R"({"jobId":"b","prompt":"p","jobClass":"xl"})"
      "\n";
  auto [rc, out] = run_batch(text, true);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(
      out.find((d_.path() / "batch.jsonl").string() +
               ":2: jobClass: \"xl\" is not a job class of this cluster (known: default, hd)"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("nothing was submitted"), std::string::npos) << out;
}

}  // namespace
