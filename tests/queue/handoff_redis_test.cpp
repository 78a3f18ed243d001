// The worker's hand-off bookkeeping against a real redis-server (label: redis): commands sent
// without waiting (Redis::send), a script's first use in one round trip, the one-round-trip
// attempt start (Store::start_attempt), and entry fields read with the claim.
#include <gtest/gtest.h>

#include "common/queue/keys.h"
#include "common/queue/queue.h"
#include "common/queue/reply.h"
#include "common/state/state.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
using namespace h3pipe::queue;

TEST(RedisSend, IsAppliedAndItsReplyNeverReachesTheNextCommand) {
  ts::RedisServer srv;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*r)->send({"HINCRBY", "h", "n", "1"}).ok());
  ASSERT_TRUE((*r)->send({"HINCRBY", "h", "n", "1"}).ok());
  auto got = (*r)->command({"HGET", "h", "n"});
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(reply_str(got->get()), "2");
  // An error reply to a sent command is dropped, not handed to the next caller.
  ASSERT_TRUE((*r)->command({"SET", "s", "x"}).ok());
  ASSERT_TRUE((*r)->send({"HINCRBY", "s", "n", "1"}).ok());  // WRONGTYPE
  auto pong = (*r)->command({"PING"});
  ASSERT_TRUE(pong.ok()) << pong.error().message;
  EXPECT_EQ(reply_str(pong->get()), "PONG");
  // And a pipeline after a send gets exactly its own replies.
  ASSERT_TRUE((*r)->send({"SET", "a", "1"}).ok());
  auto p = (*r)->pipeline({{"GET", "a"}, {"HGET", "h", "n"}});
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ(reply_str((*p)[0].get()), "1");
  EXPECT_EQ(reply_str((*p)[1].get()), "2");
  // A connection used mostly for sends (a pool's board) drops arrived replies as it goes.
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE((*r)->send({"HINCRBY", "h", "many", "1"}).ok());
  auto many = (*r)->command({"HGET", "h", "many"});
  ASSERT_TRUE(many.ok()) << many.error().message;
  EXPECT_EQ(reply_str(many->get()), "1000");
}

TEST(RedisEval, FirstUseLoadsAndRunsAndAFlushedCacheStillWorks) {
  ts::RedisServer srv;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  // A script text no other test on this thread used: the first call takes the load path.
  const std::string script = "return {ARGV[1], 'handoff_test first use'}";
  for (int i = 0; i < 2; ++i) {
    auto e = (*r)->eval(script, {}, {"v" + std::to_string(i)});
    ASSERT_TRUE(e.ok()) << e.error().message;
    ASSERT_EQ(e->get()->elements, 2u);
    EXPECT_EQ(reply_str(e->get()->element[0]), "v" + std::to_string(i));
  }
  ASSERT_TRUE((*r)->command({"SCRIPT", "FLUSH"}).ok());
  auto again = (*r)->eval(script, {}, {"after flush"});
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(reply_str(again->get()->element[0]), "after flush");
  // A script error is reported on first use too.
  auto bad = (*r)->eval(
      "return redis.call('HINCRBY', KEYS[1], 'f', 'not a number') -- handoff_test", {"k"}, {});
  EXPECT_FALSE(bad.ok());
}

TEST(StoreStartAttempt, CountsAndReadsTheCancelFlagAndTheLastErrorInOneGo) {
  ts::RedisServer srv;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  state::Store store(**r);
  const std::string run = "r-handoff", job = "j";
  // A job the state machine has at sample (its encode advanced it there).
  ASSERT_TRUE((*r)->command({"HSET", keys::job(run, job), "state", "sample"}).ok());
  auto a1 = store.start_attempt(run, job, pb::STAGE_SAMPLE);
  ASSERT_TRUE(a1.ok()) << a1.error().message;
  EXPECT_EQ(a1->number, 1);
  EXPECT_FALSE(a1->cancelled);
  EXPECT_EQ(a1->last_error, "");
  EXPECT_EQ(reply_str((*r)->command({"HGET", keys::job(run, job), "state"})->get()), "sample");

  ASSERT_TRUE(store.note_error(run, job, pb::STAGE_SAMPLE, "boom").ok());
  ASSERT_TRUE(store.cancel(run).ok());
  auto a2 = store.start_attempt(run, job, pb::STAGE_SAMPLE);
  ASSERT_TRUE(a2.ok()) << a2.error().message;
  EXPECT_EQ(a2->number, 2);
  EXPECT_TRUE(a2->cancelled);
  EXPECT_EQ(a2->last_error, "sample: boom");
  auto b = store.start_attempt(run, job, pb::STAGE_SAMPLE);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->number, 3);

  // note_exec is sent without waiting; the next command on the connection sees it applied.
  ASSERT_TRUE(store.note_exec(run, job, pb::STAGE_SAMPLE).ok());
  EXPECT_EQ(reply_str((*r)->command({"HGET", keys::job(run, job), "exec:sample"})->get()), "1");
}

TEST(QueueEntry, CarriesTheEntrysOtherFields) {
  ts::RedisServer srv;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  StageQueue q(**r, {"h3pipe:stream:fields", "g", "c", 1000, 50, 10});
  ASSERT_TRUE(q.ensure_group().ok());
  ASSERT_TRUE(
      (*r)->command({"XADD", "h3pipe:stream:fields", "*", "run", "r1", "spec", "{\"jobId\":\"x\"}"})
          .ok());
  ASSERT_TRUE(q.enqueue("payload").ok());
  auto e1 = q.claim();
  ASSERT_TRUE(e1.ok() && e1->has_value());
  EXPECT_EQ((*e1)->payload, "");
  EXPECT_EQ((*e1)->fields.at("run"), "r1");
  EXPECT_EQ((*e1)->fields.at("spec"), "{\"jobId\":\"x\"}");
  auto e2 = q.claim();
  ASSERT_TRUE(e2.ok() && e2->has_value());
  EXPECT_EQ((*e2)->payload, "payload");
  EXPECT_TRUE((*e2)->fields.empty());
}
