// The one decode-host choice (decode_route.h): candidates from the config, the load the caller
// sees, and the shared rule.  The simulator, the sampler, the transfer sender and resume call it.
#include <gtest/gtest.h>

#include "common/dispatch/decode_route.h"
#include "common/dispatch/geometry.h"

namespace h3pipe::dispatch {
namespace {

using config::StageKind;

config::Pool pool(std::string name, std::string host, StageKind stage, double s) {
  config::Pool p;
  p.name = std::move(name);
  p.host = std::move(host);
  p.stage = stage;
  p.profiles["sd"].seconds = s;
  return p;
}

// Sampling host a; decode hosts b (one 2 s pool, fast link) and c (two 3 s pools, slow link).
config::Cluster cluster() {
  config::Cluster c;
  for (const char* h : {"a", "b", "c"}) {
    c.hosts.push_back({});
    c.hosts.back().name = h;
  }
  c.pools = {pool("s", "a", StageKind::kSample, 100), pool("db", "b", StageKind::kDecode, 2),
             pool("dc1", "c", StageKind::kDecode, 3), pool("dc2", "c", StageKind::kDecode, 3)};
  c.links = {{"a", "b", 2.35, 1}, {"c", "a", 1.0, 1}};  // a->c only in the reverse direction
  return c;
}

const std::uint64_t kBytes = latent_bytes(416, 736, 124);

TEST(DecodeRoute, CandidatesComeFromTheConfigInOrder) {
  auto hosts = decode_hosts(cluster(), {"a"}, "sd", kBytes, {});
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].host, "b");
  EXPECT_EQ(hosts[1].host, "c");
  EXPECT_NEAR(hosts[0].transfer_s, kBytes * 8 / 2.35e9 + 0.001, 1e-9);
  EXPECT_NEAR(hosts[1].transfer_s, kBytes * 8 / 1e9 + 0.001, 1e-9);  // the reverse link
  EXPECT_EQ(hosts[1].decoders.size(), 2u);
  EXPECT_FALSE(hosts[0].local);
  auto r = route_latent(cluster(), {"a"}, "sd", kBytes, {});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->host, "b");
}

TEST(DecodeRoute, BacklogDecoderStateAndLinksMoveTheChoice) {
  const auto c = cluster();
  DecodeLoad load;
  load.queued["b"] = 3;  // b: done at 8 s; c: 2 queued on two 3 s pools, done at 6 s
  load.queued["c"] = 2;
  EXPECT_EQ(route_latent(c, {"a"}, "sd", kBytes, load)->host, "c");
  EXPECT_NEAR(route_latent(c, {"a"}, "sd", kBytes, load)->done_in_s, 6, 1e-9);
  load.queued.clear();
  load.decoder_free_in_s["db"] = 10;  // b busy 10 s more
  EXPECT_EQ(route_latent(c, {"a"}, "sd", kBytes, load)->host, "c");
  load.decoder_free_in_s.clear();
  load.link_backlog_s[{"a", "b"}] = 5;  // the a->b link has 5 s of transfers ahead
  EXPECT_EQ(route_latent(c, {"a"}, "sd", kBytes, load)->host, "c");
  load.link_backlog_s.clear();
  load.dead_pools = {"db"};
  EXPECT_EQ(route_latent(c, {"a"}, "sd", kBytes, load)->host, "c");
}

TEST(DecodeRoute, AHostHoldingTheLatentNeedsNoTransferAndWinsTies) {
  auto c = cluster();
  c.pools.push_back(pool("da", "a", StageKind::kDecode, 2));
  // a and b both 2 s; a holds it (no transfer): a.
  EXPECT_EQ(route_latent(c, {"a"}, "sd", kBytes, {})->host, "a");
  // Held on b and c (sampled on b, delivered to c): both need no transfer, a does.
  auto hosts = decode_hosts(c, {"b", "c"}, "sd", kBytes, {});
  EXPECT_TRUE(hosts[0].local);
  EXPECT_TRUE(hosts[1].local);
  EXPECT_FALSE(hosts[2].local);
  EXPECT_DOUBLE_EQ(hosts[0].transfer_s, 0);
}

TEST(DecodeRoute, TheDecodeSideOfAClaimLookahead) {
  const auto c = cluster();
  DecodeLoad load;
  load.queued["c"] = 2;
  load.decoder_free_in_s["db"] = 4;
  load.link_backlog_s[{"a", "b"}] = 5;
  Lookahead la;
  fill_decode_side(c, {"a", "", "b"}, "sd", kBytes, load, la);
  ASSERT_EQ(la.decode_hosts.size(), 2u);
  EXPECT_EQ(la.decode_hosts[1].queued, 2u);
  EXPECT_DOUBLE_EQ(la.decode_hosts[0].decoders[0].free_in_s, 4);
  ASSERT_EQ(la.transfer_s.size(), 3u);
  ASSERT_EQ(la.transfer_s[0].size(), 2u);
  EXPECT_NEAR(la.transfer_s[0][0], 5 + kBytes * 8 / 2.35e9 + 0.001, 1e-9);  // backlog + latent
  EXPECT_NEAR(la.transfer_s[0][1], kBytes * 8 / 1e9 + 0.001, 1e-9);         // the reverse link
  EXPECT_TRUE(la.transfer_s[1].empty());     // no host: the pool's tail_s counts
  EXPECT_DOUBLE_EQ(la.transfer_s[2][0], 0);  // b decodes its own latents
}

TEST(DecodeRoute, ProfilesDecideWhoCanDecode) {
  auto c = cluster();
  c.pools[1].profiles.clear();  // db cannot run "sd"
  EXPECT_EQ(route_latent(c, {"a"}, "sd", kBytes, {})->host, "c");
  for (auto& p : c.pools) p.profiles.clear();  // nobody has a profile: every decoder counts 1 s
  EXPECT_EQ(route_latent(c, {"a"}, "sd", kBytes, {})->host, "b");
  c.pools.resize(1);  // no decode pool at all
  EXPECT_FALSE(route_latent(c, {"a"}, "sd", kBytes, {}).has_value());
}

}  // namespace
}  // namespace h3pipe::dispatch
