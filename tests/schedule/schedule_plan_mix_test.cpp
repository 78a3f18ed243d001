// The planner's latency per user and per priority (issue #39 item 5; docs/planner.md, "A mix of
// users and priorities"): cases small enough to schedule by hand with the claim order of
// docs/design.md, each figure checked against that hand schedule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/schedule/plan.h"
#include "common/schedule/plan_mix.h"
#include "common/schedule/receipts.h"

namespace h3pipe::schedule {
namespace {

// One host; encode and decode take no time, the one sampler 1 s a job: the sampler's order is
// the whole schedule, and a job's latency is its sampling's end minus its submission.
config::Cluster one_sampler() {
  const auto fixed = [](double s) { return nlohmann::json{{"kind", "fixed"}, {"seconds", s}}; };
  const nlohmann::json j = {
      {"name", "mix"},
      {"hosts", {{{"name", "h"}}}},
      {"pools",
       {{{"name", "enc"},
         {"host", "h"},
         {"stage", "encode"},
         {"profiles", {{"default", fixed(0)}}}},
        {{"name", "s"}, {"host", "h"}, {"stage", "sample"}, {"profiles", {{"default", fixed(1)}}}},
        {{"name", "dec"},
         {"host", "h"},
         {"stage", "decode"},
         {"profiles", {{"default", fixed(0)}}}}}}};
  auto c = config::parse(j, ".");
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
  return *c;
}

PlanResult plan_mix(const std::string& mix) {
  JobSource src;
  src.mix = mix;
  auto c = one_sampler();
  auto jobs = jobs_from(src, c, "");
  EXPECT_TRUE(jobs.ok()) << (jobs.ok() ? "" : jobs.error().message);
  auto p = plan_cluster(c, *jobs, SimOptions{});
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
  return *p;
}

TEST(PlanMix, NearestRankPercentiles) {
  // 1..20: p50 is the 10th, p95 the 19th smallest.
  std::vector<double> v;
  for (int i = 20; i >= 1; --i) v.push_back(i);
  auto s = latency_stats(v);
  EXPECT_EQ(s.jobs, 20u);
  EXPECT_DOUBLE_EQ(s.p50_s, 10);
  EXPECT_DOUBLE_EQ(s.p95_s, 19);
  EXPECT_DOUBLE_EQ(s.mean_s, 10.5);
  EXPECT_DOUBLE_EQ(s.max_s, 20);
  EXPECT_DOUBLE_EQ(latency_stats({7}).p95_s, 7);
}

TEST(PlanMix, ProfileLearnFitsP50AndP95PerStage) {
  // Sampling times 1..20 s: p50 the 10th, p95 the 19th; decode 0.5 s each.
  std::vector<MeasuredStage> st;
  for (int i = 0; i < 20; ++i) {
    MeasuredStage m;
    m.stage = "sample", m.pool = "s", m.job_class = "c";
    m.start_s = 100.0 * i, m.end_s = 100.0 * i + (20 - i);
    st.push_back(m);
    m.stage = "decode", m.pool = "d";
    m.start_s = m.end_s, m.end_s = m.start_s + 0.5;
    st.push_back(m);
  }
  auto learned = learn_profiles(st);
  EXPECT_DOUBLE_EQ(learned["s"]["c"].p50, 10);
  EXPECT_DOUBLE_EQ(learned["s"]["c"].p95, 19);
  EXPECT_DOUBLE_EQ(learned["d"]["c"].p95, 0.5);
}

TEST(PlanMix, FairShareBetweenTwoUsersByHand) {
  // A submits 4 jobs at 0, B 2 at 0.5, equal weights.  A1 samples 0-1; at 1 B has the least
  // virtual time (0 against A's 1 s): B1 1-2; a tie at 2 goes to stream order: A2 2-3; B2 3-4
  // (B 1 s behind A); A3 4-5, A4 5-6.  A: 1, 3, 5, 6 s; B: 1.5, 3.5 s.
  const auto p = plan_mix("A:4,B:2@0.5");
  ASSERT_TRUE(p.mix);
  EXPECT_DOUBLE_EQ(p.sim.makespan_s, 6);
  const auto& a = p.mix->by_user.at("A");
  const auto& b = p.mix->by_user.at("B");
  EXPECT_EQ(a.jobs, 4u);
  EXPECT_DOUBLE_EQ(a.p50_s, 3);  // 2nd of 4
  EXPECT_DOUBLE_EQ(a.p95_s, 6);  // 4th of 4
  EXPECT_DOUBLE_EQ(b.p50_s, 1.5);
  EXPECT_DOUBLE_EQ(b.p95_s, 3.5);
  // First come, first served (one user) would have given B 4.5 and 5.5 s.
  EXPECT_EQ(p.mix->by_priority.size(), 1u);
  EXPECT_DOUBLE_EQ(p.mix->all.p95_s, 6);  // 6th of 6
}

TEST(PlanMix, APriorityJobIsServedNextByHand) {
  // A: 9 jobs of priority 0 at 0; B: 1 of priority 5 at 0.5.  A1 0-1, B1 1-2, A2..A9 2-10.
  const auto p = plan_mix("A:9,B:1:5@0.5");
  ASSERT_TRUE(p.mix);
  EXPECT_DOUBLE_EQ(p.sim.makespan_s, 10);
  const auto& lo = p.mix->by_priority.at(0);  // 1, 3, 4, ..., 10
  EXPECT_EQ(lo.jobs, 9u);
  EXPECT_DOUBLE_EQ(lo.p50_s, 6);   // 5th of 9
  EXPECT_DOUBLE_EQ(lo.p95_s, 10);  // 9th of 9
  const auto& hi = p.mix->by_priority.at(5);
  EXPECT_EQ(hi.jobs, 1u);
  EXPECT_DOUBLE_EQ(hi.p95_s, 1.5);
  EXPECT_DOUBLE_EQ(p.mix->by_user.at("B").p50_s, 1.5);
  EXPECT_DOUBLE_EQ(p.mix->all.p50_s, 5);  // 5th of 1, 1.5, 3, 4, 5, ...
}

TEST(PlanMix, RunPlanPrintsAndWritesTheFigures) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("h3_plan_mix_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto cfg = (dir / "c.json").string();
  const auto fixed = [](double s) { return nlohmann::json{{"kind", "fixed"}, {"seconds", s}}; };
  std::ofstream(cfg) << nlohmann::json{
      {"name", "mix"},
      {"hosts", {{{"name", "h"}}}},
      {"pools",
       {{{"name", "enc"},
         {"host", "h"},
         {"stage", "encode"},
         {"profiles", {{"default", fixed(0)}}}},
        {{"name", "s"}, {"host", "h"}, {"stage", "sample"}, {"profiles", {{"default", fixed(1)}}}},
        {{"name", "dec"},
         {"host", "h"},
         {"stage", "decode"},
         {"profiles",
          {{"default",
            fixed(0)}}}}}}}.dump();
  // The same mix as a batch of two files (users and priorities per line, as `h3pipe run` reads).
  const auto a = (dir / "a.jsonl").string(), b = (dir / "b.jsonl").string();
  {
    std::ofstream fa(a), fb(b);
    for (int i = 1; i <= 4; ++i)
      fa << "{\"jobId\": \"a" << i << "\", \"prompt\": \"x\", \"user\": \"A\"}\n";
    for (int i = 1; i <= 2; ++i) fb << "{\"jobId\": \"b" << i << "\", \"prompt\": \"x\"}\n";
  }
  PlanArgs args;
  args.config = cfg;
  args.json = true;
  args.source.batches = {a, b + "@0.5"};
  args.source.user = "B";  // the lines of b.jsonl have no user
  std::ostringstream out, err;
  ASSERT_EQ(run_plan(args, out, err), 0) << err.str();
  const auto j = nlohmann::json::parse(out.str());
  EXPECT_DOUBLE_EQ(j["makespan_s"].get<double>(), 6);
  EXPECT_DOUBLE_EQ(j["latency"]["by_user"]["A"]["p95_s"].get<double>(), 6);
  EXPECT_DOUBLE_EQ(j["latency"]["by_user"]["B"]["p95_s"].get<double>(), 3.5);
  EXPECT_DOUBLE_EQ(j["latency"]["by_priority"]["0"]["p50_s"].get<double>(), 3);

  args.json = false;
  std::ostringstream text;
  ASSERT_EQ(run_plan(args, text, err), 0) << err.str();
  EXPECT_NE(text.str().find("user B"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("priority 0"), std::string::npos) << text.str();

  // Bad input: the entry and what was expected; exit 2.
  args.source = {};
  args.source.mix = "A:0";
  std::ostringstream none, bad;
  EXPECT_EQ(run_plan(args, none, bad), 2);
  EXPECT_NE(bad.str().find("--mix entry \"A:0\": expected USER:JOBS"), std::string::npos)
      << bad.str();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace h3pipe::schedule
