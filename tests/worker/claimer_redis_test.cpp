// The Claimer (common/worker/claimer.h): where a pool decides what it runs next, over a real
// redis-server (label: redis).  It takes in the claim order (a priority task first, then stream
// order), asks the dispatch policy before new work only, and folds the next claim into a
// completion only when the engine asks it (NextClaim::fold_into), never as a side effect of the
// ledger's move; what it folded is handed out next, already started.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/config/config.h"
#include "common/queue/keys.h"
#include "common/state/state.h"
#include "common/worker/claimer.h"
#include "common/worker/redis_tasks.h"
#include "common/worker/worker.h"
#include "tests/support/cluster.h"
#include "tests/support/test_support.h"

using namespace h3pipe;

namespace {

std::string task(const std::string& job) {
  pb::StageTask t;
  t.set_run_id("r");
  t.set_job_id(job);
  t.set_stage(pb::STAGE_SAMPLE);
  return t.SerializeAsString();
}

struct Rig {
  ts::RedisServer srv;
  ts::TempDir dir;
  config::Cluster c;
  std::unique_ptr<queue::Redis> r;
  std::unique_ptr<worker::RedisTasks> tasks;
  int asked = 0;
  bool yes = true;
  const std::string stream = worker::stream_for(config::StageKind::kSample, "h1");

  explicit Rig(bool unconditional = true) {
    auto parsed = config::parse(ts::one_host_on_redis(srv.port(), dir.path()), dir.path());
    EXPECT_TRUE(parsed.ok()) << parsed.error().message;
    c = std::move(parsed.value());
    auto conn = srv.connect();
    EXPECT_TRUE(conn.ok());
    r = std::move(conn.value());
    worker::ClaimerOptions o;
    o.cluster = &c;
    o.pool = c.find_pool("samp");
    o.redis = srv.address();
    o.consumer = "samp";
    o.policy.may_claim = [this] {
      ++asked;
      return yes;
    };
    o.policy.unconditional = unconditional;
    auto t = worker::RedisTasks::create(std::move(o));
    EXPECT_TRUE(t.ok()) << t.error().to_string();
    tasks = std::move(t.value());
  }
  worker::Claimer& claimer() { return tasks->claimer(); }
  // A job waiting for its sample stage, its task on the stream with a priority.
  std::string add(const std::string& job, int prio) {
    EXPECT_TRUE(r->command({"HSET", keys::job("r", job), "state", "sample"}).ok());
    auto id = r->command({"XADD", stream, "*", "task", task(job), "prio", std::to_string(prio),
                          "run", "r", "job", job});
    EXPECT_TRUE(id.ok());
    return id.ok() ? queue::reply_str(id->get()) : "";
  }
  std::string job_of(const worker::Taken& t) {
    pb::StageTask st;
    EXPECT_TRUE(st.ParseFromString(t.entry.payload));
    return st.job_id();
  }
  // The task's completion as the engine makes it: asks the Claimer to fold when `fold`.
  Result<state::Moved> complete(const worker::Taken& t, bool fold) {
    pb::StageRecord rec;
    rec.set_stage(pb::STAGE_SAMPLE);
    auto m = state::Store::advance_move("r", job_of(t), rec, state::JobState::kDecode,
                                        keys::stream("decode@h1"), task(job_of(t)));
    if (fold) claimer().fold_into(m);
    auto moved = tasks->apply(m, t.entry.id);
    if (fold && moved.ok() && m.then_claim) claimer().folded(std::move(moved->claimed));
    return moved;
  }
};

}  // namespace

TEST(Claimer, TakesInTheClaimOrderAndAsksThePolicyOnlyBeforeNewWork) {
  Rig rig;
  rig.add("a", 0);
  rig.add("b", 0);
  rig.add("c", 5);
  rig.yes = false;
  auto no = rig.claimer().take();
  ASSERT_TRUE(no.ok()) << no.error().to_string();
  EXPECT_FALSE(no->taken.has_value());
  EXPECT_TRUE(no->refused);
  EXPECT_EQ(rig.asked, 1);
  rig.yes = true;
  auto got = rig.claimer().take();
  ASSERT_TRUE(got.ok() && got->taken) << "nothing taken";
  EXPECT_EQ(rig.job_of(*got->taken), "c");  // priority 5 before the two older priority-0 tasks
  EXPECT_FALSE(got->refused);
  EXPECT_EQ(rig.asked, 2);
}

TEST(Claimer, TheNextClaimRidesInACompletionOnlyWhenTheEngineAsks) {
  Rig rig;
  rig.add("a", 0);
  rig.add("b", 0);
  rig.add("c", 0);
  auto a = rig.claimer().take();
  ASSERT_TRUE(a.ok() && a->taken);
  ASSERT_EQ(rig.job_of(*a->taken), "a");
  // The ledger's own move claims nothing (no side effect of apply).
  pb::StageTask ta;
  ASSERT_TRUE(ta.ParseFromString(a->taken->entry.payload));
  if (!a->taken->started) {
    ASSERT_TRUE(rig.tasks->start(ta, a->taken->entry.id).ok());
  }
  auto plain = rig.complete(*a->taken, false);
  ASSERT_TRUE(plain.ok()) << plain.error().to_string();
  EXPECT_EQ(plain->code, state::Applied::kApplied);
  EXPECT_FALSE(plain->claimed.has_value());
  EXPECT_FALSE(rig.claimer().claimed_ahead());
  // b through a plain claim; its completion, asked to fold, claims c and starts it.
  auto b = rig.claimer().take();
  ASSERT_TRUE(b.ok() && b->taken);
  ASSERT_EQ(rig.job_of(*b->taken), "b");
  pb::StageTask tb;
  ASSERT_TRUE(tb.ParseFromString(b->taken->entry.payload));
  if (!b->taken->started) {
    ASSERT_TRUE(rig.tasks->start(tb, b->taken->entry.id).ok());
  }
  const int asked = rig.asked;
  auto folded = rig.complete(*b->taken, true);
  ASSERT_TRUE(folded.ok()) << folded.error().to_string();
  EXPECT_EQ(folded->code, state::Applied::kApplied);
  ASSERT_TRUE(rig.claimer().claimed_ahead());
  auto c = rig.claimer().take();
  ASSERT_TRUE(c.ok() && c->taken);
  EXPECT_EQ(rig.job_of(*c->taken), "c");
  ASSERT_TRUE(c->taken->started.has_value());  // started in the completion's script
  EXPECT_FALSE(c->taken->started->refused);
  EXPECT_EQ(rig.asked, asked);  // handed out ahead: no second policy question
  EXPECT_EQ(test_support::hget(*rig.r, keys::job("r", "c"), "state"), "sample");
  EXPECT_EQ(test_support::hget(*rig.r, keys::job("r", "b"), "state"), "decode");
}

TEST(Claimer, APolicyThatCanSayNoIsNeverFoldedIntoACompletion) {
  Rig rig(false);
  rig.add("a", 0);
  rig.add("b", 0);
  auto a = rig.claimer().take();
  ASSERT_TRUE(a.ok() && a->taken);
  pb::StageTask ta;
  ASSERT_TRUE(ta.ParseFromString(a->taken->entry.payload));
  if (!a->taken->started) {
    ASSERT_TRUE(rig.tasks->start(ta, a->taken->entry.id).ok());
  }
  pb::StageRecord rec;
  auto m = state::Store::advance_move("r", "a", rec, state::JobState::kDecode,
                                      keys::stream("decode@h1"), task("a"));
  rig.claimer().fold_into(m);
  EXPECT_FALSE(m.then_claim.has_value());  // the board must read before the next claim
}
