// job_timing.h on receipts with known stage times (issue #24): the per-job split, the real-time
// factor, the duty cycle and its bubbles by cause, the steady rate over the middle of the run.
#include "common/schedule/job_timing.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace h3pipe::schedule;
using nlohmann::json;

namespace {

// One job: encode [t, t+1], sample [t+1+w, ...], transfer, decode; ms in receipts.
json receipt(const std::string& job, double submit, double enc_wait, double sample_start,
             double sample_s, double decode_wait) {
  const double enc_start = submit + enc_wait, enc_end = enc_start + 1.0;
  const double sample_end = sample_start + sample_s;
  const double tr_end = sample_end + 0.5;
  const double dec_start = tr_end + decode_wait, dec_end = dec_start + 2.0;
  auto ms = [](double s) { return std::to_string(std::llround(s * 1000)); };
  return {{"jobId", job},
          {"spec", {{"width", 416}, {"height", 736}, {"frames", 120}, {"fps", 24}}},
          {"endToEndS", dec_end - submit},
          {"stages",
           {{{"stage", "STAGE_ENCODE"},
             {"pool", "enc"},
             {"host", "a"},
             {"startUnixMs", ms(enc_start)},
             {"endUnixMs", ms(enc_end)},
             {"queueWaitS", enc_wait},
             {"runS", 0.9}},
            {{"stage", "STAGE_SAMPLE"},
             {"pool", "s0"},
             {"host", "a"},
             {"startUnixMs", ms(sample_start)},
             {"endUnixMs", ms(sample_end)},
             {"queueWaitS", sample_start - enc_end},
             {"runS", sample_s - 0.1},
             {"gpuWaitS", 0.25},
             {"device", "cpu"},
             {"settingsJson",
              json({{"runtime_reported", {{"gflop", 100.0 * sample_s}, {"peak_gflops", 400.0}}}})
                  .dump()}},
            {{"stage", "STAGE_TRANSFER"},
             {"host", "b"},
             {"startUnixMs", ms(sample_end)},
             {"endUnixMs", ms(tr_end)},
             {"wireS", 0.3},
             {"verifyS", 0.05}},
            {{"stage", "STAGE_DECODE"},
             {"pool", "dec"},
             {"host", "b"},
             {"startUnixMs", ms(dec_start)},
             {"endUnixMs", ms(dec_end)},
             {"queueWaitS", decode_wait},
             {"runS", 1.5},
             {"muxS", 0.4}}}}};
}

}  // namespace

TEST(JobTiming, SplitsEveryStageAndTheEndToEnd) {
  std::vector<json> r = {receipt("j1", 1000, 0.5, 1001.5, 10, 0.2)};
  std::vector<std::string> w;
  auto stages = parse_receipts(r, nullptr, w);
  ASSERT_TRUE(w.empty());
  auto jobs = job_timings(stages);
  ASSERT_EQ(jobs.size(), 1u);
  const auto& j = jobs[0];
  EXPECT_NEAR(j.end_to_end_s, 0.5 + 1 + 10 + 0.5 + 0.2 + 2, 1e-6);
  EXPECT_NEAR(j.video_s, 5.0, 1e-9);
  EXPECT_NEAR(j.real_time_factor, j.end_to_end_s / 5.0, 1e-9);
  ASSERT_EQ(j.stages.size(), 4u);
  EXPECT_EQ(j.stages[2].stage, "transfer");
  EXPECT_EQ(j.stages[2].pool, "a->b");
  EXPECT_NEAR(j.stages[2].wire_s, 0.3, 1e-9);
  EXPECT_NEAR(j.stages[2].verify_s, 0.05, 1e-9);
  EXPECT_NEAR(j.stages[2].wait_s, 0.15, 1e-6);
  EXPECT_NEAR(j.stages[3].mux_s, 0.4, 1e-9);
  EXPECT_NEAR(j.stages[3].run_s, 1.5, 1e-9);
  EXPECT_NEAR(j.stages[3].other_s, 0.1, 1e-6);
  EXPECT_NEAR(j.wait_s, 0.5 + 0 + 0.2, 1e-6);
  EXPECT_NEAR(j.transfer_s, 0.5, 1e-6);
}

TEST(JobTiming, DutyCycleAndBubblesByCause) {
  // Sampler s0: job 1 [10, 20]; job 2 enqueued at 21 (a job-less second), claimed at 21.5 after a
  // 0.25 s GPU-group wait; job 3 queued all along, started 0.1 s after job 2's end.
  std::vector<json> r = {receipt("j1", 8, 0, 10, 10, 0), receipt("j2", 20, 0, 21.5, 10, 0),
                         receipt("j3", 0, 0, 31.6, 10, 0)};
  std::vector<std::string> w;
  auto pools = pool_duty(parse_receipts(r, nullptr, w));
  const PoolDuty* s0 = nullptr;
  for (const auto& p : pools)
    if (p.pool == "s0") s0 = &p;
  ASSERT_NE(s0, nullptr);
  EXPECT_EQ(s0->tasks, 3u);
  EXPECT_NEAR(s0->span_s, 31.6, 1e-6);
  EXPECT_NEAR(s0->busy_s, 30, 1e-6);
  EXPECT_NEAR(s0->duty_cycle, 30 / 31.6, 1e-6);
  EXPECT_EQ(s0->bubbles, 2u);
  EXPECT_NEAR(s0->bubble_s.at("no_job"), 1.0, 1e-6);
  EXPECT_NEAR(s0->bubble_s.at("gpu_group"), 0.25 + 0.1,
              1e-6);  // job 3's 0.25 wait caps at its 0.1 gap
  EXPECT_NEAR(s0->bubble_s.at("overhead"), 0.25, 1e-6);
  EXPECT_NEAR(s0->gflop_per_s, 3000.0 / 29.7, 1e-6);
  EXPECT_NEAR(s0->mfu, 3000.0 / 29.7 / 400.0, 1e-6);
}

TEST(JobTiming, SteadyRateLeavesOutFillAndDrain) {
  // Slow fill and drain around 9 completions one second apart.
  std::vector<double> t = {0, 10, 11, 12, 13, 14, 15, 16, 17, 18, 40};
  // Indices 2..8 (20 % / 80 % of 10 intervals): 6 completions in 6 s.
  EXPECT_NEAR(steady_rate_per_hour(t), 3600, 1e-6);
  EXPECT_NEAR(steady_rate_per_hour({0, 2}), 1800, 1e-6);
  EXPECT_EQ(steady_rate_per_hour({5}), 0);
}

TEST(JobTiming, DeclaredModelFlopsGiveAComfyUiPoolItsMfu) {
  // A ComfyUI sampler (no GFLOP of its own) running Wan 2.1 14B at 720p, 30 steps, 600 s per
  // job on the topology's 4x T10 pool: MFU = 13.6 TFLOP x 30 / 600 s / (4 x 65 TFLOP/s).
  json topo;
  std::ifstream(std::string(H3PIPE_SOURCE_DIR) +
                "/configs/topologies/two_host_4xT10_3080ti.json") >>
      topo;
  for (auto& p : topo["pools"]) p["profiles"]["default"] = {{"kind", "fixed"}, {"seconds", 600}};
  const auto cfg =
      std::filesystem::temp_directory_path() / fmt::format("h3pipe_mfu_{}.json", ::getpid());
  std::ofstream(cfg) << topo.dump();
  std::vector<json> rs;
  for (int i = 0; i < 2; ++i) {
    json r = receipt("w" + std::to_string(i), 1000 + 700 * i, 0, 1001 + 700 * i, 600, 0);
    r["spec"] = {{"width", 1280}, {"height", 720}, {"frames", 81}, {"steps", 30}, {"fps", 16}};
    for (auto& s : r["stages"]) {
      if (s["pool"] == "s0") s["pool"] = "t10x4-sample";
      if (s["stage"] == "STAGE_SAMPLE") {
        s["settingsJson"] = json({{"workflow", "templates/wan2.1_t2v_14b_720p.json"}}).dump();
        s["runS"] = 600.0;
      }
    }
    rs.push_back(r);
  }
  ReportArgs a;
  a.receipts = rs;
  a.config = cfg.string();
  a.json = true;
  std::ostringstream out, err;
  ASSERT_EQ(run_report(a, out, err), 0) << err.str();
  std::filesystem::remove(cfg);
  auto j = json::parse(out.str());
  const json* pool = nullptr;
  for (const auto& p : j["pools"])
    if (p["name"] == "t10x4-sample") pool = &p;
  ASSERT_NE(pool, nullptr) << out.str();
  EXPECT_NEAR((*pool)["peak_gflops"].get<double>(), 4 * 65e3, 1e-6);
  EXPECT_NEAR((*pool)["mfu"].get<double>(), 13.6e3 * 30 / 600 / (4 * 65e3), 1e-9);
  EXPECT_EQ(j["job_timing"].size(), 2u);
}
