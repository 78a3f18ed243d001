// Completion-time-aware dispatch against plain first-free, in the simulator (issue #5): it must
// win a heterogeneous tail and never lose on a set of topologies.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>

#include "common/schedule/plan.h"
#include "common/schedule/simulate.h"

namespace h3pipe::schedule {
using namespace h3pipe::dispatch;  // the rule the planner runs
namespace {

using config::StageKind;

config::Profile fixed(double s) {
  config::Profile p;
  p.seconds = s;
  return p;
}

config::Pool make_pool(std::string name, std::string host, StageKind stage, double seconds,
                       std::string shares = {}) {
  config::Pool p;
  p.name = std::move(name);
  p.host = std::move(host);
  p.stage = stage;
  p.gpus = {0};
  p.profiles["sd"] = fixed(seconds);
  p.shares_gpus_with = std::move(shares);
  return p;
}

// Samplers of the given speeds; decoders on "dec" (or on the sampler host when local).
config::Cluster cluster(const std::vector<double>& samplers, const std::vector<double>& decoders,
                        bool local_decode, double encode_s = 0, double gbps = 2.35,
                        double latency_ms = 1085) {
  config::Cluster c;
  c.classes.push_back({"sd", 416, 736, 124, 6});
  c.hosts.push_back({});
  c.hosts.back().name = "a";
  c.hosts.push_back({});
  c.hosts.back().name = "dec";
  for (std::size_t i = 0; i < samplers.size(); ++i) {
    const std::string name = fmt::format("s{}", i);
    if (encode_s > 0)
      c.pools.push_back(make_pool(fmt::format("e{}", i), "a", StageKind::kEncode, encode_s, name));
    c.pools.push_back(make_pool(name, "a", StageKind::kSample, samplers[i]));
  }
  for (std::size_t i = 0; i < decoders.size(); ++i)
    c.pools.push_back(make_pool(fmt::format("d{}", i), local_decode ? "a" : "dec",
                                StageKind::kDecode, decoders[i]));
  c.links.push_back({"a", "dec", gbps, latency_ms});
  return c;
}

double makespan(const config::Cluster& c, std::size_t jobs, Policy policy) {
  SimOptions o;
  o.policy = policy;
  auto r = simulate(c, make_jobs(jobs, "sd"), o);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().to_string());
  return r.ok() ? r->makespan_s : 0;
}

TEST(Policy, CompletionTimeWinsTheHeterogeneousTail) {
  // A 100 s pool and a 300 s pool, two jobs: first-free gives the slow pool the second job
  // (done at 300 s); completion-time leaves it to the fast pool (done at 200 s).
  auto c = cluster({100, 300}, {10}, false);
  const double ct = makespan(c, 2, Policy::kCompletionTime);
  const double ff = makespan(c, 2, Policy::kFirstFree);
  EXPECT_NEAR(ct, 200 + 1.1 + 10, 0.01);
  EXPECT_NEAR(ff, 300 + 1.1 + 10, 0.01);
  EXPECT_LT(ct, ff * 0.75);
}

TEST(Policy, CompletionTimeNeverLosesOnTheTestSet) {
  struct Case {
    std::vector<double> samplers, decoders;
    bool local;
    double encode;
  };
  const std::vector<Case> cases = {
      {{100, 300}, {10}, false, 0},
      {{100, 150}, {10}, false, 0},
      {{100, 100, 250}, {12}, false, 0},
      {{60, 100, 400}, {11.8}, false, 13},
      {{127.39, 127.39, 166.39}, {11.8}, false, 13.06},
      {{127.39, 293.03}, {36.31}, false, 13.06},
      {{140, 140}, {70}, false, 0},     // decoder-bound
      {{50, 200}, {30, 45}, false, 0},  // two decoders of different speeds
      {{100, 300}, {10}, true, 0},      // decode on the sampler host
      {{80, 90, 100, 500}, {5}, false, 20},
  };
  for (const auto& k : cases)
    for (std::size_t n = 1; n <= 14; ++n) {
      auto c = cluster(k.samplers, k.decoders, k.local, k.encode);
      const double ct = makespan(c, n, Policy::kCompletionTime);
      const double ff = makespan(c, n, Policy::kFirstFree);
      EXPECT_LE(ct, ff + 1e-6) << "samplers " << fmt::format("{}", fmt::join(k.samplers, ","))
                               << " jobs " << n;
    }
}

// One random heterogeneous cluster of the sweep below: 1-4 samplers on hosts a/b, with encoders
// on their GPUs, or 1-2 standalone encoders, or none; 1-2 decoders on "dec" or "a".
config::Cluster random_cluster(std::mt19937_64& rng) {
  config::Cluster c;
  c.classes.push_back({"sd", 416, 736, 124, 6});
  for (const char* h : {"a", "b", "dec"}) {
    c.hosts.push_back({});
    c.hosts.back().name = h;
  }
  const int ns = 1 + static_cast<int>(rng() % 4);
  const bool enc = rng() % 2, standalone = rng() % 3 == 0;
  for (int i = 0; i < ns; ++i) {
    const double s = 30 + static_cast<double>(rng() % 400);
    const std::string host = rng() % 2 ? "a" : "b";
    if (enc && !standalone)
      c.pools.push_back(make_pool(fmt::format("e{}", i), host, StageKind::kEncode,
                                  5 + static_cast<double>(rng() % 30), fmt::format("s{}", i)));
    c.pools.push_back(make_pool(fmt::format("s{}", i), host, StageKind::kSample, s));
  }
  if (standalone)
    for (int i = 0, n = 1 + static_cast<int>(rng() % 2); i < n; ++i)
      c.pools.push_back(make_pool(fmt::format("se{}", i), "a", StageKind::kEncode,
                                  5 + static_cast<double>(rng() % 60)));
  for (int i = 0, n = 1 + static_cast<int>(rng() % 2); i < n; ++i)
    c.pools.push_back(make_pool(fmt::format("d{}", i), rng() % 3 == 0 ? "a" : "dec",
                                StageKind::kDecode, 5 + static_cast<double>(rng() % 80)));
  c.links.push_back({"a", "dec", 2.35, 1085});
  c.links.push_back({"b", "dec", 1, 500});
  c.links.push_back({"a", "b", 1, 500});
  return c;
}

std::string describe(const config::Cluster& c) {
  std::string s;
  for (const auto& p : c.pools)
    s += fmt::format(" {}@{}:{}{}", p.name, p.host, p.profiles.at("sd").seconds,
                     p.shares_gpus_with.empty() ? "" : "+" + p.shares_gpus_with);
  return s;
}

// Random heterogeneous clusters (issue #13 acceptance): completion-time against first-free on
// 1,000 seeded clusters of 1..14 jobs.  Both route latents and claim decodes alike (dispatch.h),
// so they differ in encode and sample claims only.  Until the samplers saw the encodes upstream
// as arrivals and the decoders (should_claim with a Lookahead), 1 of 1000 lost (+6.9 %, round
// 887: a slow sampler that the count rule gives a later job took the head one while a faster
// one idled until the next arrival); without the decode side in the rollout, 13 lost (up to
// +5.3 %: samplings ending sooner, bunched at a slow decoder, decoded later).
TEST(Policy, RandomSweepNeverLoses) {
  std::mt19937_64 rng(1);
  std::size_t total = 0, worse = 0, better = 0;
  double worst = 0;
  for (int round = 0; round < 1000; ++round) {
    const config::Cluster c = random_cluster(rng);
    const std::size_t n = 1 + rng() % 14;
    const double ct = makespan(c, n, Policy::kCompletionTime);
    const double ff = makespan(c, n, Policy::kFirstFree);
    ++total;
    if (ct > ff + 1e-6) {
      ++worse, worst = std::max(worst, ct / ff - 1);
      std::printf("worse: round %d, %zu jobs: completion_time %.2f s, first_free %.2f s;%s\n",
                  round, n, ct, ff, describe(c).c_str());
    }
    if (ct < ff - 1e-6) ++better;
  }
  RecordProperty("better", static_cast<int>(better));
  RecordProperty("worse", static_cast<int>(worse));
  EXPECT_EQ(worse, 0u);
  EXPECT_GT(better, total * 30 / 100);
  std::printf(
      "random sweep: %zu clusters, completion_time better in %zu, worse in %zu (worst +%.1f %%)\n",
      total, better, worse, worst * 100);
}

TEST(Policy, CompletionTimeNeverLosesOnTheSeedTopologies) {
  for (const char* t :
       {"serial_4xT10.json", "two_host_4xT10_3080ti.json", "four_four_plus_one.json",
        "four_four_xtx_plus_one.json", "a6000x4_per_gpu.json"})
    for (const char* cls : {"sd", "hd"})
      for (std::uint32_t n : {1u, 2u, 3u, 5u, 6u, 7u, 12u, 25u}) {
        const std::string path = std::string(H3PIPE_SOURCE_DIR) + "/configs/topologies/" + t;
        auto ct = plan_file(path, cls, n, "completion_time", false, 1);
        auto ff = plan_file(path, cls, n, "first_free", false, 1);
        ASSERT_TRUE(ct.ok() && ff.ok()) << t;
        EXPECT_LE(ct->sim.makespan_s, ff->sim.makespan_s + 1e-6) << t << " " << cls << " " << n;
      }
}

TEST(Simulate, GpuSharingEncoderHoldsTheSamplersGpus) {
  // Encoder and sampler on the same GPUs: per job 13 + 127 s, never overlapping.
  auto c = cluster({127}, {10}, false, 13);
  SimOptions o;
  auto r = simulate(c, make_jobs(3, "sd"), o);
  ASSERT_TRUE(r.ok());
  const auto& j = r->job_records;
  EXPECT_DOUBLE_EQ(j[0].encode_start_s, 0);
  EXPECT_DOUBLE_EQ(j[0].sample_start_s, 13);
  EXPECT_DOUBLE_EQ(j[1].encode_start_s, 140);  // after job 0's sampling, not during it
  EXPECT_DOUBLE_EQ(j[2].sample_end_s, 420);
}

// A GPU group is one lease: no two pools sharing GPUs run at once in the plan, on the random
// clusters and on every seed topology.
void expect_no_group_overlap(const SimResult& r, const std::string& what) {
  std::map<std::string, std::vector<std::pair<double, double>>> by_group;
  for (const auto& seg : r.segments)
    if (!r.lanes[seg.lane].group.empty())
      by_group[r.lanes[seg.lane].group].push_back({seg.start_s, seg.end_s});
  for (auto& [g, v] : by_group) {
    std::sort(v.begin(), v.end());
    for (std::size_t i = 1; i < v.size(); ++i)
      ASSERT_GE(v[i].first + 1e-9, v[i - 1].second)
          << what << ": group " << g << " runs two tasks at once at " << v[i].first;
  }
}

TEST(Simulate, GpuGroupIsOneLease) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 300; ++round) {
    const config::Cluster c = random_cluster(rng);
    for (Policy p : {Policy::kCompletionTime, Policy::kFirstFree}) {
      SimOptions o;
      o.policy = p;
      auto r = simulate(c, make_jobs(1 + rng() % 14, "sd"), o);
      ASSERT_TRUE(r.ok());
      expect_no_group_overlap(*r, fmt::format("round {}", round));
    }
  }
  for (const char* t : {"serial_4xT10.json", "four_four_plus_one.json",
                        "four_four_xtx_plus_one.json", "a6000x4_per_gpu.json"}) {
    auto p = plan_file(std::string(H3PIPE_SOURCE_DIR) + "/configs/topologies/" + t, "sd", 25,
                       "completion_time", false, 1);
    ASSERT_TRUE(p.ok()) << t;
    expect_no_group_overlap(p->sim, t);
  }
}

TEST(Simulate, ASamplerNoEncoderCanFeedIsAWarning) {
  auto c = cluster({100}, {10}, false, 13);  // e0 on s0's GPUs
  c.pools.push_back(make_pool("s9", "a", StageKind::kSample, 50));
  auto r = simulate(c, make_jobs(3, "sd"), {});
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->warnings.empty());
  EXPECT_NE(r->warnings[0].find("sample pool s9 has no encoder on its GPUs"), std::string::npos);
  for (const auto& j : r->job_records) EXPECT_EQ(j.sample_pool, "s0");
}

TEST(Simulate, NoEncodePoolMeansZeroEncodeTime) {
  auto c = cluster({100}, {10}, true);
  auto r = simulate(c, make_jobs(1, "sd"), {});
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->makespan_s, 110);
  EXPECT_LT(r->job_records[0].encode_start_s, 0);
  EXPECT_LT(r->job_records[0].transfer_start_s, 0);  // same host: no transfer
}

TEST(Simulate, StatsUtilizationBubblesAndQueueWait) {
  // One 100 s sampler, a 40 s decoder on another host: the decoder idles between jobs.
  auto c = cluster({100}, {40}, false, 0, 8, 0);
  auto r = simulate(c, make_jobs(3, "sd"), {});
  ASSERT_TRUE(r.ok());
  const double t = 4297600.0 * 8 / 8e9;  // sd latent over 8 Gbit/s
  EXPECT_NEAR(r->makespan_s, 300 + t + 40, 1e-9);
  std::size_t dec = 0, smp = 0;
  for (std::size_t i = 0; i < r->lanes.size(); ++i) {
    if (r->lanes[i].name == "d0") dec = i;
    if (r->lanes[i].name == "s0") smp = i;
  }
  EXPECT_EQ(r->stats[dec].tasks, 3u);
  EXPECT_EQ(r->stats[dec].bubbles, 2u);
  EXPECT_NEAR(r->stats[dec].bubble_s, 120, 1e-9);
  EXPECT_NEAR(r->stats[smp].utilization, 300 / r->makespan_s, 1e-12);
  EXPECT_NEAR(r->stats[smp].queue_wait_max_s, 200, 1e-9);  // job 3 waits for two samplings
  EXPECT_EQ(r->lanes.size(), 3u);                          // s0, d0 and the link a->dec
}

TEST(Simulate, StochasticRunsAreSeededAndDifferFromTheMean) {
  auto c = cluster({100}, {10}, true);
  c.pools[0].profiles["sd"].kind = config::Profile::Kind::kNormal;
  c.pools[0].profiles["sd"].mean = 100;
  c.pools[0].profiles["sd"].sd = 10;
  SimOptions o;
  auto mean = simulate(c, make_jobs(20, "sd"), o);
  o.stochastic = true;
  o.seed = 42;
  auto a = simulate(c, make_jobs(20, "sd"), o);
  auto b = simulate(c, make_jobs(20, "sd"), o);
  ASSERT_TRUE(mean.ok() && a.ok() && b.ok());
  EXPECT_DOUBLE_EQ(mean->makespan_s, 2010);
  EXPECT_DOUBLE_EQ(a->makespan_s, b->makespan_s);
  EXPECT_NE(a->makespan_s, mean->makespan_s);
  EXPECT_NEAR(a->makespan_s, 2010, 200);
}

TEST(Simulate, CycleProfilesAndTimeScale) {
  auto c = cluster({100}, {10}, true);
  c.pools[0].profiles["sd"].kind = config::Profile::Kind::kCycle;
  c.pools[0].profiles["sd"].cycle = {50, 150};
  c.time_scale = 0.5;
  auto r = simulate(c, make_jobs(3, "sd"), {});
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->makespan_s, (50 + 150 + 50 + 10) * 0.5);
}

TEST(Simulate, MissingProfilesAreNamedErrors) {
  auto c = cluster({100}, {10}, true);
  auto r = simulate(c, make_jobs(1, "hd"), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no sample pool has a profile for job class \"hd\""),
            std::string::npos);
  EXPECT_FALSE(simulate(c, {}, {}).ok());
}

TEST(Simulate, MissingLinkIsAWarningWithTheDefault) {
  auto c = cluster({100}, {10}, false);
  c.links.clear();
  auto r = simulate(c, make_jobs(1, "sd"), {});
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->warnings.empty());
  EXPECT_NE(r->warnings[0].find("no link between a and dec"), std::string::npos);
}

TEST(Simulate, PicksTheDecodeHostThatFinishesFirst) {
  // A slow local decoder and a fast remote one: remote wins despite the transfer.
  auto c = cluster({100}, {60}, true);
  c.pools.push_back(make_pool("fast-dec", "dec", StageKind::kDecode, 10));
  auto r = simulate(c, make_jobs(1, "sd"), {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->job_records[0].decode_host, "dec");
  EXPECT_NEAR(r->makespan_s, 100 + 1.1 + 10, 0.01);
}

}  // namespace
}  // namespace h3pipe::schedule
