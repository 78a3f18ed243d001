// A video's progress and ETA from its run's events (#37): stage shares from the pools' profiles,
// the sampler filled by its steps, never decreasing (a retry starting over), 100 only when
// completed, ETA from the plan and the running stage's measured step rate.
#include <gtest/gtest.h>

#include "common/api/progress.h"

using namespace h3pipe;
namespace ev = queue::events;

namespace {

ev::Event E(std::string_view type, std::string stage, long long ts, long long k = 0,
            long long n = 0) {
  ev::Event e;
  e.type = std::string(type);
  e.job = "video";
  e.stage = std::move(stage);
  e.ts_ms = ts;
  e.host = "h1";
  e.pool = "p-" + e.stage;
  e.attempt = "1";
  if (n > 0) e.step = std::to_string(k), e.steps = std::to_string(n);
  return e;
}

config::Cluster cluster() {
  config::Cluster c;
  auto pool = [&](std::string name, config::StageKind k, double s) {
    config::Pool p;
    p.name = std::move(name);
    p.stage = k;
    p.profiles["default"] = config::Profile{config::Profile::Kind::kFixed, s};
    c.pools.push_back(p);
  };
  pool("enc", config::StageKind::kEncode, 1);
  pool("s1", config::StageKind::kSample, 6);
  pool("s2", config::StageKind::kSample, 10);  // the mean of the sample pools: 8
  pool("dec", config::StageKind::kDecode, 1);
  return c;
}

}  // namespace

TEST(VideoProgress, StageWeightsComeFromThePoolsProfiles) {
  auto plan = api::plan_for(cluster(), "default");
  EXPECT_DOUBLE_EQ(plan.encode_s, 1);
  EXPECT_DOUBLE_EQ(plan.sample_s, 8);
  EXPECT_DOUBLE_EQ(plan.transfer_s, 0);
  EXPECT_DOUBLE_EQ(plan.decode_s, 1);
  auto none = api::plan_for(config::Cluster{}, "default");
  EXPECT_DOUBLE_EQ(none.total(), 100);  // fixed shares stand in
}

TEST(VideoProgress, StepsFillTheSamplerShareAndARetryNeverTakesItBack) {
  const auto plan = api::plan_for(cluster(), "default");  // 1 + 8 + 0 + 1 = 10 s
  std::vector<ev::Event> es = {E(ev::kQueued, "", 0), E(ev::kStageStarted, "encode", 1000),
                               E(ev::kStageFinished, "encode", 2000),
                               E(ev::kStageStarted, "sample", 2000)};
  auto p = api::job_progress(es, "video", plan, 2000);
  EXPECT_EQ(p.percent, 10);
  EXPECT_EQ(p.stage, "sample");
  EXPECT_EQ(p.pool, "p-sample");
  es.push_back(E(ev::kStep, "sample", 4000, 2, 8));  // 1 s per step measured
  p = api::job_progress(es, "video", plan, 4000);
  EXPECT_EQ(p.percent, 30);  // 1 + 8 * 2/8
  EXPECT_EQ(p.step, 2);
  EXPECT_EQ(p.steps, 8);
  ASSERT_TRUE(p.eta_s);
  EXPECT_DOUBLE_EQ(*p.eta_s, 7.0);  // 6 steps at 1 s + decode's 1 s
  // The sampler's worker died; attempt 2 starts sampling over: the progress stays.
  es.push_back(E(ev::kStageStarted, "sample", 9000));
  es.back().attempt = "2";
  es.push_back(E(ev::kStep, "sample", 9500, 1, 8));
  es.back().attempt = "2";
  p = api::job_progress(es, "video", plan, 9500);
  EXPECT_EQ(p.percent, 30);
  EXPECT_EQ(p.attempt, "2");
  // Another job's events in the same run do not count.
  auto other = E(ev::kCompleted, "decode", 9600);
  other.job = "other";
  es.push_back(other);
  EXPECT_EQ(api::job_progress(es, "video", plan, 9600).percent, 30);
  es.push_back(E(ev::kStageFinished, "sample", 12000));
  es.push_back(E(ev::kStageStarted, "decode", 12000));
  p = api::job_progress(es, "video", plan, 12000);
  EXPECT_EQ(p.percent, 90);
  EXPECT_LT(p.percent, 100);
  es.push_back(E(ev::kStageFinished, "decode", 13000));
  EXPECT_EQ(api::job_progress(es, "video", plan, 13000).percent, 99);  // not completed yet
  es.push_back(E(ev::kCompleted, "decode", 13000));
  p = api::job_progress(es, "video", plan, 13000);
  EXPECT_EQ(p.percent, 100);
  EXPECT_EQ(p.eta_s, 0.0);
}

TEST(VideoProgress, AFailedVideoKeepsItsProgressAndHasNoEta) {
  const auto plan = api::plan_for(cluster(), "default");
  std::vector<ev::Event> es = {E(ev::kStageStarted, "sample", 0), E(ev::kStep, "sample", 10, 4, 8),
                               E(ev::kFailed, "sample", 20)};
  auto p = api::job_progress(es, "video", plan, 20);
  EXPECT_EQ(p.percent, 50);  // 1 + 8 * 4/8 of 10 s
  EXPECT_TRUE(p.terminal);
  EXPECT_FALSE(p.eta_s);
}
