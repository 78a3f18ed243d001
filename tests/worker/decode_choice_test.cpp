// Which decode host gets a latent (issue #3, one choice since issue #13): the earliest expected
// decode completion, with the backlog read through the board's port (state::BoardReader) from an
// in-memory board; the Redis implementation of the port under the sampler's ACL user:
// redis_acl_services_test.
#include "common/worker/decode_choice.h"

#include <gtest/gtest.h>

#include "common/config/config.h"
#include "common/transfer/config_map.h"
#include "common/transfer/outbox.h"
#include "common/worker/worker.h"
#include "tests/support/fake_pool_board_store.h"
#include "tests/support/temp_dir.h"

using namespace h3pipe;

namespace {

// Sampling host a; decode hosts b (one pool, 2 s a job) and c (two pools, 3 s a job); c's link is
// slower.  No decoder on a.
config::Cluster cluster() {
  auto j = nlohmann::json::parse(R"({
    "name": "t",
    "hosts": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
    "pools": [
      {"name": "s", "host": "a", "stage": "sample"},
      {"name": "db", "host": "b", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 2}}},
      {"name": "dc1", "host": "c", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 3}}},
      {"name": "dc2", "host": "c", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 3}}},
      {"name": "e", "host": "a", "stage": "encode"}],
    "links": [{"from": "a", "to": "b", "gbps": 2.35, "latency_ms": 1}, {"from": "a", "to": "c", "gbps": 1.0, "latency_ms": 1}]
  })");
  auto c = config::parse(j, ".");
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
  return *c;
}

pb::StageTask task() {
  pb::StageTask t;
  t.set_run_id("r");
  t.set_job_id("j");
  auto* s = t.mutable_spec();
  s->set_width(416);
  s->set_height(736);
  s->set_frames(124);
  s->set_fps(24);
  return t;
}

// `n` decode tasks waiting (none claimed) on `host`'s decode stream.
void fill(test_support::FakeBoard& b, const std::string& host, int n) {
  b.set_backlog(worker::stream_for(config::StageKind::kDecode, host), n, 0);
}

}  // namespace

TEST(DecodeChoice, IdleHostsPickTheFastestDecodeIncludingTheTransfer) {
  auto c = cluster();
  auto scored = worker::score_decode_hosts(c, "a", task(), nullptr);
  ASSERT_EQ(scored.size(), 2u);
  EXPECT_EQ(scored[0].host, "b");  // 2 s + 15 ms beats 3 s + 35 ms
  EXPECT_NEAR(scored[0].transfer_s, 4297600.0 * 8 / 2.35e9 + 0.001, 1e-6);
  EXPECT_NEAR(scored[1].transfer_s, 4297600.0 * 8 / 1e9 + 0.001, 1e-6);
  EXPECT_DOUBLE_EQ(scored[0].decode_s, 2.0);
}

TEST(DecodeChoice, TheTransferSizeComesFromTheJobsLatentProfile) {
  auto c = cluster();
  c.latent_profile = "wan2.1";
  auto t = task();
  t.mutable_spec()->set_width(832);
  t.mutable_spec()->set_height(480);
  t.mutable_spec()->set_frames(81);
  t.mutable_spec()->set_fps(16);
  auto scored = worker::score_decode_hosts(c, "a", t, nullptr);
  ASSERT_EQ(scored.size(), 2u);
  // (1, 16, 21, 60, 104) float32 = 8,386,560 bytes (docs/latent.md).
  EXPECT_NEAR(scored[0].transfer_s, 8386560.0 * 8 / 2.35e9 + 0.001, 1e-6);
}

TEST(DecodeChoice, BacklogMovesTheLatentToTheShorterExpectedQueue) {
  test_support::FakeBoard b;
  auto board = b.reader();
  auto c = cluster();
  // The queue is served FIFO on the decoders' slots (dispatch::expected_decode_completion):
  // b: 3 queued on one 2 s pool, this one done at 8 s; c: 2 queued on two 3 s pools, done at 6 s.
  fill(b, "b", 3);
  fill(b, "c", 2);
  auto scored = worker::score_decode_hosts(c, "a", task(), board.get());
  ASSERT_EQ(scored.size(), 2u);
  EXPECT_EQ(scored[0].host, "c");
  EXPECT_DOUBLE_EQ(scored[0].total(), 6.0);
  EXPECT_DOUBLE_EQ(scored[1].total(), 8.0);
  EXPECT_EQ(worker::choose_decode_host(c, "a", task(), board.get()), "c");
  // Drain b: back to b.
  fill(b, "b", 0);
  EXPECT_EQ(worker::choose_decode_host(c, "a", task(), board.get()), "b");
}

// A board that cannot be read counts no backlog: the choice degrades to the fastest host for
// this job, never to a failure.
TEST(DecodeChoice, AnUnreadableBoardMeansNoBacklog) {
  test_support::FakeBoard b;
  auto board = b.reader();
  auto c = cluster();
  fill(b, "b", 3);
  fill(b, "c", 2);
  EXPECT_EQ(worker::choose_decode_host(c, "a", task(), board.get()), "c");
  b.fail(true);
  EXPECT_EQ(worker::choose_decode_host(c, "a", task(), board.get()), "b");
  EXPECT_GE(b.calls().backlogs, 2);
}

TEST(DecodeChoice, ALocalDecoderWinsTiesAndNoDecoderMeansSelf) {
  auto j = nlohmann::json::parse(R"({
    "name": "t", "hosts": [{"name": "a"}, {"name": "b"}],
    "pools": [{"name": "s", "host": "a", "stage": "sample"},
              {"name": "da", "host": "a", "stage": "decode"}, {"name": "db", "host": "b", "stage": "decode"},
              {"name": "e", "host": "a", "stage": "encode"}]})");
  auto c = config::parse(j, ".");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(worker::choose_decode_host(*c, "a", task(), nullptr), "a");
  auto none = config::parse(nlohmann::json::parse(R"({"name": "t", "hosts": [{"name": "a"}],
    "pools": [{"name": "s", "host": "a", "stage": "sample"}]})"),
                            ".");
  // No decode pool at all never reaches a choice: the config is refused.
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("decode"), std::string::npos) << none.error().message;
}

TEST(DecodeChoice, ResumeDecodesWhereTheLatentIsOrSendsItFromTheSamplingHost) {
  auto c = cluster();  // sampler on a (no decoder), decoders on b and c
  // Sampled on a, delivered to c: decode on c (no transfer), though b is faster.
  auto t = worker::resume_decode_target(c, {"a", "c"}, task(), nullptr);
  EXPECT_EQ(t.host, "c");
  EXPECT_FALSE(t.via_transfer);
  // Only on a, which does not decode: the shared choice from a, through a's transfer sender.
  t = worker::resume_decode_target(c, {"a"}, task(), nullptr);
  EXPECT_EQ(t.host, "b");
  EXPECT_TRUE(t.via_transfer);
  // The sampler and the resume agree.
  EXPECT_EQ(worker::choose_decode_host(c, "a", task(), nullptr), "b");
}

// Latents still in the sampling host's transfer outbox count on the host each goes to, as the
// planner counts latents on a link: two on their way to b send the next one to c.
TEST(DecodeChoice, LatentsStillInTheOutboxCountWhereTheyGo) {
  test_support::TempDir dir;
  auto c = cluster();
  c.state_dir = dir.path();
  EXPECT_EQ(worker::choose_decode_host(c, "a", task(), nullptr), "b");
  const auto outbox = transfer::outbox_dir(c, "a");
  for (const char* job : {"x1", "x2"}) {
    pb::StageTask t = task();
    t.set_job_id(job);
    t.set_target_host("b");
    ASSERT_TRUE(transfer::record_task(outbox, t).ok());
  }
  const auto load = worker::decode_load(c, nullptr, "a");
  EXPECT_EQ(load.queued.at("b"), 2u);
  // b: two ahead on one 2 s pool, done at 6 s; c: two idle 3 s pools, about 3 s.
  EXPECT_EQ(worker::choose_decode_host(c, "a", task(), nullptr), "c");
}
