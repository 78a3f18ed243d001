// The dispatch board over its ports with no Redis (label: unit): a PoolBoard and the decode-host
// load on tests/support/fake_pool_board_store.h.  The board publishes its state and reads the
// others' through state::PoolBoardStore only, with the calls pool_board_test.cpp makes in Redis.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "common/queue/keys.h"
#include "common/state/state.h"
#include "common/worker/decode_choice.h"
#include "common/worker/duty_window.h"
#include "common/worker/heartbeat.h"
#include "common/worker/pool_board.h"
#include "tests/support/fake_pool_board_store.h"

using namespace h3pipe;
namespace ts = h3pipe::test_support;

namespace {

// Two sample pools on one host, s1 twice as fast as s2.
config::Cluster cluster() {
  auto j = nlohmann::json::parse(R"({"name": "board", "hosts": [{"name": "h1"}],
    "pools": [{"name": "e", "host": "h1", "stage": "encode"},
              {"name": "s1", "host": "h1", "stage": "sample", "profiles": {"default": {"seconds": 10}}},
              {"name": "s2", "host": "h1", "stage": "sample", "profiles": {"default": {"seconds": 20}}},
              {"name": "d", "host": "h1", "stage": "decode"}]})");
  auto c = config::parse(j, ".");
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
  return *c;
}

Result<pb::Heartbeat> stored(const ts::FakeBoard& b, const std::string& pool) {
  auto v = b.heartbeat(pool);
  return worker::decode_heartbeat(pool, v.value_or(""));
}

bool wait_for(const std::function<bool()>& pred, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

pb::Heartbeat beat(const std::string& pool, double busy_until_s = 0) {
  pb::Heartbeat hb;
  hb.set_pool(pool);
  hb.set_host("h1");
  hb.set_unix_ms(state::now_ms());
  hb.set_busy_until_unix_s(busy_until_s);
  hb.set_expected_s(10);
  return hb;
}

}  // namespace

TEST(PoolBoardPorts, PublishesItsStateThroughTheStoreAndBeatsFromAStoreOfItsOwn) {
  ts::FakeBoard fake;
  auto c = cluster();
  auto board = worker::PoolBoard::create(c, *c.find_pool("s1"), fake.opener());
  ASSERT_TRUE(board.ok()) << board.error().to_string();
  // create(): one store, the idle state sent and flushed before it returns.
  EXPECT_EQ(fake.calls().publish, 1);
  EXPECT_EQ(fake.calls().flush, 1);
  auto hb = stored(fake, "s1");
  ASSERT_TRUE(hb.ok()) << hb.error().to_string();
  EXPECT_EQ(hb->service(), "sampler");
  EXPECT_EQ(hb->state(), "idle");
  EXPECT_DOUBLE_EQ(hb->expected_s(), 10);
  (*board)->claimed(pb::StageTask());
  hb = stored(fake, "s1");
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->state(), "busy");
  EXPECT_NEAR(hb->busy_until_unix_s(), state::now_ms() / 1000.0 + 10, 2);
  EXPECT_EQ(fake.calls().publish, 2);  // sent, never waited for
  // The heartbeat thread opens its own store and re-publishes the same state, waiting for it.
  EXPECT_TRUE(wait_for([&] { return fake.calls().publish_now > 0; }, 5));
  EXPECT_EQ(fake.calls().opened, 2);
  hb = stored(fake, "s1");
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->state(), "busy");
}

// #38 item 4: the heartbeat carries the pool's duty cycle over the last minute and its GPUs (none
// until the runner gives the board its GPU monitor).
TEST(PoolBoardPorts, TheHeartbeatCarriesTheDutyCycleAndTheGpus) {
  ts::FakeBoard fake;
  auto c = cluster();
  auto board = worker::PoolBoard::create(c, *c.find_pool("s1"), fake.opener());
  ASSERT_TRUE(board.ok()) << board.error().to_string();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  (*board)->idle();
  auto hb = stored(fake, "s1");
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->duty_cycle(), 0);
  EXPECT_GT(hb->duty_window_s(), 0.1);
  EXPECT_EQ(hb->gpu_devices(), 0u);
  (*board)->claimed(pb::StageTask());  // busy as long as it was idle: about half
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  (*board)->set_gpu_use([] {
    return std::optional<worker::PoolBoard::GpuUse>({2, 0.5, 3.0 * (1 << 30), 32.0 * (1 << 30)});
  });
  (*board)->idle();
  hb = stored(fake, "s1");
  ASSERT_TRUE(hb.ok());
  EXPECT_GT(hb->duty_cycle(), 0.25) << hb->DebugString();
  EXPECT_LT(hb->duty_cycle(), 0.75) << hb->DebugString();
  EXPECT_EQ(hb->gpu_devices(), 2u);
  EXPECT_DOUBLE_EQ(hb->gpu_utilization(), 0.5);
  EXPECT_EQ(hb->gpu_memory_used_bytes(), 3ull << 30);
  EXPECT_EQ(hb->gpu_memory_total_bytes(), 32ull << 30);
}

// DutyWindow alone: the busy share of the last window, spans leaving it as time passes.
TEST(DutyWindow, TheBusyShareOfTheLastWindow) {
  worker::DutyWindow d(0, 60);
  EXPECT_EQ(d.duty_cycle(0), 0);
  d.set_busy(true, 10);
  d.set_busy(true, 12);                     // no change
  EXPECT_DOUBLE_EQ(d.duty_cycle(20), 0.5);  // 10 of the 20 s since start
  d.set_busy(false, 25);
  EXPECT_DOUBLE_EQ(d.duty_cycle(30), 0.5);  // 15 of 30
  EXPECT_DOUBLE_EQ(d.covered_s(30), 30);
  EXPECT_DOUBLE_EQ(d.duty_cycle(80), 5.0 / 60);  // [20, 80]: 20..25 busy
  EXPECT_DOUBLE_EQ(d.covered_s(80), 60);
  EXPECT_EQ(d.duty_cycle(200), 0);  // the span has left the window
}

TEST(PoolBoardPorts, ThePolicyReadsTheBoardOnceAClaimAndSkipsGarbage) {
  ts::FakeBoard fake;
  auto c = cluster();
  fake.set_backlog(keys::stream("sample"), 1, 0);  // one sample task waits
  auto slow = worker::PoolBoard::create(c, *c.find_pool("s2"), fake.opener());
  ASSERT_TRUE(slow.ok());
  fake.set_heartbeat("s1", worker::encode_heartbeat(beat("s1")));
  // s1 is idle and twice as fast: s2 leaves the task to it.  One read of the backlogs and one of
  // the heartbeats per ask, and no read of the next task (one class).
  const auto before = fake.calls();
  EXPECT_FALSE((*slow)->may_claim());
  const auto after = fake.calls();
  EXPECT_EQ(after.backlogs - before.backlogs, 1);
  EXPECT_EQ(after.heartbeats - before.heartbeats, 1);
  EXPECT_EQ(after.next_task, before.next_task);
  EXPECT_EQ((*slow)->bad_heartbeats(), 0);
  // What is under s1 is not a heartbeat: left out (s2 is then alone) and counted.
  long long seen = 0;
  for (const std::string g : {"not protobuf \xff\xfe", "[]", ""}) {
    fake.set_heartbeat("s1", g);
    EXPECT_TRUE((*slow)->may_claim()) << "garbage under s1: " << g;
    EXPECT_GT((*slow)->bad_heartbeats(), seen);
    seen = (*slow)->bad_heartbeats();
  }
  // s1 busy for a minute: s2 takes the task.
  fake.set_heartbeat("s1", worker::encode_heartbeat(beat("s1", state::now_ms() / 1000.0 + 60)));
  EXPECT_TRUE((*slow)->may_claim());
  EXPECT_EQ((*slow)->bad_heartbeats(), seen);
  // An idle s1 again: s2 defers.
  fake.set_heartbeat("s1", worker::encode_heartbeat(beat("s1")));
  EXPECT_FALSE((*slow)->may_claim());
}

TEST(PoolBoardPorts, AnUnreadableBoardClaimsAsFirstFreeUntilItReadsAgain) {
  ts::FakeBoard fake;
  auto c = cluster();
  fake.set_backlog(keys::stream("sample"), 1, 0);
  auto slow = worker::PoolBoard::create(c, *c.find_pool("s2"), fake.opener());
  ASSERT_TRUE(slow.ok());
  fake.set_heartbeat("s1", worker::encode_heartbeat(beat("s1")));
  EXPECT_FALSE((*slow)->may_claim());
  fake.fail(true);
  EXPECT_TRUE((*slow)->may_claim());  // degraded, never stalled
  fake.fail(false);
  fake.set_heartbeat("s1", worker::encode_heartbeat(beat("s1")));
  EXPECT_FALSE((*slow)->may_claim());
  // A board that cannot be opened fails create() with the store's error.
  fake.fail(true);
  auto none = worker::PoolBoard::create(c, *c.find_pool("s1"), fake.opener());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, errc::redis::kIo);
}

TEST(PoolBoardPorts, AnIdlePoolWithNothingQueuedWaitsForAnEntry) {
  ts::FakeBoard fake;
  auto c = cluster();
  auto fast = worker::PoolBoard::create(c, *c.find_pool("s1"), fake.opener());
  ASSERT_TRUE(fast.ok());
  fake.set_heartbeat("s2", worker::encode_heartbeat(beat("s2")));
  EXPECT_FALSE((*fast)->may_claim());  // nothing queued
  std::thread add([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    fake.add_entry(keys::stream("sample"));
  });
  const auto t0 = std::chrono::steady_clock::now();
  (*fast)->wait_for_work(std::chrono::seconds(30));
  add.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 15);
  EXPECT_EQ(fake.calls().wait_for_entry, 1);
  EXPECT_TRUE((*fast)->may_claim());  // the entry is queued now; s1 is the faster pool
}

// Per-class profiles: the board decides on the class of the next task its group hands out.
TEST(PoolBoardPorts, TheClaimDecisionUsesTheClassOfTheNextTask) {
  auto j = nlohmann::json::parse(R"({"name": "classes", "hosts": [{"name": "h1"}],
    "classes": [{"name": "a", "width": 64, "height": 64, "frames": 9}, {"name": "b", "width": 128, "height": 128, "frames": 9}],
    "pools": [{"name": "e", "host": "h1", "stage": "encode"},
              {"name": "s1", "host": "h1", "stage": "sample", "profiles": {"a": {"seconds": 10}, "b": {"seconds": 40}}},
              {"name": "s2", "host": "h1", "stage": "sample", "profiles": {"a": {"seconds": 20}, "b": {"seconds": 20}}},
              {"name": "d", "host": "h1", "stage": "decode"}]})");
  auto c = config::parse(j, ".");
  ASSERT_TRUE(c.ok()) << c.error().message;
  ts::FakeBoard fake;
  auto s1 = worker::PoolBoard::create(*c, *c->find_pool("s1"), fake.opener());
  auto s2 = worker::PoolBoard::create(*c, *c->find_pool("s2"), fake.opener());
  ASSERT_TRUE(s1.ok() && s2.ok());
  auto next = [&](const char* cls) {
    pb::StageTask t;
    t.mutable_spec()->set_job_class(cls);
    fake.set_next_task(keys::stream("sample"), t.SerializeAsString());
  };
  fake.set_backlog(keys::stream("sample"), 1, 0);
  next("b");
  EXPECT_FALSE((*s1)->may_claim());  // s2 (20 s) finishes a b before s1 (40 s)
  EXPECT_TRUE((*s2)->may_claim());
  next("a");
  EXPECT_TRUE((*s1)->may_claim());
  EXPECT_GT(fake.calls().next_task, 0);
}

// The decode-host load from the same ports: the tasks waiting on each decode host and each
// decoder's seconds until idle.
TEST(PoolBoardPorts, TheDecodeLoadReadsBacklogsAndDecoderHeartbeats) {
  auto j = nlohmann::json::parse(R"({"name": "t", "hosts": [{"name": "a"}, {"name": "b"}],
    "pools": [{"name": "s", "host": "a", "stage": "sample"}, {"name": "e", "host": "a", "stage": "encode"},
              {"name": "da", "host": "a", "stage": "decode"}, {"name": "db", "host": "b", "stage": "decode"}]})");
  auto c = config::parse(j, ".");
  ASSERT_TRUE(c.ok()) << c.error().message;
  ts::FakeBoard fake;
  fake.set_backlog(keys::stream("decode@a"), 5, 2);  // 3 waiting
  fake.set_backlog(keys::stream("decode@b"), 1, 1);  // none waiting
  pb::Heartbeat db = beat("db", state::now_ms() / 1000.0 + 30);
  fake.set_heartbeat("db", worker::encode_heartbeat(db));
  fake.set_heartbeat("s", "not a heartbeat, and not a decoder's");
  auto reader = fake.reader();
  const auto load = worker::decode_load(*c, reader.get());
  EXPECT_EQ(load.queued.at("a"), 3u);
  EXPECT_EQ(load.queued.count("b"), 0u);
  ASSERT_EQ(load.decoder_free_in_s.count("db"), 1u);
  EXPECT_NEAR(load.decoder_free_in_s.at("db"), 30, 2);
  EXPECT_EQ(load.decoder_free_in_s.count("s"), 0u);
  // An unreadable board: no load at all, never a failure.
  fake.fail(true);
  const auto none = worker::decode_load(*c, reader.get());
  EXPECT_TRUE(none.queued.empty());
  EXPECT_TRUE(none.decoder_free_in_s.empty());
}
