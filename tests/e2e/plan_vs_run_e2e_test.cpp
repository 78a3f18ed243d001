// The planner predicts the real run: the local stack with the sim runtime, three sampler pools of
// different speeds and one decoder, stage times scaled down 100x (configs/topologies/
// rehearsal_3pools.json), 12 jobs; and the completion-time-aware policy beats first-free on a
// heterogeneous tail in the plan and in the measured run.  Label: e2e.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct Outcome {
  double planned_s = 0, measured_s = 0, error = 0;
  double worst_start_error = 1;
  int assignment_differences = -1;
  std::string worst_start_at;
  // With learn: `report` without --config (the stack's config, issue #34 P10) and the report of
  // the run against the config `profile learn` wrote from it (P9).
  json bare_report, learned_report;
};

Outcome plan_and_run(const json& cfg, int jobs, bool learn = false) {
  ts::TempDir dir;
  json c = cfg;
  c["state_dir"] = (dir.path() / "state").string();
  fs::path file = dir.path() / "cluster.json";
  std::ofstream(file) << c.dump(2);
  std::string cli = ts::bin("h3pipe") + " --config " + file.string();
  std::string batch;
  for (int i = 0; i < jobs; ++i)
    batch +=
        fmt::format(
            R"({{"jobId":"r{:02d}","prompt":"p {}","width":128,"height":96,"frames":25,"fps":12,"seed":{}}})",
            i, i, i) +
        "\n";
  std::ofstream(dir.path() / "b.jsonl") << batch;
  EXPECT_EQ(ts::sh(cli + " start >/dev/null 2>&1").first, 0);
  auto [rc, out] = ts::sh(cli + " run " + (dir.path() / "b.jsonl").string() + " 2>/dev/null");
  std::string run = out.substr(0, out.find('\n'));
  auto [rrc, rep] = ts::sh(cli + " report " + run + " --json");
  json bare, learned;
  if (learn) {
    const std::string state = "--state-dir " + c["state_dir"].get<std::string>();
    bare =
        json::parse(ts::sh(ts::bin("h3pipe") + " " + state + " report " + run + " --json").second,
                    nullptr, false);
    const std::string out = (dir.path() / "learned.json").string();
    auto [lrc, lout] = ts::sh(cli + " profile learn " + run + " --min-samples 1 -o " + out);
    EXPECT_EQ(lrc, 0) << lout;
    learned = json::parse(
        ts::sh(ts::bin("h3pipe") + " --config " + out + " report " + run + " --json").second,
        nullptr, false);
  }
  ts::sh(cli + " stop >/dev/null 2>&1");
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(rrc, 0) << rep;
  json r = json::parse(rep, nullptr, false);
  if (r.is_discarded()) return {};
  return {r["planned"]["makespan_s"].get<double>(),
          r["measured"]["makespan_s"].get<double>(),
          r["prediction_error"].get<double>(),
          r["worst_start_error"].get<double>(),
          r["assignment_differences"].get<int>(),
          r["worst_start_at"].get<std::string>(),
          bare,
          learned};
}

json rehearsal() {
  json c;
  std::ifstream(ts::source("configs/topologies/rehearsal_3pools.json")) >> c;
  return c;
}

}  // namespace

TEST(PlanVsRun, PredictionWithinThreePercentOnThreeHeterogeneousPools) {
  auto o = plan_and_run(rehearsal(), 12, true);
  ASSERT_GT(o.measured_s, 0);
  EXPECT_LE(std::abs(o.planned_s - o.measured_s) / o.measured_s, 0.03)
      << "planned " << o.planned_s << " s, measured " << o.measured_s << " s";
  // The plan is the ideal pipelined schedule of this topology; the run may not be much slower.
  EXPECT_LE(o.measured_s / o.planned_s, 1.03);
  // Without --config, report plans with the config the stack runs and names the class from it
  // (issue #34 P10: it planned nothing and named every job "default").
  ASSERT_TRUE(o.bare_report.is_object()) << o.bare_report;
  ASSERT_TRUE(o.bare_report.contains("planned")) << o.bare_report.dump();
  EXPECT_NEAR(o.bare_report["planned"]["makespan_s"].get<double>(), o.planned_s, 1e-6);
  for (const auto& p : o.bare_report["pools"])
    EXPECT_TRUE(p["classes"].contains("small")) << p.dump();
  // The profiles learned from this run at time_scale 0.01 plan it again (issue #34 P9: the
  // learned config planned 1/100 of the stage times).
  ASSERT_TRUE(o.learned_report.is_object()) << o.learned_report;
  EXPECT_LE(std::abs(o.learned_report["prediction_error"].get<double>()), 0.05)
      << o.learned_report["planned"].dump() << " against " << o.learned_report["measured"].dump();
}

TEST(PlanVsRun, CompletionTimeBeatsFirstFreeOnAHeterogeneousTail) {
  // Two jobs, a 1 s and a 3 s pool: first-free gives the second job to the slow pool (3+ s),
  // completion-time keeps both on the fast one (about 2 s).
  json c = rehearsal();
  c["pools"] = json::parse(R"([
    {"name": "enc", "host": "local", "stage": "encode", "profiles": {"small": {"kind": "fixed", "seconds": 1}}},
    {"name": "fast", "host": "local", "stage": "sample", "profiles": {"small": {"kind": "fixed", "seconds": 100}}},
    {"name": "slow", "host": "local", "stage": "sample", "profiles": {"small": {"kind": "fixed", "seconds": 300}}},
    {"name": "dec", "host": "local", "stage": "decode", "profiles": {"small": {"kind": "fixed", "seconds": 5}}}])");
  c["dispatch"] = "completion_time";
  auto ct = plan_and_run(c, 2);
  c["dispatch"] = "first_free";
  auto ff = plan_and_run(c, 2);
  ASSERT_GT(ct.measured_s, 0);
  ASSERT_GT(ff.measured_s, 0);
  EXPECT_LT(ct.planned_s, ff.planned_s);
  EXPECT_LT(ct.measured_s, ff.measured_s)
      << "completion-time " << ct.measured_s << " s vs first-free " << ff.measured_s << " s";
  // A 2-second run: the 0.1-0.3 s of submission and claim overhead is a large share of it, so
  // the bound here is loose; the 12-job test above holds the 3 % prediction bound.
  EXPECT_LE(std::abs(ct.error), 0.20) << ct.planned_s << " planned, measured " << ct.measured_s;
  EXPECT_LE(std::abs(ff.error), 0.20) << ff.planned_s << " planned, measured " << ff.measured_s;
}

// A seed topology with GPU groups (two T10 boxes, each an encoder on its sampler's GPUs, one
// 3080 Ti decoder), its hosts folded onto the local one: the GPU group lease, the group keeping
// its job through sampling and the dispatch at every stage, against the plan of the same jobs.
TEST(PlanVsRun, TwoGpuGroupsAndASharedDecoderRunAsPlanned) {
  json c;
  std::ifstream(ts::source("configs/topologies/four_four_plus_one.json")) >> c;
  // 1/40 of the seeds' times (a 13 s sample takes 0.33 s): the stack's own polling and commit
  // overhead (tens of ms per stage) stays well inside the bounds on a loaded 2-core machine.
  c["time_scale"] = 0.025;
  c["hosts"] = json::parse(R"([{"name": "local"}])");
  c.erase("links");
  c["redis"] = {{"embedded", true}};
  for (auto& p : c["pools"]) {
    p["host"] = "local";
    p.erase("gpus");
  }
  // Jobs of class sd (the plan's profiles), small frames (the sim runtime's MP4s stay cheap).
  for (auto& p : c["pools"])
    if (p["profiles"].contains("sd")) p["profiles"]["default"] = p["profiles"]["sd"];
  auto o = plan_and_run(c, 6);
  ASSERT_GT(o.measured_s, 0);
  EXPECT_LE(std::abs(o.planned_s - o.measured_s) / o.planned_s, 0.02)
      << "planned " << o.planned_s << " s, measured " << o.measured_s << " s";
  EXPECT_LE(o.worst_start_error, 0.03) << o.worst_start_at;
  EXPECT_EQ(o.assignment_differences, 0);
}
