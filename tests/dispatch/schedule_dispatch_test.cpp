// The dispatch policy alone (dispatch.h): what an idle live worker decides before XREADGROUP.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>

#include "common/dispatch/dispatch.h"

namespace h3pipe::dispatch {
namespace {

PoolState pool(std::string name, double expected, double free_in = 0, bool alive = true) {
  return {std::move(name), expected, free_in, alive};
}

TEST(ShouldClaim, FasterIdlePoolTakesTheOnlyTask) {
  std::vector<PoolState> ps = {pool("fast", 100), pool("slow", 300)};
  EXPECT_TRUE(should_claim(Policy::kCompletionTime, "fast", ps, 1));
  EXPECT_FALSE(should_claim(Policy::kCompletionTime, "slow", ps, 1));
  EXPECT_TRUE(should_claim(Policy::kFirstFree, "slow", ps, 1));
}

TEST(ShouldClaim, SlowPoolWaitsUntilTheQueueIsLongEnough) {
  // Greedy: fast finishes at 100, 200, 300 (ties go to "fast" < "slow"), slow first at 300.
  std::vector<PoolState> ps = {pool("fast", 100), pool("slow", 300)};
  EXPECT_FALSE(should_claim(Policy::kCompletionTime, "slow", ps, 2));
  EXPECT_FALSE(should_claim(Policy::kCompletionTime, "slow", ps, 3));
  EXPECT_TRUE(should_claim(Policy::kCompletionTime, "slow", ps, 4));
}

TEST(ShouldClaim, IdlePoolDefersToABusyPoolThatFinishesSooner) {
  // The tail of a batch: the fast pool is busy for 50 s more, then needs 100 s: done at 150,
  // while the idle slow pool would finish at 300.
  std::vector<PoolState> ps = {pool("fast", 100, 50), pool("slow", 300)};
  EXPECT_FALSE(should_claim(Policy::kCompletionTime, "slow", ps, 1));
  ps[0].free_in_s = 250;  // now the busy pool would finish at 350
  EXPECT_TRUE(should_claim(Policy::kCompletionTime, "slow", ps, 1));
}

TEST(ShouldClaim, DeadOrIncapablePoolsAreIgnored) {
  std::vector<PoolState> ps = {pool("fast", 100, 0, false), pool("slow", 300),
                               pool("other", kCannotRun)};
  EXPECT_TRUE(should_claim(Policy::kCompletionTime, "slow", ps, 1));
  EXPECT_FALSE(should_claim(Policy::kCompletionTime, "other", ps, 5));
  EXPECT_FALSE(should_claim(Policy::kFirstFree, "fast", ps, 1));
  EXPECT_FALSE(should_claim(Policy::kCompletionTime, "missing", ps, 1));
  EXPECT_FALSE(should_claim(Policy::kCompletionTime, "slow", ps, 0));
  EXPECT_TRUE(should_claim_at(Policy::kCompletionTime, 1, ps, 1));  // by index: the same rule
  EXPECT_FALSE(should_claim_at(Policy::kCompletionTime, 2, ps, 5));
  EXPECT_FALSE(should_claim_at(Policy::kCompletionTime, 3, ps, 1));  // out of range
}

TEST(ShouldClaim, ExactlyOneOfEqualPoolsClaimsTheLastTask) {
  std::vector<PoolState> ps = {pool("b", 127.39), pool("a", 127.39), pool("c", 127.39)};
  int claims = 0;
  for (const auto& p : ps) claims += should_claim(Policy::kCompletionTime, p.name, ps, 1);
  EXPECT_EQ(claims, 1);
  EXPECT_TRUE(should_claim(Policy::kCompletionTime, "a", ps, 1));
  claims = 0;
  for (const auto& p : ps) claims += should_claim(Policy::kCompletionTime, p.name, ps, 2);
  EXPECT_EQ(claims, 2);
}

TEST(ShouldClaim, AgreesWithTheGreedyAssignmentOnRandomStates) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> dur(1, 400), busy(0, 300);
  std::uniform_int_distribution<int> npools(1, 6), ntasks(1, 12), coin(0, 3);
  for (int round = 0; round < 3000; ++round) {
    std::vector<PoolState> ps;
    const int n = npools(rng);
    for (int i = 0; i < n; ++i) {
      // Integers make exact ties frequent, which is where the tie rule matters.
      double e = coin(rng) == 0 ? 100 : std::round(dur(rng));
      double f = coin(rng) == 0 ? 0 : std::round(busy(rng));
      ps.push_back(pool(fmt::format("p{}", i), e, f, coin(rng) != 0 || i == 0));
    }
    const std::size_t k = ntasks(rng);
    auto assigned = assign_greedy(ps, k);
    for (std::size_t i = 0; i < ps.size(); ++i) {
      if (ps[i].free_in_s != 0) continue;  // should_claim is asked by idle pools only
      bool gets = std::find(assigned.begin(), assigned.end(), i) != assigned.end();
      ASSERT_EQ(should_claim(Policy::kCompletionTime, ps[i].name, ps, k), gets)
          << "round " << round << " pool " << ps[i].name << " k " << k;
    }
  }
}

TEST(ShouldClaim, TheRouteTailCountsInTheCompletion) {
  // Equal samplers; "a" is behind a slower way to the decoders, so "b" finishes the job first.
  std::vector<PoolState> ps = {pool("a", 100), pool("b", 100)};
  ps[0].tail_s = 1.1;
  ps[1].tail_s = 0.5;
  EXPECT_FALSE(should_claim(Policy::kCompletionTime, "a", ps, 1));
  EXPECT_TRUE(should_claim(Policy::kCompletionTime, "b", ps, 1));
  EXPECT_TRUE(should_claim(Policy::kCompletionTime, "a", ps, 2));
  std::vector<double> done;
  auto g = assign_greedy(ps, 2, &done);
  EXPECT_EQ(g[0], 1u);
  EXPECT_DOUBLE_EQ(done[0], 100.5);
  EXPECT_DOUBLE_EQ(done[1], 101.1);
}

TEST(AssignGreedy, CompletionTimesAreTheEarliestSlots) {
  std::vector<PoolState> ps = {pool("fast", 100, 50), pool("slow", 300)};
  std::vector<double> done;
  auto a = assign_greedy(ps, 3, &done);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0], 0u);
  EXPECT_DOUBLE_EQ(done[0], 150);
  EXPECT_EQ(a[1], 0u);
  EXPECT_DOUBLE_EQ(done[1], 250);
  EXPECT_EQ(a[2], 1u);
  EXPECT_DOUBLE_EQ(done[2], 300);
}

// A stage with work still upstream (should_claim with a Lookahead): samplers 279 s and 157 s on
// one host, one decoder 0.5 s away; 1 latent-to-be in the queue, 2 more arriving at 20 and 40 s.
Lookahead upstream(double decode_s) {
  Lookahead la;
  la.arrivals_in_s = {40, 20};  // any order
  la.decode_hosts = {{"dec", 0, {pool("d0", decode_s)}, 0, true}};
  la.transfer_s = {{0.5}, {0.5}};
  return la;
}

TEST(ShouldClaimUpstream, TheDecodersDecideWhichSamplerTakesTheHead) {
  // A 1 s decoder: the fast sampler takes the head (samplings end at 157, 299 and 314 s; the
  // other way round 177, 279 and 334 s).  A 48 s decoder is the bottleneck, and the second order
  // feeds it better (decodes end at 225.5, 327.5, 382.5 s against 205.5, 347.5, 395.5 s): the
  // slow sampler starts now.  The count rule over the 3 tasks lets both claim either way.
  std::vector<PoolState> ps = {pool("s0", 279), pool("s1", 157)};
  for (auto& p : ps) p.tail_s = 1.5;
  EXPECT_FALSE(should_claim(Policy::kCompletionTime, "s0", ps, 1, upstream(1)));
  EXPECT_TRUE(should_claim(Policy::kCompletionTime, "s1", ps, 1, upstream(1)));
  for (auto& p : ps) p.tail_s = 48.5;
  EXPECT_TRUE(should_claim(Policy::kCompletionTime, "s0", ps, 1, upstream(48)));
  EXPECT_FALSE(should_claim(Policy::kCompletionTime, "s1", ps, 1, upstream(48)));
  EXPECT_TRUE(should_claim(Policy::kCompletionTime, "s0", ps, 3));
  EXPECT_TRUE(should_claim(Policy::kCompletionTime, "s1", ps, 3));
  // first_free claims whenever idle; nothing queued now: nobody claims.
  EXPECT_TRUE(should_claim(Policy::kFirstFree, "s1", ps, 1, upstream(48)));
  EXPECT_FALSE(should_claim(Policy::kCompletionTime, "s0", ps, 0, upstream(48)));
  EXPECT_FALSE(should_claim(Policy::kCompletionTime, "nobody", ps, 1, upstream(48)));
}

TEST(ShouldClaimUpstream, ASlowPoolLeavesTheHeadToAFastOneFreeingBeforeTheNextArrival) {
  // fast frees in 10 s and finishes the head at 110 s; the next task arrives at 500 s.
  std::vector<PoolState> ps = {pool("fast", 100, 10), pool("slow", 300)};
  Lookahead la;
  la.arrivals_in_s = {500};
  EXPECT_FALSE(should_claim(Policy::kCompletionTime, "slow", ps, 1, la));
  la.arrivals_in_s = {5, 6};  // more work right away: the slow pool helps
  EXPECT_TRUE(should_claim(Policy::kCompletionTime, "slow", ps, 1, la));
  ps[0].alive = false;  // nobody else can run it
  la.arrivals_in_s = {500};
  EXPECT_TRUE(should_claim(Policy::kCompletionTime, "slow", ps, 1, la));
}

// Two samplers on host a (1.0 and 1.6 s), an encoder handing them a job every 0.1 s, decoders
// of 1.0 s on a and 0.8 s on b (plan_vs_run_netns.py): which sampler takes the first job decides
// nothing about the last job's end, a tie.  The count rule over the 12 tasks gives both work, so
// both claimed the head when asked, and live the one that polled first took it (the slow one in
// 4 of 6 runs; the planner asks in config order, so the plan had the fast one).  The instant is
// now modelled as the planner runs it: whichever asks, only the fast one claims.
TEST(ShouldClaimUpstream, ATieGoesToThePoolThePlannerWouldAskFirstWhicheverAsks) {
  std::vector<PoolState> ps = {pool("s-fast", 1.0), pool("s-slow", 1.6)};
  Lookahead la;
  for (int i = 1; i <= 11; ++i)
    la.arrivals_in_s.push_back(0.1 * i - 0.004);  // a few ms early, as live
  la.decode_hosts = {{"a", 0, {pool("dec-a", 1.0)}, 0, true, true},
                     {"b", 0, {pool("dec-b", 0.8)}, 0, true}};
  la.transfer_s = {{0, 0.001}, {0, 0.001}};
  EXPECT_TRUE(should_claim(Policy::kCompletionTime, "s-fast", ps, 1, la));
  EXPECT_FALSE(should_claim(Policy::kCompletionTime, "s-slow", ps, 1, la));
  // Both take one of two ready tasks.
  EXPECT_TRUE(should_claim(Policy::kCompletionTime, "s-slow", ps, 2, la));
}

// The property behind it: with k tasks ready, at most k idle pools claim, however the rollout's
// options compare (every pool models the same instant).
TEST(ShouldClaimUpstream, NoMoreIdlePoolsClaimThanTasksAreReady) {
  std::mt19937_64 rng(29);
  std::uniform_real_distribution<double> dur(0.5, 3), arrive(0, 2), busy(0, 2);
  std::uniform_int_distribution<int> coin(0, 2), ntasks(1, 3), narr(1, 12);
  for (int round = 0; round < 1500; ++round) {
    std::vector<PoolState> ps;
    for (int i = 0, n = 2 + round % 4; i < n; ++i)
      ps.push_back(pool(fmt::format("p{}", i), dur(rng), coin(rng) ? 0 : busy(rng)));
    Lookahead la;
    for (int i = 0, n = narr(rng); i < n; ++i) la.arrivals_in_s.push_back(arrive(rng));
    la.decode_hosts = {{"a", 0, {pool("d0", dur(rng))}, 0, true, true},
                       {"b", 0, {pool("d1", dur(rng))}, 0, true}};
    la.transfer_s.assign(ps.size(), {0, 0.01});
    const std::size_t k = ntasks(rng);
    std::size_t claims = 0;
    for (const auto& p : ps)
      if (p.free_in_s == 0 && should_claim(Policy::kCompletionTime, p.name, ps, k, la)) ++claims;
    ASSERT_LE(claims, k) << "round " << round;
  }
}

TEST(ShouldClaimUpstream, NoArrivalsIsTheCountRule) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> dur(1, 400), busy(0, 300), coin(0, 2), ntasks(1, 8);
  for (int round = 0; round < 2000; ++round) {
    std::vector<PoolState> ps;
    for (int i = 0, n = 1 + round % 5; i < n; ++i)
      ps.push_back(pool(fmt::format("p{}", i), dur(rng), coin(rng) ? 0 : busy(rng)));
    const std::size_t k = ntasks(rng);
    for (const auto& p : ps)
      ASSERT_EQ(should_claim(Policy::kCompletionTime, p.name, ps, k, Lookahead{}),
                should_claim(Policy::kCompletionTime, p.name, ps, k))
          << "round " << round;
  }
}

TEST(UpstreamArrivals, BusyFeedersThenTheGreedyOfTheQueuedOnes) {
  // e0 busy 10 s more (40 s per task), e1 idle (20 s); 3 queued: e1 at 20, 40, e0 at 50.
  std::vector<PoolState> feeders = {pool("e0", 40, 10), pool("e1", 20), pool("e2", 500)};
  EXPECT_EQ(upstream_arrivals(feeders, {true, true, true}, 3),
            (std::vector<double>{10, 20, 40, 50}));
  // A feeder whose output does not reach the queue (an encoder leasing its sampler's GPUs)
  // takes its greedy share, which never arrives.
  feeders[2].expected_s = 15;  // e2 at 15, e1 at 20, e2 at 30
  EXPECT_EQ(upstream_arrivals(feeders, {true, true, false}, 3), (std::vector<double>{10, 20}));
  EXPECT_EQ(upstream_arrivals(feeders, {false, false, false}, 3), std::vector<double>{});
  EXPECT_EQ(upstream_arrivals(feeders, {true, true, true}, 10000).size(), kRolloutTasks);
}

TEST(DecodeHost, EarliestExpectedCompletionWins) {
  DecodeHostState near{"near", 0, {pool("d0", 30, 20)}, 2, true};  // 20 + 30 + 30 + 30 = 110
  DecodeHostState far{"far", 5, {pool("d1", 12)}, 0, true};        // 5 + 12 = 17
  EXPECT_DOUBLE_EQ(expected_decode_completion(near), 110);
  EXPECT_DOUBLE_EQ(expected_decode_completion(far), 17);
  EXPECT_EQ(choose_decode_host({near, far}), 1u);
  far.alive = false;
  EXPECT_EQ(choose_decode_host({near, far}), 0u);
  far.alive = true;
  far.decoders[0].expected_s = kCannotRun;
  EXPECT_EQ(choose_decode_host({near, far}), 0u);
  near.decoders[0].expected_s = kCannotRun;
  EXPECT_FALSE(choose_decode_host({near, far}).has_value());
}

TEST(DecodeHost, LongQueuesUseTheSameEstimate) {
  DecodeHostState h{"h", 0, {pool("d0", 10), pool("d1", 20)}, 300, true};
  // 300 queued tasks on decoders of 10 s and 20 s: 3 tasks per 20 s, so about 2000 s of backlog.
  const double t = expected_decode_completion(h);
  EXPECT_NEAR(t, 2010, 20);
  h.queued = 256;  // the exact (heap) path
  EXPECT_NEAR(expected_decode_completion(h), 256.0 / 3 * 20 + 10, 20);
}

TEST(DecodeHost, TiesGoToTheHostHoldingTheLatentThenToConfigOrder) {
  DecodeHostState a{"a", 5, {pool("d0", 30)}, 0, true, false};    // 35
  DecodeHostState b{"b", 0, {pool("d1", 30, 5)}, 0, true, true};  // 35, the latent is here
  DecodeHostState c{"c", 5, {pool("d2", 30)}, 0, true, false};    // 35
  EXPECT_EQ(choose_decode_host({a, b, c}), 1u);
  EXPECT_EQ(choose_decode_host({a, c}), 0u);
  b.decoders[0].free_in_s = 6;  // 36: sooner wins over local
  EXPECT_EQ(choose_decode_host({a, b, c}), 0u);
}

TEST(Policy, DecodersAlwaysDecideByCompletionTime) {
  EXPECT_EQ(effective_policy(Policy::kFirstFree, config::StageKind::kDecode),
            Policy::kCompletionTime);
  EXPECT_EQ(effective_policy(Policy::kFirstFree, config::StageKind::kEncode), Policy::kFirstFree);
  EXPECT_EQ(effective_policy(Policy::kCompletionTime, config::StageKind::kEncode),
            Policy::kCompletionTime);
  EXPECT_EQ(effective_policy(Policy::kFirstFree, config::StageKind::kSample), Policy::kFirstFree);
}

TEST(Policy, NamesRoundTrip) {
  EXPECT_EQ(parse_policy("completion_time"), Policy::kCompletionTime);
  EXPECT_EQ(parse_policy("first_free"), Policy::kFirstFree);
  EXPECT_FALSE(parse_policy("fastest").has_value());
  EXPECT_STREQ(policy_name(Policy::kFirstFree), "first_free");
}

}  // namespace
}  // namespace h3pipe::dispatch
