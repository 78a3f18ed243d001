// The dispatch board's heartbeats (h3pipe:pools) against a real redis-server (label: redis):
// pb::Heartbeat bytes written by one pool are what the others' policy reads, and an entry that
// is not a heartbeat is skipped and counted, never a crash.
#include "common/worker/pool_board.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/queue/keys.h"
#include "common/worker/heartbeat.h"
#include "tests/support/test_support.h"

using namespace h3pipe;

namespace {

// Two sample pools on one host, s1 twice as fast as s2.
config::Cluster cluster(int port) {
  auto j = nlohmann::json::parse(R"({"name": "board", "hosts": [{"name": "h1"}],
    "pools": [{"name": "e", "host": "h1", "stage": "encode"},
              {"name": "s1", "host": "h1", "stage": "sample", "profiles": {"default": {"seconds": 10}}},
              {"name": "s2", "host": "h1", "stage": "sample", "profiles": {"default": {"seconds": 20}}},
              {"name": "d", "host": "h1", "stage": "decode"}]})");
  j["redis"] = {{"port", port}, {"embedded", false}};
  auto c = config::parse(j, ".");
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
  return *c;
}

Result<pb::Heartbeat> stored(queue::Redis& r, const std::string& pool) {
  auto v = r.command({"HGET", keys::pools(), pool});
  if (!v.ok()) return v.error();
  return worker::decode_heartbeat(pool, queue::reply_str(v->get()));
}

// The encode and sample streams and their groups, as ingest and the workers make them.
bool make_groups(queue::Redis& r) {
  for (const char* stage : {"encode", "sample"})
    if (!r.command({"XGROUP", "CREATE", keys::stream(stage), stage, "0", "MKSTREAM"}).ok())
      return false;
  return true;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TEST(PoolBoard, HeartbeatIsAProtoMessageRoundTrippedThroughRedis) {
  ts::RedisServer srv;
  auto c = cluster(srv.port());
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  auto board = worker::PoolBoard::create(c, *c.find_pool("s1"), srv.address());
  ASSERT_TRUE(board.ok()) << board.error().to_string();
  auto hb = stored(**r, "s1");
  ASSERT_TRUE(hb.ok()) << hb.error().to_string();
  EXPECT_EQ(hb->pool(), "s1");
  EXPECT_EQ(hb->host(), "h1");
  EXPECT_EQ(hb->service(), "sampler");
  EXPECT_EQ(hb->stage(), pb::STAGE_SAMPLE);
  EXPECT_EQ(hb->state(), "idle");
  EXPECT_DOUBLE_EQ(hb->expected_s(), 10);
  EXPECT_EQ(hb->busy_until_unix_s(), 0);
  EXPECT_NEAR(hb->unix_ms() / 1000.0, now_s(), 5);
  // Busy: busy-until is its expected time ahead.
  (*board)->claimed(pb::StageTask());
  (void)(*board)->may_claim();  // reads the replies of the board's sends: the HSET has landed
  hb = stored(**r, "s1");
  ASSERT_TRUE(hb.ok()) << hb.error().to_string();
  EXPECT_EQ(hb->state(), "busy");
  EXPECT_NEAR(hb->busy_until_unix_s(), now_s() + 10, 2);
  // The heartbeat thread renews the timestamp of the same state while the task runs.
  const auto first_ms = hb->unix_ms();
  EXPECT_TRUE(ts::wait_for(
      [&] {
        auto again = stored(**r, "s1");
        return again.ok() && again->unix_ms() > first_ms && again->state() == "busy";
      },
      5));
}

TEST(PoolBoard, ThePolicyReadsTheOtherPoolsHeartbeatAndSkipsGarbage) {
  ts::RedisServer srv;
  auto c = cluster(srv.port());
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  // One sample task queued (nothing claimed).
  ASSERT_TRUE(make_groups(**r));
  ASSERT_TRUE((*r)->command({"XADD", keys::stream("sample"), "*", "task", "t"}).ok());
  auto fast = worker::PoolBoard::create(c, *c.find_pool("s1"), srv.address());
  auto slow = worker::PoolBoard::create(c, *c.find_pool("s2"), srv.address());
  ASSERT_TRUE(fast.ok() && slow.ok());
  // s1 is idle and twice as fast: the slow pool leaves the task to it, from s1's heartbeat.
  EXPECT_FALSE((*slow)->may_claim());
  EXPECT_EQ((*slow)->bad_heartbeats(), 0);
  fast->reset();  // s1 stops: its heartbeat thread no longer rewrites the entry
  // What is under s1 now is not a heartbeat: the policy skips it (s2 is then alone) and counts it.
  const std::vector<std::string> garbage = {"not protobuf \xff\xfe", R"({"busy_until_s": "soon"})",
                                            "[]", std::string("\x08\x01", 2), ""};
  long long seen = 0;
  for (const auto& g : garbage) {
    ASSERT_TRUE((*r)->command({"HSET", keys::pools(), "s1", g}).ok());
    EXPECT_TRUE((*slow)->may_claim()) << "garbage under s1: " << g;
    EXPECT_GT((*slow)->bad_heartbeats(), seen) << "garbage under s1 counted: " << g;
    seen = (*slow)->bad_heartbeats();
  }
  // Another pool's heartbeat filed under s1 is not s1's.
  pb::Heartbeat other;
  other.set_pool("s2");
  other.set_unix_ms(static_cast<long long>(now_s() * 1000));
  ASSERT_TRUE((*r)->command({"HSET", keys::pools(), "s1", worker::encode_heartbeat(other)}).ok());
  EXPECT_TRUE((*slow)->may_claim());
  EXPECT_GT((*slow)->bad_heartbeats(), seen);
  // A valid one again: read and obeyed (s1 idle and fresh, so s2 defers again).
  pb::Heartbeat back;
  back.set_pool("s1");
  back.set_host("h1");
  back.set_stage(pb::STAGE_SAMPLE);
  back.set_unix_ms(static_cast<long long>(now_s() * 1000));
  back.set_expected_s(10);
  ASSERT_TRUE((*r)->command({"HSET", keys::pools(), "s1", worker::encode_heartbeat(back)}).ok());
  seen = (*slow)->bad_heartbeats();
  EXPECT_FALSE((*slow)->may_claim());
  EXPECT_EQ((*slow)->bad_heartbeats(), seen);
}

// Issue #35 D3: liveness no writer's clock can fool.  s1 runs (s2 defers to it), then stops; its
// last heartbeat came from a clock an hour ahead (or just under the tolerated skew ahead).  The
// live board of s2 must hold s1 dead within 3 s of that last beat, and claim the waiting task:
// before the fix a stamp an hour ahead kept s1 alive (and s2 deferring) for the hour.
TEST(PoolBoard, AHeartbeatStampedInTheFutureDoesNotKeepAStoppedPoolAlive) {
  ts::RedisServer srv;
  auto c = cluster(srv.port());
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(make_groups(**r));
  ASSERT_TRUE((*r)->command({"XADD", keys::stream("sample"), "*", "task", "t"}).ok());
  auto fast = worker::PoolBoard::create(c, *c.find_pool("s1"), srv.address());
  auto slow = worker::PoolBoard::create(c, *c.find_pool("s2"), srv.address());
  ASSERT_TRUE(fast.ok() && slow.ok());
  EXPECT_FALSE((*slow)->may_claim()) << "s1 alive, idle and faster: s2 leaves it the task";
  fast->reset();  // s1 stops beating
  for (double ahead_s : {3600.0, worker::kHeartbeatFutureS * 0.8}) {
    SCOPED_TRACE("last beat stamped " + std::to_string(ahead_s) + " s ahead");
    pb::Heartbeat last;
    last.set_pool("s1");
    last.set_host("h1");
    last.set_service("sampler");
    last.set_stage(pb::STAGE_SAMPLE);
    last.set_state("idle");
    last.set_expected_s(10);
    last.set_unix_ms(static_cast<long long>((now_s() + ahead_s) * 1000));
    ASSERT_TRUE((*r)->command({"HSET", keys::pools(), "s1", worker::encode_heartbeat(last)}).ok());
    const auto beat = std::chrono::steady_clock::now();
    // Polled (a claim decision re-reads the board each time), never slept on.
    ASSERT_TRUE(ts::wait_for([&] { return (*slow)->may_claim(); }, 10))
        << "s1's last beat kept it alive";
    const double dead_after =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - beat).count();
    // 3 s by the rule (kHeartbeatFutureS + kHeartbeatLiveS), plus the polling's slack on a busy
    // machine (a claim decision is a few Redis round trips).
    EXPECT_LE(dead_after, 3.5) << "s1 held alive " << dead_after << " s after its last beat";
    EXPECT_EQ((*slow)->bad_heartbeats(), 0);
  }
}

// Per-class profiles live (issue #13): the board decides on the class of the next queued task,
// as the simulator decides on the head task's class.  s1 is the faster pool for class "a", s2 for
// class "b".
TEST(PoolBoard, TheClaimDecisionUsesTheClassOfTheNextQueuedTask) {
  ts::RedisServer srv;
  auto j = nlohmann::json::parse(R"({"name": "classes", "hosts": [{"name": "h1"}],
    "classes": [{"name": "a", "width": 64, "height": 64, "frames": 9}, {"name": "b", "width": 128, "height": 128, "frames": 9}],
    "pools": [{"name": "e", "host": "h1", "stage": "encode"},
              {"name": "s1", "host": "h1", "stage": "sample", "profiles": {"a": {"seconds": 10}, "b": {"seconds": 40}}},
              {"name": "s2", "host": "h1", "stage": "sample", "profiles": {"a": {"seconds": 20}, "b": {"seconds": 20}}},
              {"name": "d", "host": "h1", "stage": "decode"}]})");
  j["redis"] = {{"port", srv.port()}, {"embedded", false}};
  auto c = config::parse(j, ".");
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(make_groups(**r));
  auto s1 = worker::PoolBoard::create(*c, *c->find_pool("s1"), srv.address());
  auto s2 = worker::PoolBoard::create(*c, *c->find_pool("s2"), srv.address());
  ASSERT_TRUE(s1.ok() && s2.ok());
  auto enqueue = [&](const char* cls) {
    pb::StageTask t;
    t.set_run_id("r");
    t.set_job_id(cls);
    t.mutable_spec()->set_job_class(cls);
    ASSERT_TRUE(
        (*r)->command({"XADD", keys::stream("sample"), "*", "task", t.SerializeAsString()}).ok());
  };
  enqueue("b");
  // Head of class b: s2 (20 s) finishes it before s1 (40 s): s1 leaves it, s2 takes it.
  EXPECT_FALSE((*s1)->may_claim());
  EXPECT_TRUE((*s2)->may_claim());
  // s2 takes it (XREADGROUP); the next one is of class a: now s1 is the faster pool.
  ASSERT_TRUE((*r)->command({"XREADGROUP", "GROUP", "sample", "s2", "COUNT", "1", "STREAMS",
                             keys::stream("sample"), ">"})
                  .ok());
  (*s2)->claimed(pb::StageTask());
  enqueue("a");
  EXPECT_TRUE((*s1)->may_claim());
}

// An idle pool with nothing to claim waits on its stream and decides when a task arrives
// (XREAD BLOCK $), not at the end of its wait; a pool that leaves a waiting task to a faster one
// sleeps its wait out (the task does not wake it).
TEST(PoolBoard, AnIdlePoolWakesWhenATaskArrives) {
  ts::RedisServer srv;
  auto c = cluster(srv.port());
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(make_groups(**r));
  auto fast = worker::PoolBoard::create(c, *c.find_pool("s1"), srv.address());
  auto slow = worker::PoolBoard::create(c, *c.find_pool("s2"), srv.address());
  ASSERT_TRUE(fast.ok() && slow.ok());
  EXPECT_FALSE((*fast)->may_claim());  // nothing queued
  std::thread add([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto w = srv.connect();
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->command({"XADD", keys::stream("sample"), "*", "task", "t"}).ok());
  });
  const auto t0 = std::chrono::steady_clock::now();
  (*fast)->wait_for_work(std::chrono::seconds(30));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  add.join();
  EXPECT_LT(waited, 15) << "woke by the wait's end, not by the task";
  EXPECT_TRUE((*fast)->may_claim());
  // The slow pool leaves the queued task to s1: it sleeps its (short) wait out.
  EXPECT_FALSE((*slow)->may_claim());
  const auto t1 = std::chrono::steady_clock::now();
  (*slow)->wait_for_work(std::chrono::milliseconds(200));
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 0.19);
}
