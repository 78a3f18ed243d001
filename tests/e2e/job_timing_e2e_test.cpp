// `h3pipe report RUN_ID --json` against the receipts of a run with known stage times (issue #24):
// the local stack with the sim runtime (encode 50 ms, sample 300 ms, decode 100 ms, fixed), 8
// jobs submitted at once.  Every per-job figure of the report is checked against the receipt's
// own fields, and against the stage times the profiles fix; the sampler's duty cycle, the steady
// rate and the planner's figures beside them.  Label: e2e.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

double num(const json& o, const char* k) {
  if (!o.contains(k)) return 0;
  const auto& v = o[k];
  return v.is_string() ? std::stod(v.get<std::string>()) : v.get<double>();
}

const json* stage_of(const json& receipt, const std::string& name) {
  static const std::map<std::string, std::string> kProto = {{"encode", "STAGE_ENCODE"},
                                                            {"sample", "STAGE_SAMPLE"},
                                                            {"transfer", "STAGE_TRANSFER"},
                                                            {"decode", "STAGE_DECODE"}};
  for (const auto& s : receipt["stages"])
    if (s["stage"] == kProto.at(name)) return &s;
  return nullptr;
}

}  // namespace

TEST(JobTiming, ReportMatchesTheReceiptsOfAKnownRun) {
  constexpr int kJobs = 8;
  constexpr double kEnc = 0.05, kSample = 0.3, kDec = 0.1;
  ts::TempDir dir;
  json c = json::parse(R"({"name": "timing", "hosts": [{"name": "local"}],
    "queue": {"lease_ms": 3000, "renew_ms": 500, "sweep_ms": 500, "block_ms": 100}})");
  c["state_dir"] = (dir.path() / "state").string();
  c["pools"] =
      json::array({{{"name", "enc"},
                    {"host", "local"},
                    {"stage", "encode"},
                    {"profiles", {{"default", {{"kind", "fixed"}, {"seconds", kEnc}}}}}},
                   {{"name", "s0"},
                    {"host", "local"},
                    {"stage", "sample"},
                    {"profiles", {{"default", {{"kind", "fixed"}, {"seconds", kSample}}}}}},
                   {{"name", "dec"},
                    {"host", "local"},
                    {"stage", "decode"},
                    {"profiles", {{"default", {{"kind", "fixed"}, {"seconds", kDec}}}}}}});
  const fs::path file = dir.path() / "cluster.json";
  std::ofstream(file) << c.dump(2);
  const std::string cli = ts::bin("h3pipe") + " --config " + file.string();
  std::string batch;
  for (int i = 0; i < kJobs; ++i)
    batch +=
        fmt::format(
            R"({{"jobId":"t{:02d}","prompt":"p {}","width":64,"height":64,"frames":24,"fps":12,"seed":{}}})",
            i, i, i) +
        "\n";
  std::ofstream(dir.path() / "b.jsonl") << batch;
  ASSERT_EQ(ts::sh(cli + " start >/dev/null 2>&1").first, 0);
  auto [rc, out] = ts::sh(cli + " run " + (dir.path() / "b.jsonl").string() + " 2>/dev/null");
  const std::string run = out.substr(0, out.find('\n'));
  auto [rrc, rep] = ts::sh(cli + " report " + run + " --json");
  auto [trc, text] = ts::sh(cli + " report " + run);
  ts::sh(cli + " stop >/dev/null 2>&1");
  ASSERT_EQ(rc, 0) << out;
  ASSERT_EQ(rrc, 0) << rep;
  ASSERT_EQ(trc, 0) << text;
  EXPECT_NE(text.find("duty cycle"), std::string::npos) << text;
  json r = json::parse(rep.substr(rep.find('{')));

  std::map<std::string, json> receipts;
  for (const auto& e : fs::directory_iterator(dir.path() / "state" / "outputs" / run))
    if (e.path().string().ends_with(".pipeline.json")) {
      json x;
      std::ifstream(e.path()) >> x;
      receipts[x["jobId"].get<std::string>()] = x;
    }
  ASSERT_EQ(receipts.size(), static_cast<std::size_t>(kJobs));
  ASSERT_EQ(r["job_timing"].size(), static_cast<std::size_t>(kJobs));

  constexpr double kMs = 0.0021;  // receipts hold start/end in whole ms
  std::vector<double> done;
  for (const auto& jt : r["job_timing"]) {
    const json& rc_ = receipts.at(jt["job_id"].get<std::string>());
    // The receipt carries the same figures as the report.
    EXPECT_NEAR(jt["end_to_end_s"].get<double>(), num(rc_, "endToEndS"), kMs) << jt.dump();
    EXPECT_NEAR(jt["video_s"].get<double>(), 2.0, 1e-9);
    EXPECT_NEAR(num(rc_, "videoS"), 2.0, 1e-9);
    EXPECT_NEAR(jt["real_time_factor"].get<double>(), num(rc_, "realTimeFactor"), kMs);
    EXPECT_NEAR(jt["real_time_factor"].get<double>(), jt["end_to_end_s"].get<double>() / 2.0, 1e-9);
    double sum = 0;
    for (const auto& st : jt["stages"]) {
      const std::string name = st["stage"];
      const json* rs = stage_of(rc_, name);
      ASSERT_NE(rs, nullptr) << name;
      const double total = (num(*rs, "endUnixMs") - num(*rs, "startUnixMs")) / 1000.0;
      EXPECT_NEAR(st["total_s"].get<double>(), total, 1e-6) << name;
      EXPECT_NEAR(st["wait_s"].get<double>(), num(*rs, "queueWaitS"), 1e-6) << name;
      EXPECT_NEAR(st["mux_s"].get<double>(), num(*rs, "muxS"), 1e-6) << name;
      EXPECT_NEAR(
          st["run_s"].get<double>() + st["mux_s"].get<double>() + st["other_s"].get<double>(),
          total, 1e-6);
      // The sim runtime aims the stage's publication at the profile's time (less its learnt
      // publish time, so a few ms either side); the bookkeeping around it stays small.
      const double want = name == "encode" ? kEnc : name == "sample" ? kSample : kDec;
      EXPECT_GE(total + 0.01, want) << name;
      EXPECT_LE(total, want + 0.15) << name << " " << jt.dump();
      EXPECT_GE(st["run_s"].get<double>() + st["mux_s"].get<double>() + 0.01, want) << name;
      if (name == "decode") {
        EXPECT_GT(st["mux_s"].get<double>(), 0) << "the sim decode writes an MP4";
      }
      sum += st["wait_s"].get<double>() + total;
    }
    // Waits and stages tile the job's end-to-end time (the gaps are the state moves' ms).
    EXPECT_NEAR(sum, jt["end_to_end_s"].get<double>(), 0.05) << jt.dump();
    ASSERT_TRUE(jt.contains("planned")) << jt.dump();
    EXPECT_GT(jt["planned"]["end_to_end_s"].get<double>(), 0);
    done.push_back(jt["end_to_end_s"].get<double>());
  }
  // A full queue: the last job waited about kJobs-1 samples in the sampler's queue.
  EXPECT_GE(*std::max_element(done.begin(), done.end()), (kJobs - 1) * kSample);

  // The sampler ran back to back: its duty cycle from the receipts.
  const json* s0 = nullptr;
  for (const auto& p : r["pools"])
    if (p["name"] == "s0") s0 = &p;
  ASSERT_NE(s0, nullptr);
  double first = 1e300, last = 0, busy = 0;
  for (const auto& [_, x] : receipts) {
    const json* s = stage_of(x, "sample");
    first = std::min(first, num(*s, "startUnixMs") / 1000.0);
    last = std::max(last, num(*s, "endUnixMs") / 1000.0);
    busy += (num(*s, "endUnixMs") - num(*s, "startUnixMs")) / 1000.0;
  }
  EXPECT_NEAR((*s0)["duty_cycle"].get<double>(), busy / (last - first), 1e-6);
  EXPECT_GE((*s0)["duty_cycle"].get<double>(), 0.9) << s0->dump();
  EXPECT_NEAR((*s0)["planned_duty_cycle"].get<double>(), 1.0, 1e-9)
      << "the plan's sampler runs back to back";
  const auto& bub = (*s0)["bubble_s"];
  EXPECT_NEAR(
      bub["no_job"].get<double>() + bub["gpu_group"].get<double>() + bub["overhead"].get<double>(),
      (last - first) - busy, 1e-6);
  // Steady rate: one video per sample time in the middle of the run; the planner's beside it.
  EXPECT_NEAR(r["measured"]["steady_rate_per_hour"].get<double>(), 3600 / kSample,
              0.1 * 3600 / kSample);
  EXPECT_NEAR(r["planned"]["steady_rate_per_hour"].get<double>(), 3600 / kSample,
              0.01 * 3600 / kSample);
  EXPECT_GT(r["measured"]["real_time_factor_mean"].get<double>(), 0);
}
