// The claim folded with its start (issue #24) in a real redis-server (label: redis): a start asked
// to peek names the stream's next entry; Store::claim_and_start claims the next new entry and,
// when it is that entry, makes its start move in the same round trip, with the same effects as
// StageQueue::claim() then Store::start_attempt (attempts, the state machine's refusal and ack).
#include <gtest/gtest.h>

#include <optional>

#include "common/queue/keys.h"
#include "common/queue/queue.h"
#include "common/queue/reply.h"
#include "common/state/state.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
using namespace h3pipe::state;
using queue::reply_int;
using queue::reply_str;

namespace {

using test_support::hget;

std::string task(const std::string& job) {
  pb::StageTask t;
  t.set_run_id("r");
  t.set_job_id(job);
  t.set_stage(pb::STAGE_SAMPLE);
  std::string out;
  t.SerializeToString(&out);
  return out;
}

struct Fixture {
  ts::RedisServer srv;
  std::unique_ptr<queue::Redis> r;
  std::unique_ptr<Store> store;
  std::unique_ptr<queue::StageQueue> q, other;
  QueueAck me{keys::stream("sample"), "sample", "me", ""};

  Fixture() {
    auto c = srv.connect();
    EXPECT_TRUE(c.ok());
    r = std::move(c.value());
    store = std::make_unique<Store>(*r);
    q = std::make_unique<queue::StageQueue>(
        *r, queue::QueueOptions{me.stream, me.group, "me", 5000, 10, 1000});
    other = std::make_unique<queue::StageQueue>(
        *r, queue::QueueOptions{me.stream, me.group, "other", 5000, 10, 1000});
    EXPECT_TRUE(q->ensure_group().ok());
  }
  // A job waiting for its sample stage, its task on the stream.
  std::string job_at_sample(const std::string& job) {
    EXPECT_TRUE(r->command({"HSET", keys::job("r", job), "state", "sample"}).ok());
    auto id = q->enqueue(task(job));
    EXPECT_TRUE(id.ok());
    return id.ok() ? *id : "";
  }
  long long pending_for(const std::string& consumer) {
    auto p = r->command({"XPENDING", me.stream, me.group, "-", "+", "10", consumer});
    return p.ok() ? static_cast<long long>(p->get()->elements) : -1;
  }
};

}  // namespace

TEST(ClaimStartRedis, TheNextEntryIsClaimedAndStartedInOneStep) {
  Fixture f;
  const std::string a = f.job_at_sample("a"), b = f.job_at_sample("b"), c = f.job_at_sample("c");
  auto first = f.q->claim();
  ASSERT_TRUE(first.ok() && first->has_value());
  ASSERT_EQ((*first)->id, a);
  QueueAck ack = f.me;
  ack.entry_id = a;
  auto s = f.store->start_attempt("r", "a", pb::STAGE_SAMPLE, ack, /*peek=*/true);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->number, 1);
  ASSERT_TRUE(s->next.has_value());
  EXPECT_EQ(s->next->entry_id, b);
  EXPECT_EQ(s->next->job_id, "b");
  EXPECT_EQ(s->next->run_id, "r");
  // Without peek: no next (the start's reply is what it was).
  EXPECT_FALSE(f.store->start_attempt("r", "a", pb::STAGE_SAMPLE, ack)->next.has_value());

  auto cs = f.store->claim_and_start(f.me, *s->next, pb::STAGE_SAMPLE);
  ASSERT_TRUE(cs.ok());
  ASSERT_TRUE(cs->has_value());
  EXPECT_EQ((*cs)->entry_id, b);
  EXPECT_EQ((*cs)->payload, task("b"));
  ASSERT_TRUE((*cs)->attempt.has_value());
  EXPECT_FALSE((*cs)->attempt->refused);
  EXPECT_EQ((*cs)->attempt->number, 1);
  EXPECT_EQ((*cs)->attempt->from, JobState::kSample);
  EXPECT_EQ(hget(*f.r, keys::job("r", "b"), "attempts:sample"), "1");
  EXPECT_EQ(f.pending_for("me"), 2);              // a and b are this consumer's
  ASSERT_TRUE((*cs)->attempt->next.has_value());  // and it looked ahead again
  EXPECT_EQ((*cs)->attempt->next->entry_id, c);
  EXPECT_EQ(hget(*f.r, keys::job("r", "c"), "attempts:sample"), "");  // c is not started
}

TEST(ClaimStartRedis, AnotherEntryIsClaimedButNotStarted) {
  Fixture f;
  const std::string a = f.job_at_sample("a"), b = f.job_at_sample("b"), c = f.job_at_sample("c");
  ASSERT_TRUE(f.q->claim().ok());
  QueueAck ack = f.me;
  ack.entry_id = a;
  auto s = f.store->start_attempt("r", "a", pb::STAGE_SAMPLE, ack, true);
  ASSERT_TRUE(s.ok() && s->next.has_value());
  // Another worker takes b first: the claim gets c, whose start is left to the caller.
  auto taken = f.other->claim();
  ASSERT_TRUE(taken.ok() && taken->has_value());
  ASSERT_EQ((*taken)->id, b);
  auto cs = f.store->claim_and_start(f.me, *s->next, pb::STAGE_SAMPLE);
  ASSERT_TRUE(cs.ok() && cs->has_value());
  EXPECT_EQ((*cs)->entry_id, c);
  EXPECT_EQ((*cs)->payload, task("c"));
  EXPECT_FALSE((*cs)->attempt.has_value());
  EXPECT_EQ(hget(*f.r, keys::job("r", "b"), "attempts:sample"), "");
  EXPECT_EQ(hget(*f.r, keys::job("r", "c"), "attempts:sample"), "");
  EXPECT_EQ(f.pending_for("me"), 2);
  // Nothing new left: nothing claimed, nothing changed.
  auto none = f.store->claim_and_start(f.me, NextEntry{"0-1", "r", "x"}, pb::STAGE_SAMPLE);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_EQ(f.pending_for("me"), 2);
}

TEST(ClaimStartRedis, AStaleTaskIsRefusedAndDroppedAsTheStartWouldDropIt) {
  Fixture f;
  const std::string a = f.job_at_sample("a"), b = f.job_at_sample("b");
  ASSERT_TRUE(
      f.r->command({"HSET", keys::job("r", "b"), "state", "done"}).ok());  // b's task is stale
  ASSERT_TRUE(f.q->claim().ok());
  QueueAck ack = f.me;
  ack.entry_id = a;
  auto s = f.store->start_attempt("r", "a", pb::STAGE_SAMPLE, ack, true);
  ASSERT_TRUE(s.ok() && s->next.has_value());
  auto cs = f.store->claim_and_start(f.me, *s->next, pb::STAGE_SAMPLE);
  ASSERT_TRUE(cs.ok() && cs->has_value() && (*cs)->attempt.has_value());
  EXPECT_EQ((*cs)->entry_id, b);
  EXPECT_TRUE((*cs)->attempt->refused);
  EXPECT_EQ((*cs)->attempt->from, JobState::kDone);
  EXPECT_EQ(f.pending_for("me"), 1);  // b acked and deleted; a still ours
  EXPECT_EQ(hget(*f.r, keys::run("r"), "illegal:done>sample"), "1");
  EXPECT_EQ(hget(*f.r, keys::job("r", "b"), "state"), "done");
}

// The completion folded with the claim after it (Move::then_claim, issue #24): one script acks
// and moves the finished job, then claims this consumer's next entry and starts it when it is
// the one the finished task's start saw next.
namespace {

struct Folded {
  Fixture f;
  std::string a, b, c;
  std::optional<Attempt> first;  // a's start, with its peek
  Folded() {
    a = f.job_at_sample("a");
    b = f.job_at_sample("b");
    c = f.job_at_sample("c");
    EXPECT_TRUE(f.q->claim().ok());
    QueueAck ack = f.me;
    ack.entry_id = a;
    auto s = f.store->start_attempt("r", "a", pb::STAGE_SAMPLE, ack, true);
    EXPECT_TRUE(s.ok() && s->next.has_value());
    if (s.ok()) first = *s;
  }
  // a's completion (sample -> decode, the decode task enqueued), with or without the claim.
  Result<Moved> complete_a(bool then_claim, int sweep_idle_ms = 0) {
    pb::StageRecord rec;
    rec.set_stage(pb::STAGE_SAMPLE);
    Move m =
        Store::advance_move("r", "a", rec, JobState::kDecode, keys::stream("decode@h"), task("a"));
    m.ack = f.me;
    m.ack->entry_id = a;
    if (then_claim)
      m.then_claim = ClaimNext{first ? *first->next : NextEntry{}, pb::STAGE_SAMPLE, sweep_idle_ms};
    return f.store->apply(m);
  }
  long long xlen(const std::string& stream) {
    auto n = f.r->command({"XLEN", stream});
    return n.ok() ? reply_int(n->get()) : -1;
  }
};

}  // namespace

TEST(ApplyClaimRedis, TheCompletionClaimsAndStartsTheNextEntryInOneCall) {
  Folded t;
  auto m = t.complete_a(true);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ(m->code, Applied::kApplied);
  EXPECT_EQ(hget(*t.f.r, keys::job("r", "a"), "state"), "decode");  // the completion, as before
  EXPECT_EQ(hget(*t.f.r, keys::job("r", "a"), "done:sample"), "1");
  EXPECT_EQ(t.xlen(keys::stream("decode@h")), 1);
  ASSERT_TRUE(m->claimed.has_value());
  EXPECT_EQ(m->claimed->entry_id, t.b);
  EXPECT_EQ(m->claimed->payload, task("b"));
  EXPECT_FALSE(m->claimed->reclaimed);
  ASSERT_TRUE(m->claimed->attempt.has_value());
  EXPECT_FALSE(m->claimed->attempt->refused);
  EXPECT_EQ(m->claimed->attempt->number, 1);
  EXPECT_EQ(hget(*t.f.r, keys::job("r", "b"), "attempts:sample"), "1");
  EXPECT_EQ(t.f.pending_for("me"), 1);  // a acked and gone, b ours
  ASSERT_TRUE(m->claimed->attempt->next.has_value());
  EXPECT_EQ(m->claimed->attempt->next->entry_id, t.c);
  EXPECT_EQ(hget(*t.f.r, keys::job("r", "c"), "attempts:sample"), "");
}

TEST(ApplyClaimRedis, AnEntryAnotherConsumerTookIsNotStarted) {
  Folded t;
  auto taken = t.f.other->claim();  // b goes to another worker
  ASSERT_TRUE(taken.ok() && taken->has_value());
  auto m = t.complete_a(true);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->code, Applied::kApplied);
  ASSERT_TRUE(m->claimed.has_value());
  EXPECT_EQ(m->claimed->entry_id, t.c);
  EXPECT_FALSE(m->claimed->attempt.has_value());  // its start is the caller's
  EXPECT_EQ(hget(*t.f.r, keys::job("r", "c"), "attempts:sample"), "");
  EXPECT_EQ(hget(*t.f.r, keys::job("r", "b"), "attempts:sample"), "");
  EXPECT_EQ(t.f.pending_for("me"), 1);
}

TEST(ApplyClaimRedis, AStaleNextTaskIsRefusedAndDropped) {
  Folded t;
  ASSERT_TRUE(t.f.r->command({"HSET", keys::job("r", "b"), "state", "done"}).ok());
  auto m = t.complete_a(true);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->code, Applied::kApplied);
  ASSERT_TRUE(m->claimed.has_value() && m->claimed->attempt.has_value());
  EXPECT_EQ(m->claimed->entry_id, t.b);
  EXPECT_TRUE(m->claimed->attempt->refused);
  EXPECT_EQ(m->claimed->attempt->from, JobState::kDone);
  EXPECT_EQ(t.f.pending_for("me"), 0);  // a completed, b refused: both acked
  EXPECT_EQ(hget(*t.f.r, keys::run("r"), "illegal:done>sample"), "1");
}

TEST(ApplyClaimRedis, ALostLeaseChangesNothingButTheClaimStillHappens) {
  Folded t;
  // a's lease went to another worker: the completion is refused as lease lost; the claim is the
  // one the worker would make right after.
  ASSERT_TRUE(
      t.f.r->command({"XCLAIM", t.f.me.stream, t.f.me.group, "other", "0", t.a, "JUSTID"}).ok());
  auto m = t.complete_a(true);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->code, Applied::kLeaseLost);
  EXPECT_EQ(hget(*t.f.r, keys::job("r", "a"), "state"), "sample");
  EXPECT_EQ(t.xlen(keys::stream("decode@h")), 0);
  ASSERT_TRUE(m->claimed.has_value());
  EXPECT_EQ(m->claimed->entry_id, t.b);
  EXPECT_TRUE(m->claimed->attempt.has_value());
}

TEST(ApplyClaimRedis, ADueSweepTakesAnExpiredLeaseFirst) {
  Folded t;
  // c is another consumer's, idle past the lease: the sweep takes it before b (claim()'s order).
  auto taken = t.f.other->claim();
  ASSERT_TRUE(taken.ok() && taken->has_value());
  ASSERT_TRUE(t.f.r
                  ->command({"XCLAIM", t.f.me.stream, t.f.me.group, "other", "0", t.b, "IDLE",
                             "60000", "JUSTID"})
                  .ok());
  auto m = t.complete_a(true, /*sweep_idle_ms=*/5000);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(m->claimed.has_value());
  EXPECT_EQ(m->claimed->entry_id, t.b);
  EXPECT_TRUE(m->claimed->reclaimed);
  EXPECT_FALSE(m->claimed->attempt.has_value());  // a reclaimed entry is started by the caller
  EXPECT_EQ(t.f.pending_for("me"), 1);
  EXPECT_EQ(t.f.pending_for("other"), 0);
  // No sweep due: a fresh lease of another is left alone, the next new entry is taken.
  Folded u;
  ASSERT_TRUE(u.f.other->claim().ok());  // b, fresh
  auto n = u.complete_a(true, 0);
  ASSERT_TRUE(n.ok() && n->claimed.has_value());
  EXPECT_EQ(n->claimed->entry_id, u.c);
  EXPECT_FALSE(n->claimed->reclaimed);
}

TEST(ApplyClaimRedis, WithoutThenClaimTheCompletionIsTheOldOne) {
  // A pool whose dispatch answer reads the board (not unconditional) completes without the
  // claim: nothing else is claimed or started.
  Folded t;
  auto m = t.complete_a(false);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->code, Applied::kApplied);
  EXPECT_FALSE(m->claimed.has_value());
  EXPECT_EQ(t.f.pending_for("me"), 0);
  EXPECT_EQ(hget(*t.f.r, keys::job("r", "b"), "attempts:sample"), "");
  // And nothing new to claim: the completion stands, nothing claimed.
  Folded u;
  ASSERT_TRUE(u.f.other->claim().ok());
  ASSERT_TRUE(u.f.other->claim().ok());  // b and c are another's
  auto n = u.complete_a(true);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->code, Applied::kApplied);
  EXPECT_FALSE(n->claimed.has_value());
}
