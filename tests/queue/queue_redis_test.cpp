// Queue semantics against a real redis-server (label: redis).
#include <gtest/gtest.h>

#include "common/queue/queue.h"
#include "common/queue/reply.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
using namespace h3pipe::queue;

namespace {
QueueOptions opts(const std::string& consumer, int lease_ms = 300) {
  return {"h3pipe:stream:test", "test", consumer, lease_ms, 50, 10};
}
}  // namespace

TEST(Queue, EnqueueClaimCompleteDeletesTheEntry) {
  ts::RedisServer srv;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  StageQueue q(**r, opts("a"));
  ASSERT_TRUE(q.ensure_group().ok());
  ASSERT_TRUE(q.ensure_group().ok());  // idempotent
  ASSERT_TRUE(q.enqueue("t1").ok());
  auto e = q.claim();
  ASSERT_TRUE(e.ok() && e->has_value());
  EXPECT_EQ((*e)->payload, "t1");
  auto done = q.complete(**e, {{"SET", "followup", "1"}});
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  EXPECT_EQ(*q.length(), 0);
  EXPECT_EQ(*q.pending_count(), 0);
  EXPECT_EQ(reply_str((*r)->command({"GET", "followup"})->get()), "1");
  auto none = q.claim();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

// Issue #35 D12: XADD takes a field twice; the claimed entry says which (ingest refuses it), and
// an entry with each field once says none.
TEST(Queue, AFieldGivenTwiceIsReportedNotSilentlyLastWins) {
  ts::RedisServer srv;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  StageQueue q(**r, opts("a"));
  ASSERT_TRUE(q.ensure_group().ok());
  ASSERT_TRUE((*r)->command({"XADD", "h3pipe:stream:test", "*", "run", "r1", "spec", "{\"a\": 1}",
                             "spec", "{\"b\": 2}", "spec", "{}"})
                  .ok());
  ASSERT_TRUE((*r)->command({"XADD", "h3pipe:stream:test", "*", "run", "r1", "spec", "{}"}).ok());
  auto twice = q.claim();
  ASSERT_TRUE(twice.ok() && twice->has_value());
  EXPECT_EQ((*twice)->repeated, std::vector<std::string>{"spec"});
  auto once = q.claim();
  ASSERT_TRUE(once.ok() && once->has_value());
  EXPECT_TRUE((*once)->repeated.empty());
}

TEST(Queue, ExpiredLeaseIsReclaimedAndRobbedWorkerCannotComplete) {
  ts::RedisServer srv;
  auto ra = srv.connect();
  auto rb = srv.connect();
  StageQueue a(**ra, opts("a")), b(**rb, opts("b"));
  ASSERT_TRUE(a.ensure_group().ok());
  ASSERT_TRUE(a.enqueue("t").ok());
  auto ea = a.claim();
  ASSERT_TRUE(ea->has_value());
  // b sees nothing while the lease is fresh, then takes it once it expires.
  auto eb = b.claim();
  ASSERT_TRUE(eb.ok());
  EXPECT_FALSE(eb->has_value());
  ASSERT_TRUE(ts::wait_for(
      [&] {
        eb = b.claim();
        return eb.ok() && eb->has_value();
      },
      5));
  EXPECT_TRUE((*eb)->reclaimed);
  EXPECT_EQ((*eb)->payload, "t");
  auto late = a.complete(**ea, {{"SET", "dup", "1"}});
  ASSERT_TRUE(late.ok());
  EXPECT_FALSE(*late) << "a worker whose lease was taken must not complete";
  EXPECT_EQ((*ra)->command({"EXISTS", "dup"})->get()->integer, 0);
  EXPECT_TRUE(*b.complete(**eb, {}));
}

TEST(Queue, LiveWorkerIsNeverRobbed) {
  ts::RedisServer srv;
  auto ra = srv.connect();
  auto rb = srv.connect();
  auto o = opts("a", 200);
  StageQueue a(**ra, o), b(**rb, opts("b", 200));
  ASSERT_TRUE(a.ensure_group().ok());
  ASSERT_TRUE(a.enqueue("long").ok());
  auto ea = a.claim();
  ASSERT_TRUE(ea->has_value());
  LeaseKeeper keeper(srv.address(), o, 50);
  keeper.hold((*ea)->id);
  // Hold it for ten leases while b keeps trying to reclaim.
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(2000);
  int stolen = 0;
  while (std::chrono::steady_clock::now() < end) {
    auto eb = b.claim();
    if (eb.ok() && eb->has_value()) ++stolen;
  }
  EXPECT_EQ(stolen, 0);
  EXPECT_GT(keeper.renewals(), 10);
  EXPECT_EQ(keeper.lost(), 0);
  keeper.release((*ea)->id);
  EXPECT_TRUE(*a.complete(**ea, {}));
}

TEST(Queue, RestartedConsumerDrainsItsOwnPendingFirst) {
  ts::RedisServer srv;
  auto r1 = srv.connect();
  {
    StageQueue q(**r1, opts("same", 60000));
    ASSERT_TRUE(q.ensure_group().ok());
    ASSERT_TRUE(q.enqueue("first").ok());
    ASSERT_TRUE(q.enqueue("second").ok());
    auto e = q.claim();
    ASSERT_EQ((*e)->payload, "first");
    // "crash": never acked
  }
  auto r2 = srv.connect();
  StageQueue again(**r2, opts("same", 60000));
  auto e = again.claim();
  ASSERT_TRUE(e->has_value());
  EXPECT_EQ((*e)->payload, "first");
  EXPECT_TRUE((*e)->own_pending);
}

TEST(Queue, DeadLetterKeepsTheReasonAndAcks) {
  ts::RedisServer srv;
  auto r = srv.connect();
  StageQueue q(**r, opts("a"));
  ASSERT_TRUE(q.ensure_group().ok());
  ASSERT_TRUE(q.enqueue("poison").ok());
  auto e = q.claim();
  ASSERT_TRUE(q.dead_letter(**e, "sample", "run1", "job1", "crashed 3 times", {}).ok());
  EXPECT_EQ(*q.pending_count(), 0);
  auto dl = (*r)->command({"XRANGE", "h3pipe:dead", "-", "+"});
  ASSERT_EQ(dl->get()->elements, 1u);
  std::string all;
  auto* f = dl->get()->element[0]->element[1];
  for (size_t i = 0; i < f->elements; ++i) all += reply_str(f->element[i]) + "|";
  EXPECT_NE(all.find("reason|crashed 3 times|"), std::string::npos) << all;
  EXPECT_NE(all.find("task|poison|"), std::string::npos) << all;
}

TEST(Queue, TrimNeverDropsPendingOrUndeliveredWork) {
  ts::RedisServer srv;
  auto r = srv.connect();
  StageQueue q(**r, opts("a", 60000));
  ASSERT_TRUE(q.ensure_group().ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(q.enqueue("t" + std::to_string(i)).ok());
  auto e = q.claim();  // t0 pending, t1..t4 undelivered
  ASSERT_TRUE(q.trim().ok());
  EXPECT_EQ(*q.length(), 5);
  ASSERT_TRUE(*q.complete(**e, {}));
  ASSERT_TRUE(q.trim().ok());
  EXPECT_EQ(*q.length(), 4);
  // A later entry claimed first (the claim order takes a priority job ahead): the waiting entries
  // below it stay.
  auto all = (*r)->command({"XRANGE", q.options().stream, "-", "+"});
  ASSERT_EQ(all->get()->elements, 4u);
  const std::string last_id = reply_str(all->get()->element[3]->element[0]);
  ASSERT_TRUE((*r)->command({"XCLAIM", q.options().stream, q.options().group, "other", "0", last_id,
                             "FORCE"})
                  .ok());
  ASSERT_TRUE(q.trim().ok());
  EXPECT_EQ(*q.length(), 4);
}

TEST(Queue, RetryBackoffMakesTheTaskReclaimableSoon) {
  ts::RedisServer srv;
  auto r = srv.connect();
  StageQueue q(**r, opts("a", 60000));
  ASSERT_TRUE(q.ensure_group().ok());
  ASSERT_TRUE(q.enqueue("flaky").ok());
  auto e = q.claim();
  ASSERT_TRUE(q.release_for_retry(**e, 100).ok());
  auto r2 = srv.connect();
  StageQueue other(**r2, opts("b", 60000));
  std::optional<Entry> got;
  ASSERT_TRUE(ts::wait_for(
      [&] {
        auto x = other.claim();
        if (x.ok() && x->has_value()) got = **x;
        return got.has_value();
      },
      5));
  EXPECT_EQ(got->payload, "flaky");
}

TEST(Redis, WrongPasswordIsRefusedWithAClearError) {
  ts::RedisServer srv("s3cret");
  auto addr = srv.address();
  addr.password = "wrong";
  auto r = Redis::connect(addr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, "redis.auth");
  EXPECT_EQ(r.error().message.find("wrong"), std::string::npos)
      << "the password must never be printed";
}

// After a Redis restart that lost a claim (or a lease that lapsed while the keeper could not reach
// Redis), another consumer may own the entry: the keeper must say so, so the work stops before it
// commits (worker.cpp polls is_lost through ctx.cancelled).
TEST(Queue, KeeperReportsALeaseThatIsNoLongerOurs) {
  ts::RedisServer srv;
  auto ra = srv.connect();
  auto rb = srv.connect();
  auto o = opts("a", 200);
  StageQueue a(**ra, o), b(**rb, opts("b", 200));
  ASSERT_TRUE(a.ensure_group().ok());
  ASSERT_TRUE(a.enqueue("t").ok());
  auto ea = a.claim();
  ASSERT_TRUE(ea.ok() && ea->has_value());
  // b takes it over (as XAUTOCLAIM would after the claim was lost), then a's keeper renews.
  ASSERT_TRUE((*rb)->command({"XCLAIM", o.stream, o.group, "b", "0", (*ea)->id, "JUSTID"}).ok());
  LeaseKeeper keeper(srv.address(), o, 30);
  keeper.hold((*ea)->id);
  EXPECT_TRUE(ts::wait_for([&] { return keeper.is_lost((*ea)->id); }, 5));
  EXPECT_GE(keeper.lost(), 1);
  EXPECT_FALSE(*a.complete(**ea, {}));  // and the completion refuses, as before
  keeper.release((*ea)->id);
  EXPECT_FALSE(keeper.is_lost((*ea)->id));
}

// A consumer whose work failed on a Redis error re-reads its own pending entries first.
TEST(Queue, RecheckOwnRedeliversOurPendingEntryAtOnce) {
  ts::RedisServer srv;
  auto r = srv.connect();
  StageQueue q(**r, opts("a", 60000));
  ASSERT_TRUE(q.ensure_group().ok());
  ASSERT_TRUE(q.enqueue("t").ok());
  auto e = q.claim();
  ASSERT_TRUE(e.ok() && e->has_value());
  auto none = q.claim();  // still ours, lease far from expiry: nothing new
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  q.recheck_own();
  auto again = q.claim();
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->id, (*e)->id);
  EXPECT_TRUE((*again)->own_pending);
}

// Redis lost the consumer group (FLUSHALL, a restart without persistence): the consumer recreates
// it at its next claim and takes new work, instead of failing with NOGROUP forever.
TEST(Queue, ClaimRecreatesTheGroupAfterFlushall) {
  ts::RedisServer srv;
  auto r = srv.connect();
  auto admin = srv.connect();
  StageQueue q(**r, opts("a"));
  ASSERT_TRUE(q.ensure_group().ok());
  ASSERT_TRUE(q.enqueue("before").ok());
  auto first = q.claim();
  ASSERT_TRUE(first.ok() && first->has_value());
  ASSERT_TRUE((*admin)->command({"FLUSHALL"}).ok());
  // The next claim finds no group: it recreates it and reports nothing to do, not an error.
  auto none = q.claim();
  ASSERT_TRUE(none.ok()) << none.error().to_string();
  EXPECT_FALSE(none->has_value());
  EXPECT_EQ(q.groups_recreated(), 1);
  // A newly enqueued entry (by another client, as ingest or an upstream stage would) is claimed.
  ASSERT_TRUE((*admin)->command({"XADD", opts("x").stream, "*", "task", "after"}).ok());
  std::optional<Entry> got;
  ASSERT_TRUE(ts::wait_for(
      [&] {
        auto c = q.claim();
        if (c.ok() && c->has_value()) got = **c;
        return got.has_value();
      },
      5));
  EXPECT_EQ(got->payload, "after");
  EXPECT_TRUE(*q.complete(*got, {}));
  EXPECT_EQ(q.groups_recreated(), 1) << "recreated once, not at every claim";
}

// The group lost while an entry was held: the keeper reports it lost (the claim went with the
// group) instead of failing every renewal with NOGROUP.
TEST(Queue, KeeperReportsHeldEntriesLostWhenTheGroupIsGone) {
  ts::RedisServer srv;
  auto r = srv.connect();
  auto o = opts("a", 200);
  StageQueue q(**r, o);
  ASSERT_TRUE(q.ensure_group().ok());
  ASSERT_TRUE(q.enqueue("t").ok());
  auto e = q.claim();
  ASSERT_TRUE(e.ok() && e->has_value());
  LeaseKeeper keeper(srv.address(), o, 30);
  keeper.hold((*e)->id);
  ASSERT_TRUE((*r)->command({"FLUSHALL"}).ok());
  EXPECT_TRUE(ts::wait_for([&] { return keeper.is_lost((*e)->id); }, 5));
  EXPECT_GE(keeper.lost(), 1);
}
