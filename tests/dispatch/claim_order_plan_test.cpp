// The planner takes its queues in the claim order (docs/design.md, "The claim order"; issue
// #39): schedule::simulate picks with dispatch::pick and charges with dispatch::charge, the C++
// twin of the Lua every live claim runs (claim_order_redis_test holds the two equal).  The live
// scenarios of shared_fleet_e2e_test, planned: one pool per stage (encode 20 ms, sample 300 ms,
// decode 20 ms).  Label: unit.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/config/config.h"
#include "common/schedule/simulate.h"

namespace h3pipe {
namespace {

config::Cluster fleet() {
  auto pool = [](const char* name, const char* stage, double s) {
    return nlohmann::json{{"name", name},
                          {"host", "local"},
                          {"stage", stage},
                          {"profiles", {{"default", {{"kind", "fixed"}, {"seconds", s}}}}}};
  };
  nlohmann::json j = {
      {"name", "fleet"},
      {"hosts", {{{"name", "local"}}}},
      {"pools",
       {pool("enc", "encode", 0.02), pool("s0", "sample", 0.3), pool("dec", "decode", 0.02)}}};
  auto c = config::parse(j, ".");
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
  return c.ok() ? *c : config::Cluster{};
}

std::vector<schedule::SimJob> batch(const std::string& prefix, int n, double at,
                                    const std::string& user, long long priority = 0) {
  std::vector<schedule::SimJob> v;
  for (int i = 0; i < n; ++i)
    v.push_back({prefix + std::to_string(i), "default", at, priority, user});
  return v;
}

std::vector<double> sample_starts(const schedule::SimResult& r, const std::string& prefix) {
  std::vector<double> out;
  for (const auto& j : r.job_records)
    if (j.id.rfind(prefix, 0) == 0) out.push_back(j.sample_start_s);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ClaimOrderPlan, TheLaterUserIsServedByFairShare) {
  const auto c = fleet();
  auto jobs = batch("a", 30, 0, "A");
  auto b = batch("b", 4, 1.0, "B");
  jobs.insert(jobs.end(), b.begin(), b.end());
  auto r = schedule::simulate(c, jobs, {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto a_s = sample_starts(*r, "a"), b_s = sample_starts(*r, "b");
  ASSERT_EQ(a_s.size(), 30u);
  ASSERT_EQ(b_s.size(), 4u);
  EXPECT_LT(b_s[3], a_s[11]);
  // One user for all: first come, first served, B's 4th after A's 30th.
  for (auto& j : jobs) j.user = "A";
  auto f = schedule::simulate(c, jobs, {});
  ASSERT_TRUE(f.ok());
  EXPECT_GT(sample_starts(*f, "b")[3], sample_starts(*f, "a")[29]);
}

TEST(ClaimOrderPlan, APriorityJobBehindFiftyStartsWithinOneSampleTime) {
  const auto c = fleet();
  auto jobs = batch("q", 50, 0, "ops");
  auto hot = batch("hot", 1, 2.0, "ops", 5);
  jobs.insert(jobs.end(), hot.begin(), hot.end());
  auto r = schedule::simulate(c, jobs, {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& h = r->job_records.back();
  ASSERT_EQ(h.id, "hot0");
  EXPECT_LE(h.sample_start_s - h.encode_end_s, 0.3 + 1e-9);
  EXPECT_LT(h.sample_start_s, 3.0);
}

}  // namespace
}  // namespace h3pipe
