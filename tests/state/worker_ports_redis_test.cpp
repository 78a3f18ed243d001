// The typed ports the workers use instead of raw commands, against a real redis-server (label:
// redis): StageQueue::claimable, the streams' backlogs, the one dead-letter record, the board's
// store (state::RedisPoolBoardStore), the GPU group's lease (state::GpuLeaseStore) and the
// Store's counters (wrote:, handed_back:), and the receipts kept beside the run (state/receipts.h).
#include <gtest/gtest.h>

#include <thread>

#include "common/queue/connector.h"
#include "common/queue/keys.h"
#include "common/queue/queue.h"
#include "common/queue/reply.h"
#include "common/state/gpu_lease_store.h"
#include "common/state/pool_board_store.h"
#include "common/state/receipts.h"
#include "common/state/state.h"
#include "tests/support/test_support.h"

using namespace h3pipe;

namespace {

queue::QueueOptions opts(const std::string& consumer, int lease_ms = 5000) {
  return {keys::stream("ports"), "ports", consumer, lease_ms, 10, 10};
}

// The fields of every entry on h3pipe:dead, in order.
std::vector<std::map<std::string, std::string>> dead_letters(queue::Redis& r) {
  std::vector<std::map<std::string, std::string>> out;
  auto x = r.command({"XRANGE", keys::dead_letter(), "-", "+"});
  EXPECT_TRUE(x.ok());
  if (!x.ok()) return out;
  for (std::size_t i = 0; i < x->get()->elements; ++i) {
    const redisReply* f = x->get()->element[i]->element[1];
    std::map<std::string, std::string> m;
    for (std::size_t k = 0; k + 1 < f->elements; k += 2)
      m[queue::reply_str(f->element[k])] = queue::reply_str(f->element[k + 1]);
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

TEST(Ports, ClaimableSeesNewOwnAndExpiredWork) {
  ts::RedisServer srv;
  queue::Connector conn(srv.address());
  auto ra = conn.connect(), rb = conn.connect();
  ASSERT_TRUE(ra.ok() && rb.ok());
  queue::StageQueue a(**ra, opts("a", 200)), b(**rb, opts("b", 200));
  ASSERT_TRUE(a.ensure_group().ok());
  auto c = a.claimable();
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_FALSE(c->any());
  ASSERT_TRUE(a.enqueue("t").ok());
  c = a.claimable();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->length, 1);
  EXPECT_EQ(c->pending, 0);
  EXPECT_TRUE(c->any());
  auto e = a.claim();
  ASSERT_TRUE(e.ok() && e->has_value());
  c = a.claimable();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->pending, 1);
  EXPECT_TRUE(c->own_pending);
  EXPECT_TRUE(c->any());
  // For b the entry is another's lease: claimable once it has been idle for the lease.
  c = b.claimable();
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->own_pending);
  EXPECT_TRUE(ts::wait_for(
      [&] {
        auto x = b.claimable();
        return x.ok() && x->expired && x->any();
      },
      5));
  auto backlog = queue::stream_backlogs(
      **ra, {{keys::stream("ports"), "ports"}, {keys::stream("none"), "none"}});
  ASSERT_TRUE(backlog.ok());
  EXPECT_EQ((*backlog)[0].length, 1);
  EXPECT_EQ((*backlog)[0].claimed, 1);
  EXPECT_EQ((*backlog)[0].waiting(), 0);
  EXPECT_EQ((*backlog)[1].length, 0);  // no stream, no group: 0
  EXPECT_EQ((*backlog)[1].claimed, 0);
}

TEST(Ports, BothDeadLetterWritersFileTheSameRecord) {
  ts::RedisServer srv;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  queue::StageQueue q(**r, opts("a"));
  ASSERT_TRUE(q.ensure_group().ok());
  // The queue's (an entry with no task in it) ...
  ASSERT_TRUE(q.enqueue("junk").ok());
  auto e = q.claim();
  ASSERT_TRUE(e.ok() && e->has_value());
  ASSERT_TRUE(q.dead_letter(**e, "sample", "r1", "j1", "why", {}).ok());
  // ... and the state machine's (a failed job), through one builder.
  state::Store store(**r);
  pb::JobSpec spec;
  spec.set_job_id("j2");
  ASSERT_TRUE(store.accept_job("r1", spec, "encode task").ok());
  ASSERT_TRUE(store.start_attempt("r1", "j2", pb::STAGE_ENCODE).ok());
  ASSERT_TRUE(q.enqueue("task").ok());
  e = q.claim();
  ASSERT_TRUE(e.ok() && e->has_value());
  auto m = state::Store::fail_move("r1", "j2", pb::STAGE_ENCODE, "broke", std::string("task"));
  m.ack = state::QueueAck{q.options().stream, q.options().group, q.options().consumer, (*e)->id};
  ASSERT_TRUE(store.apply(m).ok());
  const auto dead = dead_letters(**r);
  ASSERT_EQ(dead.size(), 2u);
  const std::map<std::string, std::string> first = {
      {"stage", "sample"}, {"run", "r1"}, {"job", "j1"}, {"reason", "why"}, {"task", "junk"}};
  const std::map<std::string, std::string> second = {
      {"stage", "encode"}, {"run", "r1"}, {"job", "j2"}, {"reason", "broke"}, {"task", "task"}};
  EXPECT_EQ(dead[0], first);
  EXPECT_EQ(dead[1], second);
  auto n = queue::dead_letter_count(**r);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2);
}

TEST(Ports, TheBoardStorePublishesReadsAndWaits) {
  const std::string kOrder = "0 256 1000 0 0";  // dispatch::ClaimOrder{}.encode()
  ts::RedisServer srv;
  auto open = state::RedisPoolBoardStore::opener(queue::Connector(srv.address()));
  auto s = open();
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  auto& store = **s;
  ASSERT_TRUE(store.publish("p1", std::string("\x01\x02", 2)).ok());
  ASSERT_TRUE(store.publish_now("p2", "two").ok());
  store.flush();
  auto hb = store.heartbeats();
  ASSERT_TRUE(hb.ok());
  std::map<std::string, std::string> got(hb->begin(), hb->end());
  EXPECT_EQ(
      got, (std::map<std::string, std::string>{{"p1", std::string("\x01\x02", 2)}, {"p2", "two"}}));
  // The next task: none without a stream or a group, then the entry the claim order takes (the
  // oldest of equal priority and user), then with that one held, the one after it.
  const std::string stream = keys::stream("sample");
  auto next = store.next_task(stream, "sample", kOrder);
  EXPECT_FALSE(next.ok() && next->has_value());
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*r)->command({"XGROUP", "CREATE", stream, "other", "0", "MKSTREAM"}).ok());
  next = store.next_task(stream, "sample", kOrder);
  EXPECT_FALSE(next.ok() && next->has_value());
  queue::StageQueue q(**r,
                      {stream, "sample", "c", 5000, 10, 10, kOrder, keys::claim_share(stream)});
  ASSERT_TRUE(q.ensure_group().ok());
  ASSERT_TRUE(q.enqueue("first").ok());
  ASSERT_TRUE(q.enqueue("second").ok());
  next = store.next_task(stream, "sample", kOrder);
  ASSERT_TRUE(next.ok() && next->has_value());
  EXPECT_EQ(**next, "first");
  ASSERT_TRUE(q.claim().ok());
  next = store.next_task(stream, "sample", kOrder);
  ASSERT_TRUE(next.ok() && next->has_value());
  EXPECT_EQ(**next, "second");
  auto backlog = store.backlogs({{stream, "sample"}});
  ASSERT_TRUE(backlog.ok());
  EXPECT_EQ((*backlog)[0].waiting(), 1);
  // wait_for_entry returns when an entry is added, before its wait is out.
  std::thread add([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto w = srv.connect();
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->command({"XADD", stream, "*", "task", "third"}).ok());
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(store.wait_for_entry(stream, std::chrono::seconds(30)).ok());
  add.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 15);
}

TEST(Ports, TheGpuLeaseStoreLetsOnlyItsHolderRenewAndRelease) {
  ts::RedisServer srv;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  state::GpuLeaseStore enc("g", "enc/1", 1, 5000), samp("g", "s0/1", 2, 5000);
  EXPECT_EQ(enc.key(), "h3pipe:gpu:g");
  auto got = enc.acquire(**r);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(*got);
  got = samp.acquire(**r);  // held: the sampler waits (and says so)
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(*got);
  auto renewed = samp.renew(**r);
  ASSERT_TRUE(renewed.ok());
  EXPECT_FALSE(*renewed);
  renewed = enc.renew(**r);
  ASSERT_TRUE(renewed.ok());
  EXPECT_TRUE(*renewed);
  ASSERT_TRUE(samp.release(**r, 0).ok());  // not its lease: nothing happens
  got = samp.acquire(**r);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(*got);
  ASSERT_TRUE(enc.release(**r, 0).ok());
  got = enc.acquire(**r);  // the sampler waits for it: the encoder leaves it
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(*got);
  got = samp.acquire(**r);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(*got);
}

TEST(Ports, TheStoreCountsWritesAndHandBacksAndReadsTheJob) {
  ts::RedisServer srv;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  state::Store store(**r);
  pb::JobSpec spec;
  spec.set_job_id("j");
  spec.set_prompt("p");
  auto accepted = store.accept_job("r", spec, "payload");
  ASSERT_TRUE(accepted.ok() && *accepted);
  auto exists = store.job_exists("r", "j");
  ASSERT_TRUE(exists.ok());
  EXPECT_TRUE(*exists);
  exists = store.job_exists("r", "nope");
  ASSERT_TRUE(exists.ok());
  EXPECT_FALSE(*exists);
  auto stored = store.job_spec("r", "j");
  ASSERT_TRUE(stored.ok());
  EXPECT_NE(stored->find("\"jobId\""), std::string::npos) << *stored;
  auto none = store.job_spec("r", "nope");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, "");
  // wrote:<stage> with a move's record commands (kept even when the job is past the stage).
  ASSERT_TRUE(store.start_attempt("r", "j", pb::STAGE_ENCODE).ok());
  pb::StageRecord rec;
  rec.set_stage(pb::STAGE_ENCODE);
  auto m = state::Store::advance_move("r", "j", rec, state::JobState::kSample);
  state::Store::count_written(m, pb::STAGE_ENCODE);
  ASSERT_TRUE(store.apply(m).ok());
  ASSERT_TRUE(store.note_handed_back("r", "j", pb::STAGE_SAMPLE, "stopping").ok());
  auto h = (*r)->command(
      {"HMGET", keys::job("r", "j"), "wrote:encode", "handed_back:sample", "error", "state"});
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(queue::reply_str(h->get()->element[0]), "1");
  EXPECT_EQ(queue::reply_str(h->get()->element[1]), "1");
  EXPECT_EQ(queue::reply_str(h->get()->element[2]), "stopping");
  EXPECT_EQ(queue::reply_str(h->get()->element[3]), "sample");
}

// The decode's completion keeps the job's receipt beside the run (state/receipts.h, issue #34 P8):
// in the same step as `done`, again when a redelivered decode completes a job already done, never
// over the size bound; and the history names where each stage's output was committed.
TEST(Ports, TheDecodesCompletionKeepsTheReceiptBesideTheRun) {
  ts::RedisServer srv;
  auto r = srv.connect();
  ASSERT_TRUE(r.ok());
  state::Store store(**r);
  pb::JobSpec spec;
  spec.set_job_id("j");
  spec.set_prompt("p");
  auto accepted = store.accept_job("r", spec, "payload");
  ASSERT_TRUE(accepted.ok() && *accepted);
  const std::vector<std::pair<pb::Stage, state::JobState>> moves = {
      {pb::STAGE_ENCODE, state::JobState::kSample},
      {pb::STAGE_SAMPLE, state::JobState::kDecode},
      {pb::STAGE_DECODE, state::JobState::kDone}};
  for (const auto& [stage, to] : moves) {
    ASSERT_TRUE(store.start_attempt("r", "j", stage).ok());
    pb::StageRecord rec;
    rec.set_stage(stage);
    rec.set_host(stage == pb::STAGE_DECODE ? "b" : "a");
    rec.set_output_sha256(std::string(64, stage == pb::STAGE_DECODE ? 'd' : 'x'));
    auto m = state::Store::advance_move("r", "j", rec, to);
    if (stage == pb::STAGE_DECODE) {
      ASSERT_TRUE(state::attach_receipt(m, R"({"jobId":"j","n":1})"));
    }
    auto moved = store.apply(m);
    ASSERT_TRUE(moved.ok());
    EXPECT_EQ(moved->code, state::Applied::kApplied);
  }
  auto held = state::receipts(**r, "r");
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(*held, (std::map<std::string, std::string>{{"j", R"({"jobId":"j","n":1})"}}));
  auto hist = store.history("r", "j");
  ASSERT_TRUE(hist.ok());
  auto decoded = state::completion(*hist, pb::STAGE_DECODE);
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->host(), "b");
  EXPECT_EQ(decoded->output_sha256(), std::string(64, 'd'));
  EXPECT_FALSE(state::completion(*hist, pb::STAGE_TRANSFER).has_value());
  // A redelivered decode rewrote the file: the copy follows (the job is already done).
  pb::StageRecord again;
  again.set_stage(pb::STAGE_DECODE);
  auto m = state::Store::advance_move("r", "j", again, state::JobState::kDone);
  ASSERT_TRUE(state::attach_receipt(m, R"({"jobId":"j","n":2})"));
  auto moved = store.apply(m);
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->code, state::Applied::kAlreadyPast);
  held = state::receipts(**r, "r");
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->at("j"), R"({"jobId":"j","n":2})");
  // Over the bound (or empty): not attached, the move unchanged.
  auto big = state::Store::advance_move("r", "k", again, state::JobState::kDone);
  const auto commands = big.record.size();
  EXPECT_FALSE(state::attach_receipt(big, std::string(state::kReceiptMaxBytes + 1, ' ')));
  EXPECT_FALSE(state::attach_receipt(big, ""));
  EXPECT_EQ(big.record.size(), commands);
  auto none = state::receipts(**r, "other-run");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}
