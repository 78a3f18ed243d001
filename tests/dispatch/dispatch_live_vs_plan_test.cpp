// One input model for live and plan (issue #26): every decision the planner's simulator makes is
// made again by the live side from what a live worker would read at that instant, and the two
// must agree.  The simulator (schedule::simulate with SimOptions::on_claim/on_route) generates the
// observation sequence deterministically: job arrivals (seeded submit times, mixed classes), stage
// completions (seeded draws of normal profiles), GPU groups freeing.  At each claim decision the
// test writes the heartbeats the pools would have published (busy-until, timestamp) and the
// streams' (length, claimed), and asks the live board's decision path (worker::observe_board and
// worker::board_decision: what PoolBoard::may_claim does once it has read Redis); at each
// decode-host choice the sampler's path (spec::route_inputs from the task's
// spec, then dispatch::route_latent).  On every planner fixture (configs/topologies) and on a
// wan2.1 cluster, whose latents are about 2.3x the builtin profile's at the same geometry.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/dispatch/board_model.h"
#include "common/dispatch/decode_route.h"
#include "common/dispatch/geometry.h"
#include "common/schedule/simulate.h"
#include "common/spec/spec.h"
#include "common/worker/decode_choice.h"
#include "common/worker/pool_board.h"

namespace h3pipe {
namespace {

namespace fs = std::filesystem;
using config::StageKind;

// Live unix seconds at the simulator's time 0; small, so busy-until - now stays exact to ~1e-13.
constexpr double kEpoch = 1000.0;

struct Tally {
  std::size_t claims = 0, claimed = 0, routes = 0, claim_diff = 0, route_diff = 0;
  std::vector<std::string> diffs;  // the first few, for the failure message
};

// What a live worker reads at the traced instant, and the live decision from it.
bool live_claim(const config::Cluster& c, const dispatch::BoardModel& live,
                const schedule::ClaimTrace& tr) {
  const double now = kEpoch + tr.t;
  std::map<std::string, pb::Heartbeat> beats;
  for (std::size_t i = 0; i < c.pools.size(); ++i) {
    pb::Heartbeat hb;
    hb.set_pool(c.pools[i].name);
    hb.set_host(c.pools[i].host);
    hb.set_unix_ms(static_cast<std::int64_t>(std::llround(now * 1000)));
    const double busy = tr.seen.pools[i].busy_for_s;
    hb.set_busy_until_unix_s(busy > 0 ? now + busy : 0);
    hb.set_state(busy > 0 ? "busy" : "idle");
    beats[c.pools[i].name] = hb;
  }
  const auto& b = tr.seen.backlog;
  std::vector<queue::StreamBacklog> streams(3);
  streams[0].length = static_cast<long long>(b.encode_queued + b.encoding);
  streams[0].claimed = static_cast<long long>(b.encoding);
  streams[1].length = static_cast<long long>(b.sample_queued + b.sampling);
  streams[1].claimed = static_cast<long long>(b.sampling);
  streams[2].length = static_cast<long long>(b.decode_queued_here);
  // in_transit_here as production passes it (PoolBoard::may_claim: 0, the latents on their way
  // are in other hosts' outboxes); the simulator's observation has 0 too (#36 item 5).
  EXPECT_EQ(b.in_transit_here, 0u) << "the plan counts latents in transit, production cannot";
  dispatch::Observation seen = worker::observe_board(live, beats, streams, now);
  const dispatch::DecodeLoad load = tr.load;
  seen.decode_load = [load] { return load; };
  return worker::board_decision(live, tr.pool, tr.job_class, seen);
}

// The sampler's choice for a latent of the traced class made on tr.from_host.
std::string live_route(const config::Cluster& c, const schedule::RouteTrace& tr) {
  pb::StageTask t;
  for (const auto& k : c.classes)
    if (k.name == tr.job_class) {
      t.mutable_spec()->set_width(k.width);
      t.mutable_spec()->set_height(k.height);
      t.mutable_spec()->set_frames(k.frames);
      t.mutable_spec()->set_steps(k.steps);
    }
  t.mutable_spec()->set_job_class(tr.job_class);
  const auto in = spec::route_inputs(t.spec(), c);
  auto r = dispatch::route_latent(c, {tr.from_host}, in.job_class, in.latent_bytes, tr.load);
  return r ? r->host : tr.from_host;
}

// Seeded jobs of the config's classes: bursts and gaps, so queues fill and drain.
std::vector<schedule::SimJob> jobs_for(const config::Cluster& c, std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<schedule::SimJob> out;
  double t = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (rng() % 3 == 0) t += static_cast<double>(rng() % 400);
    const std::string cls =
        c.classes.empty() ? "default" : c.classes[rng() % c.classes.size()].name;
    out.push_back({"job-" + std::to_string(i), cls, t});
  }
  return out;
}

// Normal profiles with a spread, so the seeded runs complete off their expected times (the live
// heartbeats state expected times; the stages end when they end).
config::Cluster with_spread(config::Cluster c) {
  for (auto& p : c.pools)
    for (auto& [name, prof] : p.profiles)
      if (prof.kind == config::Profile::Kind::kFixed) {
        const double s = prof.seconds;
        prof.kind = config::Profile::Kind::kNormal;
        prof.mean = s;
        prof.sd = 0.15 * s;
      }
  return c;
}

void compare(const config::Cluster& c, const std::string& label, Tally& t) {
  const dispatch::BoardModel live(c);  // as PoolBoard builds it: from the config alone
  for (const char* policy : {"completion_time", "first_free"})
    for (unsigned seed : {1u, 2u, 3u}) {
      const auto jobs = jobs_for(c, 30, seed);
      schedule::SimOptions o;
      o.policy = *dispatch::parse_policy(policy);
      o.stochastic = true;
      o.seed = seed;
      o.record = false;
      config::Cluster lc = c;
      lc.dispatch = o.policy;  // the live workers read the policy from the config
      const dispatch::BoardModel board(lc);
      o.on_claim = [&](const schedule::ClaimTrace& tr) {
        ++t.claims;
        t.claimed += tr.claimed;
        const bool mine = live_claim(lc, board, tr);
        if (mine != tr.claimed && ++t.claim_diff <= 5)
          t.diffs.push_back(fmt::format(
              "{} {} seed {}: t={:.3f} pool {} class {}: plan {}, live {}", label, policy, seed,
              tr.t, c.pools[tr.pool].name, tr.job_class, tr.claimed, mine));
      };
      o.on_route = [&](const schedule::RouteTrace& tr) {
        ++t.routes;
        const std::string mine = live_route(lc, tr);
        if (mine != tr.host && ++t.route_diff <= 5)
          t.diffs.push_back(fmt::format("{} {} seed {}: t={:.3f} route from {}: plan {}, live {}",
                                        label, policy, seed, tr.t, tr.from_host, tr.host, mine));
      };
      auto r = schedule::simulate(c, jobs, o);
      ASSERT_TRUE(r.ok()) << label << ": " << r.error().to_string();
    }
  (void)live;
}

std::string report(const Tally& t) {
  std::string s = fmt::format("{} claim decisions ({} claims), {} routes; {} + {} differ", t.claims,
                              t.claimed, t.routes, t.claim_diff, t.route_diff);
  for (const auto& d : t.diffs) s += "\n  " + d;
  return s;
}

TEST(LiveVsPlan, EveryDecisionAgreesOnThePlannerFixtures) {
  const fs::path dir = fs::path(H3PIPE_SOURCE_DIR) / "configs" / "topologies";
  std::size_t fixtures = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    auto c = config::load_file(e.path());
    ASSERT_TRUE(c.ok()) << e.path() << ": " << c.error().to_string();
    Tally t;
    compare(with_spread(*c), e.path().filename().string(), t);
    ++fixtures;
    std::printf("%s: %s\n", e.path().filename().c_str(), report(t).c_str());
    EXPECT_GT(t.claims, 0u);
    EXPECT_GT(t.routes, 0u);
    EXPECT_EQ(t.claim_diff + t.route_diff, 0u) << e.path().filename() << ": " << report(t);
  }
  EXPECT_GE(fixtures, 6u);
}

// Two hosts over a slow link: samplers on "gpu" (no decoder) and on "dec" (next to the decoder),
// encoders upstream, classes on the wan2.1 profile.  The samplers' route tails and the decode
// side's transfer times turn on the latent's size, so a builtin-sized latent (3.6 MB, the wan2.1
// one 8.4 MB at 832x480x81) moves claims.  Several sampler speeds, so some decision sits near each
// edge.  two_decoders: a slower second decoder on "dec", whose claims turn on the work still to
// come to the host, latents in transit included where they are counted (#36 item 5).
config::Cluster wan_cluster(const fs::path& dir, double dec_sample_s, bool two_decoders = false) {
  const std::string json = fmt::format(R"({{
    "name": "wan21_two_host", "dispatch": "completion_time", "latent_profile": "wan2.1",
    "classes": [
      {{"name": "wan480", "width": 832, "height": 480, "frames": 81, "steps": 20}},
      {{"name": "wan720", "width": 1280, "height": 720, "frames": 81, "steps": 20,
       "latent_profile": "wan2.1"}}
    ],
    "hosts": [{{"name": "gpu", "address": "127.0.0.1"}}, {{"name": "dec", "address": "127.0.0.1"}}],
    "pools": [
      {{"name": "enc", "host": "gpu", "stage": "encode",
       "profiles": {{"wan480": {{"seconds": 4}}, "wan720": {{"seconds": 6}}}}}},
      {{"name": "s-gpu-a", "host": "gpu", "stage": "sample",
       "profiles": {{"wan480": {{"seconds": 30}}, "wan720": {{"seconds": 60}}}}}},
      {{"name": "s-gpu-b", "host": "gpu", "stage": "sample",
       "profiles": {{"wan480": {{"seconds": 33}}, "wan720": {{"seconds": 64}}}}}},
      {{"name": "s-dec", "host": "dec", "stage": "sample",
       "profiles": {{"wan480": {{"seconds": {0}}}, "wan720": {{"seconds": {1}}}}}}},
      {{"name": "d-dec", "host": "dec", "stage": "decode",
       "profiles": {{"wan480": {{"seconds": 5}}, "wan720": {{"seconds": 9}}}}}}{2}
    ],
    "links": [{{"from": "gpu", "to": "dec", "gbps": 0.004, "latency_ms": 200}}]
  }})",
                                       dec_sample_s, dec_sample_s * 2,
                                       two_decoders ? R"(,
      {"name": "d-dec-slow", "host": "dec", "stage": "decode",
       "profiles": {"wan480": {"seconds": 12}, "wan720": {"seconds": 21}}})"
                                                    : "");
  const fs::path f = dir / fmt::format("wan21_{}{}.json", static_cast<int>(dec_sample_s * 10),
                                       two_decoders ? "_2dec" : "");
  std::ofstream(f) << json;
  auto c = config::load_file(f);
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().to_string());
  return c.ok() ? *c : config::Cluster{};
}

TEST(LiveVsPlan, EveryDecisionAgreesOnAWan21Cluster) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("h3_live_vs_plan_{}", ::getpid());
  fs::create_directories(dir);
  Tally t;
  for (double s : {32.0, 34.0, 36.0, 38.0, 40.0, 42.0, 44.0})
    for (bool two : {false, true}) {
      const config::Cluster c = wan_cluster(dir, s, two);
      ASSERT_FALSE(c.pools.empty());
      // The fixture is what the test is about: the class's own latent is not the builtin's.
      const dispatch::BoardModel m(c);
      ASSERT_EQ(m.class_bytes("wan480"), 8'386'560u);
      ASSERT_EQ(dispatch::latent_bytes(832, 480, 81), 3'627'264u);  // the builtin profile's
      compare(with_spread(c), fmt::format("wan2.1 s-dec={}{}", s, two ? " two decoders" : ""), t);
    }
  fs::remove_all(dir);
  std::printf("wan2.1: %s\n", report(t).c_str());
  EXPECT_GT(t.claims, 0u);
  EXPECT_GT(t.routes, 0u);
  EXPECT_EQ(t.claim_diff + t.route_diff, 0u) << report(t);
}

}  // namespace
}  // namespace h3pipe
