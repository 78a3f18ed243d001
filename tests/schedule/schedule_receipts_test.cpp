// profile learn and report, fed with receipts in the proto3 JSON form of h3pipe.pb.Receipt.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "common/schedule/plan.h"
#include "common/schedule/receipts.h"

namespace h3pipe::schedule {
namespace fs = std::filesystem;
namespace {

const std::string kTopo =
    std::string(H3PIPE_SOURCE_DIR) + "/configs/topologies/two_host_4xT10_3080ti.json";
constexpr double kT0 = 1.7e12;  // unix ms of the run's start

fs::path temp_dir() {
  auto d = fs::temp_directory_path() /
           fmt::format("h3pipe_receipts_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Receipts as the workers would write them for a run that went exactly like `sim`, with
// optional noise on every stage.
std::vector<nlohmann::json> receipts_from(const SimResult& sim, bool snake_case = false,
                                          double noise_s = 0) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> n(0, noise_s > 0 ? noise_s : 1);
  auto ms = [&](double s) -> nlohmann::json {
    const auto v = static_cast<long long>(kT0 + s * 1000);
    return snake_case ? nlohmann::json(v)
                      : nlohmann::json(std::to_string(v));  // proto3 JSON: int64 as string
  };
  std::vector<nlohmann::json> out;
  for (const auto& j : sim.job_records) {
    nlohmann::json r;
    r[snake_case ? "job_id" : "jobId"] = j.id;
    r[snake_case ? "run_id" : "runId"] = "run-1";
    r["spec"] = {{"width", 416}, {"height", 736}, {"frames", 124}, {"steps", 6}, {"fps", 24}};
    auto stage = [&](const char* name, int num, const std::string& host, const std::string& pool,
                     double s, double e) {
      const double d = noise_s > 0 ? n(rng) : 0;
      nlohmann::json st = {{"stage", snake_case ? nlohmann::json(num) : nlohmann::json(name)},
                           {"host", host},
                           {"pool", pool}};
      st[snake_case ? "start_unix_ms" : "startUnixMs"] = ms(s);
      st[snake_case ? "end_unix_ms" : "endUnixMs"] = ms(e + d);
      r["stages"].push_back(st);
    };
    stage("STAGE_ENCODE", 1, "node-292", j.encode_pool, j.encode_start_s, j.encode_end_s);
    stage("STAGE_SAMPLE", 2, "node-292", j.sample_pool, j.sample_start_s, j.sample_end_s);
    if (j.transfer_start_s >= 0)
      stage("STAGE_TRANSFER", 3, "node-292", "", j.transfer_start_s, j.transfer_end_s);
    stage("STAGE_DECODE", 4, "node-241", j.decode_pool, j.decode_start_s, j.decode_end_s);
    out.push_back(r);
  }
  return out;
}

SimResult planned(std::uint32_t jobs) {
  auto p = plan_file(kTopo, "sd", jobs, "", false, 1);
  EXPECT_TRUE(p.ok());
  return p->sim;
}

TEST(Receipts, ParsesBothJsonNamingsAndResolvesClasses) {
  auto cluster = config::load_file(kTopo);
  ASSERT_TRUE(cluster.ok());
  for (bool snake : {false, true}) {
    std::vector<std::string> warnings;
    auto stages = parse_receipts(receipts_from(planned(2), snake), &cluster.value(), warnings);
    EXPECT_TRUE(warnings.empty());
    ASSERT_EQ(stages.size(), 8u);
    EXPECT_EQ(stages[0].job_class, "sd");
    EXPECT_EQ(stages[2].stage, "transfer");
    EXPECT_EQ(stages[2].pool, "node-292->node-241");
    EXPECT_NEAR(stages[1].end_s - stages[1].start_s, 127.39, 0.002);
  }
  std::vector<std::string> warnings;
  auto stages = parse_receipts(
      {nlohmann::json::object(), {{"jobId", "x"}, {"stages", {{{"stage", "STAGE_SAMPLE"}}}}}},
      nullptr, warnings);
  EXPECT_TRUE(stages.empty());
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[1].find("receipt 1 (x): stages/0"), std::string::npos) << warnings[1];
}

TEST(ProfileLearn, FitsMeanAndSdPerPoolAndClass) {
  auto cluster = config::load_file(kTopo);
  std::vector<std::string> warnings;
  auto stages = parse_receipts(receipts_from(planned(40), false, 2.0), &cluster.value(), warnings);
  auto learned = learn_profiles(stages);
  ASSERT_TRUE(learned.count("t10x4-sample"));
  const auto& s = learned["t10x4-sample"]["sd"];
  EXPECT_EQ(s.n, 40u);
  EXPECT_NEAR(s.mean, 127.39, 1.0);
  EXPECT_NEAR(s.sd, 2.0, 0.7);
  EXPECT_FALSE(learned.count("node-292->node-241"));  // transfers are not pool profiles
}

TEST(ProfileLearn, WritesAConfigThatPlansTheSame) {
  const auto dir = temp_dir();
  ProfileLearnArgs a;
  a.receipts = receipts_from(planned(6));
  a.config = kTopo;
  a.output = (dir / "learned.json").string();
  a.json = true;
  std::ostringstream out, err;
  ASSERT_EQ(run_profile_learn(a, out, err), 0) << err.str();
  auto j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["updated"].size(), 3u);
  EXPECT_NEAR(j["profiles"]["3080ti-decode"]["sd"]["mean"].get<double>(), 11.8, 0.002);
  auto learned = config::load_file(a.output);
  ASSERT_TRUE(learned.ok()) << learned.error().message;
  const auto& prof = learned->find_pool("t10x4-sample")->profiles.at("sd");
  EXPECT_EQ(prof.kind, config::Profile::Kind::kNormal);
  auto p = plan_file(a.output, "sd", 2, "", false, 1);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->sim.makespan_s, planned(2).makespan_s, 0.01);
  fs::remove_all(dir);

  ProfileLearnArgs bad;
  bad.output = "x.json";
  std::ostringstream o2, e2;
  EXPECT_EQ(run_profile_learn(bad, o2, e2), 2);
}

// A rehearsal at time_scale 0.01 measures 1/100 of every profile: the learned profiles are in the
// config's own seconds again (measured / time_scale) and the learned config keeps its time_scale,
// so it plans what was measured (issue #34 P9: it planned 6.98 s for a measured 42.95 s).
TEST(ProfileLearn, ARehearsalAtTimeScaleIsLearnedInTheConfigsOwnSeconds) {
  const auto dir = temp_dir();
  nlohmann::json topo;
  std::ifstream(kTopo) >> topo;
  topo["time_scale"] = 0.01;
  const std::string scaled = (dir / "rehearsal.json").string();
  std::ofstream(scaled) << topo.dump(2);
  auto run = plan_file(scaled, "sd", 6, "", false, 1);  // the run as it went, at 1/100
  ASSERT_TRUE(run.ok()) << run.error().message;
  ProfileLearnArgs a;
  a.receipts = receipts_from(run->sim);
  a.config = scaled;
  a.output = (dir / "learned.json").string();
  a.min_samples = 1;
  a.json = true;
  std::ostringstream out, err;
  ASSERT_EQ(run_profile_learn(a, out, err), 0) << err.str();
  auto j = nlohmann::json::parse(out.str());
  EXPECT_DOUBLE_EQ(j["time_scale"].get<double>(), 0.01);
  EXPECT_NEAR(j["profiles"]["t10x4-sample"]["sd"]["mean"].get<double>(), 127.39, 0.2);
  auto learned = config::load_file(a.output);
  ASSERT_TRUE(learned.ok()) << learned.error().message;
  EXPECT_DOUBLE_EQ(learned->time_scale, 0.01);
  EXPECT_NEAR(learned->find_pool("t10x4-sample")->profiles.at("sd").mean, 127.39, 0.2);
  // The learned config plans the measured makespan.
  auto again = plan_file(a.output, "sd", 6, "", false, 1);
  ASSERT_TRUE(again.ok()) << again.error().message;
  ASSERT_GT(run->sim.makespan_s, 0);
  EXPECT_NEAR(again->sim.makespan_s / run->sim.makespan_s, 1.0, 0.01)
      << "planned " << again->sim.makespan_s << " s for a measured " << run->sim.makespan_s << " s";
  fs::remove_all(dir);
}

// Without --config, -o updates the text the CLI hands over (the embedded default's, or the
// running stack's config file): `profile learn RUN -o learned.json` on the demo stack once
// answered only "-o needs --config".
TEST(ProfileLearn, WritesTheGivenConfigTextWhenNoFileIsNamed) {
  const auto dir = temp_dir();
  std::ifstream in(kTopo);
  std::stringstream text;
  text << in.rdbuf();
  ProfileLearnArgs a;
  a.receipts = receipts_from(planned(6));
  a.config_text = text.str();
  a.config_name = "the test's config text";
  a.output = (dir / "learned.json").string();
  a.json = true;
  std::ostringstream out, err;
  ASSERT_EQ(run_profile_learn(a, out, err), 0) << err.str();
  EXPECT_EQ(nlohmann::json::parse(out.str())["updated"].size(), 3u);
  auto learned = config::load_file(a.output);
  ASSERT_TRUE(learned.ok()) << learned.error().message;
  EXPECT_EQ(learned->find_pool("t10x4-sample")->profiles.at("sd").kind,
            config::Profile::Kind::kNormal);
  fs::remove_all(dir);
}

TEST(Report, PlanVersusActualAndMeasuredGantt) {
  const auto dir = temp_dir();
  ReportArgs a;
  a.receipts = receipts_from(planned(4));
  a.config = kTopo;
  a.svg = (dir / "measured.svg").string();
  a.plan_svg = (dir / "plan.svg").string();
  a.json = true;
  std::ostringstream out, err;
  ASSERT_EQ(run_report(a, out, err), 0) << err.str();
  auto j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["jobs"], 4);
  EXPECT_NEAR(j["measured"]["makespan_s"].get<double>(), planned(4).makespan_s, 0.01);
  EXPECT_NEAR(j["prediction_error"].get<double>(), 0, 1e-4);
  EXPECT_TRUE(fs::exists(a.svg));
  EXPECT_TRUE(fs::exists(a.plan_svg));
  std::vector<std::string> w;
  auto chart = gantt_from_receipts(parse_receipts(a.receipts, nullptr, w), "m");
  EXPECT_EQ(chart.rows.size(), 4u);  // encoder, sampler, link, decoder
  EXPECT_EQ(chart.bars.size(), 16u);
  EXPECT_DOUBLE_EQ(chart.bars[0].start_s, 0);

  // A slower real run shows up as a negative prediction error.
  for (auto& r : a.receipts)
    for (auto& s : r["stages"])
      if (s["stage"] == "STAGE_DECODE") {
        const long long e = std::stoll(s["endUnixMs"].get<std::string>());
        s["endUnixMs"] = std::to_string(e + 10000);
      }
  a.json = false;
  a.svg.clear();
  a.plan_svg.clear();
  std::ostringstream text, e2;
  ASSERT_EQ(run_report(a, text, e2), 0);
  EXPECT_NE(text.str().find("error -"), std::string::npos) << text.str();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace h3pipe::schedule
