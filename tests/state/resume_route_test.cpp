// `resume` re-enqueues a decode where the latent is (issue #13): the hosts the job's history says
// hold it, through the one decode-host choice; a latent only on a sampling host that does not
// decode goes to that host's transfer sender (its outbox), never straight onto a decode stream
// of a host that does not have it.  Real redis-server, the real h3pipe binary, real files.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/artifacts/artifacts.h"
#include "common/config/config.h"
#include "common/queue/keys.h"
#include "common/queue/reply.h"
#include "common/state/paths.h"
#include "common/state/resume.h"
#include "common/state/state.h"
#include "common/transfer/config_map.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  ts::TempDir dir;
  ts::RedisServer redis;
  std::string config_path;
  config::Cluster cluster;

  // Sampler on a (no decoder); decoders on b and c, b's faster.  The transfer ports only satisfy
  // the multi-host config check: nothing listens or connects in this test.
  Fixture() {
    nlohmann::json j = {{"name", "resume-route"},
                        {"state_dir", (dir.path() / "state").string()},
                        {"transfer", {{"curve", false}}},
                        {"hosts",
                         {{{"name", "a"}, {"address", "127.0.0.1"}},
                          {{"name", "b"}, {"address", "127.0.0.1"}, {"transfer_port", 7701}},
                          {{"name", "c"}, {"address", "127.0.0.1"}, {"transfer_port", 7702}}}},
                        {"pools",
                         {{{"name", "s"}, {"host", "a"}, {"stage", "sample"}},
                          {{"name", "db"},
                           {"host", "b"},
                           {"stage", "decode"},
                           {"profiles", {{"default", {{"kind", "fixed"}, {"seconds", 2}}}}}},
                          {{"name", "dc"},
                           {"host", "c"},
                           {"stage", "decode"},
                           {"profiles", {{"default", {{"kind", "fixed"}, {"seconds", 5}}}}}},
                          {{"name", "e"}, {"host", "a"}, {"stage", "encode"}}}},
                        {"links",
                         {{{"from", "a"}, {"to", "b"}, {"gbps", 10}, {"latency_ms", 1}},
                          {{"from", "a"}, {"to", "c"}, {"gbps", 10}, {"latency_ms", 1}}}}};
    config_path = (dir.path() / "c.json").string();
    std::ofstream(config_path) << j.dump(2);
    auto c = config::load_file(config_path);
    EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().to_string());
    if (c.ok()) cluster = *c;
  }

  // A job whose latent was sampled on a (and delivered to `received_on`, if not empty).
  void make_job(queue::Redis& r, const std::string& run, const std::string& job,
                const std::string& received_on) {
    state::Store store(r);
    ASSERT_TRUE(store.create_run(run, {job}).ok());
    pb::JobSpec spec;
    spec.set_job_id(job);
    spec.set_prompt("p");
    spec.set_width(64);
    spec.set_height(64);
    spec.set_frames(9);
    spec.set_fps(12);
    auto accepted = store.accept_job(run, spec, "x");
    ASSERT_TRUE(accepted.ok() && *accepted);
    ASSERT_TRUE(r.command({"DEL", keys::stream("encode")}).ok());  // the encode ran long ago
    for (const auto& [stage, host] : std::vector<std::pair<pb::Stage, std::string>>{
             {pb::STAGE_SAMPLE, "a"}, {pb::STAGE_TRANSFER, received_on}}) {
      if (host.empty()) continue;
      pb::StageRecord rec;
      rec.set_stage(stage);
      rec.set_host(host);
      std::string js;
      ASSERT_TRUE(google::protobuf::util::MessageToJsonString(rec, &js).ok());
      ASSERT_TRUE(r.command({"RPUSH", keys::history(run, job), js}).ok());
    }
    auto lat = paths::latent(cluster, run, job);
    ASSERT_TRUE(lat.ok());
    ASSERT_TRUE(artifacts::write_once(*lat, std::string_view("latent bytes")).ok());
  }

  // `n` jobs j0..j<n-1> of one run, each sampled on a and delivered to c, its decode missing.
  void make_jobs(queue::Redis& r, const std::string& run, int n) {
    state::Store store(r);
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i) ids.push_back("j" + std::to_string(i));
    ASSERT_TRUE(store.create_run(run, ids).ok());
    for (const auto& job : ids) {
      pb::JobSpec spec;
      spec.set_job_id(job);
      spec.set_prompt("p");
      spec.set_width(64);
      spec.set_height(64);
      spec.set_frames(9);
      spec.set_fps(12);
      auto accepted = store.accept_job(run, spec, "x");
      ASSERT_TRUE(accepted.ok() && *accepted);
      for (const auto& [stage, host] : std::vector<std::pair<pb::Stage, std::string>>{
               {pb::STAGE_SAMPLE, "a"}, {pb::STAGE_TRANSFER, "c"}}) {
        pb::StageRecord rec;
        rec.set_stage(stage);
        rec.set_host(host);
        std::string js;
        ASSERT_TRUE(google::protobuf::util::MessageToJsonString(rec, &js).ok());
        ASSERT_TRUE(r.command({"RPUSH", keys::history(run, job), js}).ok());
      }
      auto lat = paths::latent(cluster, run, job);
      ASSERT_TRUE(lat.ok());
      ASSERT_TRUE(artifacts::write_once(*lat, std::string_view("latent bytes")).ok());
    }
    ASSERT_TRUE(r.command({"DEL", keys::stream("encode")}).ok());  // the encodes ran long ago
  }

  std::pair<int, std::string> resume(const std::string& run) {
    return ts::sh(ts::bin("h3pipe") + " --config " + config_path + " --redis 127.0.0.1:" +
                  std::to_string(redis.port()) + " resume " + run + " 2>&1");
  }
};

long long xlen(queue::Redis& r, const std::string& host) {
  auto n = r.command({"XLEN", keys::stream("decode@" + host)});
  return n.ok() ? queue::reply_int(n->get()) : -1;
}

}  // namespace

TEST(ResumeRoute, ALatentDeliveredToADecodeHostIsDecodedThere) {
  Fixture f;
  auto r = f.redis.connect();
  ASSERT_TRUE(r.ok());
  f.make_job(**r, "r1", "j1", "c");  // on a and c; b is faster but does not have it
  auto [rc, out] = f.resume("r1");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(xlen(**r, "c"), 1) << out;
  EXPECT_EQ(xlen(**r, "b"), 0);
}

TEST(ResumeRoute, ALatentOnlyOnTheSamplingHostGoesThroughItsSender) {
  Fixture f;
  auto r = f.redis.connect();
  ASSERT_TRUE(r.ok());
  f.make_job(**r, "r2", "j2", "");
  auto [rc, out] = f.resume("r2");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(xlen(**r, "b"), 0) << "b never received the latent: " << out;
  EXPECT_EQ(xlen(**r, "c"), 0);
  // The outbox record for a's sender names the host the shared choice picks (b: faster).
  const auto rec = transfer::outbox_dir(f.cluster, "a") / "r2" / "j2.task";
  ASSERT_TRUE(fs::exists(rec)) << out;
  std::ifstream in(rec, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  pb::StageTask t;
  ASSERT_TRUE(t.ParseFromString(bytes));
  EXPECT_EQ(t.target_host(), "b");
  EXPECT_EQ(t.stage(), pb::STAGE_DECODE);
  auto state = (*r)->command({"HGET", keys::job("r2", "j2"), "state"});
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(queue::reply_str(state->get()), "transfer");
}

// Issue #35 D12: two resumes of one run at once (two operators, a retried script) do not both
// find a stage missing and enqueue it twice: the run's resume lock (state::ResumeLock) makes the
// second wait for the first and then find every decode already on its stream.  Before the lock,
// jobs the two loops both reached before the other's enqueue were decoded twice.
TEST(ResumeRoute, TwoConcurrentResumesEnqueueEachMissingStageOnce) {
  Fixture f;
  auto r = f.redis.connect();
  ASSERT_TRUE(r.ok());
  constexpr int kJobs = 150;
  f.make_jobs(**r, "r3", kJobs);
  std::pair<int, std::string> first, second;
  std::thread a([&] { first = f.resume("r3"); });
  std::thread b([&] { second = f.resume("r3"); });
  a.join();
  b.join();
  EXPECT_EQ(first.first, 0) << first.second;
  EXPECT_EQ(second.first, 0) << second.second;
  auto entries = (*r)->command({"XRANGE", keys::stream("decode@c"), "-", "+"});
  ASSERT_TRUE(entries.ok());
  std::map<std::string, int> per_job;
  const redisReply* list = entries->get();
  for (std::size_t i = 0; i < list->elements; ++i) {
    const redisReply* fields = list->element[i]->element[1];
    for (std::size_t k = 0; k + 1 < fields->elements; k += 2) {
      if (queue::reply_str(fields->element[k]) != "task") continue;
      pb::StageTask t;
      ASSERT_TRUE(t.ParseFromString(queue::reply_str(fields->element[k + 1])));
      per_job[t.job_id()]++;
    }
  }
  EXPECT_EQ(per_job.size(), static_cast<std::size_t>(kJobs));
  int twice = 0;
  for (const auto& [job, n] : per_job) twice += n > 1;
  EXPECT_EQ(twice, 0) << "jobs whose decode was enqueued more than once; first: " << first.second
                      << "second: " << second.second;
  EXPECT_EQ(xlen(**r, "c"), kJobs);
  // Both finished: the lock is gone, a third resume takes it at once and enqueues nothing.
  EXPECT_EQ((*r)->command({"EXISTS", state::ResumeLock::key("r3")})->get()->integer, 0);
  auto third = f.resume("r3");
  EXPECT_EQ(third.first, 0) << third.second;
  EXPECT_EQ(xlen(**r, "c"), kJobs);
}

// One answer from every host (issue #34 P8): a finished job whose MP4 the decode host b holds is
// done for a resume anywhere else, from its history in Redis (the decode's record on b with the
// output's SHA-256), not re-enqueued because this disk has no MP4; a job whose history records no
// decode is still redone.  No stack runs here, so no host's disk is this one.
TEST(ResumeRoute, AFinishedJobWhoseMp4IsOnAnotherHostIsDoneByItsHistory) {
  Fixture f;
  auto r = f.redis.connect();
  ASSERT_TRUE(r.ok());
  f.make_job(**r, "r5", "j5", "b");
  ASSERT_TRUE(fs::remove(*paths::latent(f.cluster, "r5", "j5")));  // this is not host a's disk
  for (const auto& [stage, host] : std::vector<std::pair<pb::Stage, std::string>>{
           {pb::STAGE_SAMPLE, "a"}, {pb::STAGE_DECODE, "b"}}) {
    pb::StageRecord rec;  // committed: its output's SHA-256 recorded
    rec.set_stage(stage);
    rec.set_host(host);
    rec.set_output_sha256(std::string(64, 'a'));
    std::string js;
    ASSERT_TRUE(google::protobuf::util::MessageToJsonString(rec, &js).ok());
    ASSERT_TRUE((*r)->command({"RPUSH", keys::history("r5", "j5"), js}).ok());
  }
  ASSERT_TRUE((*r)->command({"HSET", keys::job("r5", "j5"), "state", "done"}).ok());
  auto [rc, out] = f.resume("r5");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("1 done, 0 in flight, re-enqueued 0 encode, 0 sample, 0 decode"),
            std::string::npos)
      << out;
  EXPECT_EQ(xlen(**r, "b"), 0) << out;
  EXPECT_EQ(xlen(**r, "c"), 0);
  auto state = (*r)->command({"HGET", keys::job("r5", "j5"), "state"});
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(queue::reply_str(state->get()), "done");
  // Done by its state alone, with no decode recorded: its latent, on a and b by the history, is
  // decoded where it is (b), and only that.
  ASSERT_TRUE((*r)->command({"RPOP", keys::history("r5", "j5")}).ok());
  auto again = f.resume("r5");
  ASSERT_EQ(again.first, 0) << again.second;
  EXPECT_NE(again.second.find("0 done"), std::string::npos) << again.second;
  EXPECT_EQ(xlen(**r, "b"), 1) << again.second;
}
