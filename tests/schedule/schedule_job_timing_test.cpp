// job_timing.h on receipts with known stage times (issue #24): the per-job split, the real-time
// factor, the duty cycle and its bubbles by cause, the steady rate over the middle of the run.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "common/schedule/gpu_table.h"
#include "common/schedule/job_timing.h"

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
  // A ComfyUI sampler (no GFLOP of its own) running Wan 2.1 14B at 720p, 30 steps, 6000 s per
  // job on the topology's 4x T10 pool: MFU = 13.6 PFLOP x 30 / 6000 s / (4 x 65 TFLOP/s) = 0.262
  // (configs/gpus.json model_flops: PFLOP per step, = 13.6e6 GFLOP).
  json topo;
  std::ifstream(std::string(H3PIPE_SOURCE_DIR) +
                "/configs/topologies/two_host_4xT10_3080ti.json") >>
      topo;
  for (auto& p : topo["pools"]) p["profiles"]["default"] = {{"kind", "fixed"}, {"seconds", 6000}};
  const auto cfg =
      std::filesystem::temp_directory_path() / fmt::format("h3pipe_mfu_{}.json", ::getpid());
  std::ofstream(cfg) << topo.dump();
  std::vector<json> rs;
  for (int i = 0; i < 2; ++i) {
    json r = receipt("w" + std::to_string(i), 1000 + 7000 * i, 0, 1001 + 7000 * i, 6000, 0);
    r["spec"] = {{"width", 1280}, {"height", 720}, {"frames", 81}, {"steps", 30}, {"fps", 16}};
    for (auto& s : r["stages"]) {
      if (s["pool"] == "s0") s["pool"] = "t10x4-sample";
      if (s["stage"] == "STAGE_SAMPLE") {
        s["settingsJson"] = json({{"workflow", "templates/wan2.1_t2v_14b_720p.json"}}).dump();
        s["runS"] = 6000.0;
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
  EXPECT_NEAR((*pool)["mfu"].get<double>(), 13.6e6 * 30 / 6000 / (4 * 65e3), 1e-9);
  EXPECT_NEAR((*pool)["mfu"].get<double>(), 0.2615, 1e-4);  // a plausible MFU, not 1000x off
  EXPECT_EQ(j["job_timing"].size(), 2u);
}

// Each model_flops entry of configs/gpus.json equals what its own source's architecture numbers
// give (the unit is in the field's name: PFLOP per step).  Tokens = latent frames x latent height
// x latent width after the VAE's and the patch's strides; a forward = 2 x params x tokens (the
// linear layers) + 4 x tokens^2 x dim x blocks (self-attention's two matrix products); a step =
// the forwards the source counts (classifier-free guidance: two).  Fails on a field in another
// unit (the old tflop_per_step held PFLOP).
TEST(ModelFlops, EachEntryEqualsTheArchitectureInItsSource) {
  json j;
  std::ifstream(std::string(H3PIPE_SOURCE_DIR) + "/configs/gpus.json") >> j;
  ASSERT_TRUE(j.contains("model_flops"));
  auto table = parse_gpu_table(j);
  ASSERT_TRUE(table.ok()) << table.error().message;
  ASSERT_EQ(table->model_flops.size(), j["model_flops"].size());
  ASSERT_FALSE(j["model_flops"].empty());
  for (std::size_t i = 0; i < j["model_flops"].size(); ++i) {
    const auto& m = j["model_flops"][i];
    const std::string src = m.at("source").get<std::string>();
    SCOPED_TRACE(m.at("name").get<std::string>() + ": " + src);
    std::smatch g;
    auto num = [&](const char* re, int group = 1) {
      const std::regex r(re);
      EXPECT_TRUE(std::regex_search(src, g, r)) << "the source gives no " << re;
      return g.empty() ? 0.0 : std::stod(g[group].str());
    };
    const double dim = num(R"(dim (\d+))"), blocks = num(R"((\d+) blocks)");
    const double params = num(R"(([0-9.]+e[0-9]+) params)");
    ASSERT_TRUE(std::regex_search(src, g, std::regex(R"(patch (\d+)x(\d+)x(\d+))")));
    const double pt = std::stod(g[1]), ph = std::stod(g[2]), pw = std::stod(g[3]);
    ASSERT_TRUE(std::regex_search(src, g, std::regex(R"(VAE (\d+)x(\d+)x(\d+))")));
    const double vt = std::stod(g[1]), vh = std::stod(g[2]), vw = std::stod(g[3]);
    ASSERT_TRUE(std::regex_search(src, g, std::regex(R"((one|two|\d+) forwards? per step)")));
    const double forwards = g[1] == "one" ? 1 : g[1] == "two" ? 2 : std::stod(g[1]);
    const double frames = m.at("frames").get<double>(), height = m.at("height").get<double>(),
                 width = m.at("width").get<double>();
    const double tokens = (std::floor((frames - 1) / vt) + 1) / pt * std::floor(height / vh / ph) *
                          std::floor(width / vw / pw);
    const double forward = 2 * params * tokens + 4 * tokens * tokens * dim * blocks;
    const double pflop = forwards * forward / 1e15;
    EXPECT_NEAR(table->model_flops[i].pflop_per_step, pflop, 0.01 * pflop)
        << "recomputed " << pflop << " PFLOP per step from " << tokens << " tokens";
    // The report's GFLOP for a 30-step job at this geometry: the same number in GFLOP.
    EXPECT_NEAR(table->declared_gflop(m["match"][0].get<std::string>(), width, height, frames, 30),
                pflop * 1e6 * 30, 0.01 * pflop * 1e6 * 30);
  }
}

TEST(ModelFlops, TheOldFieldIsRefusedByName) {
  json j;
  std::ifstream(std::string(H3PIPE_SOURCE_DIR) + "/configs/gpus.json") >> j;
  auto& m = j["model_flops"][0];
  m["tflop_per_step"] = m["pflop_per_step"];
  m.erase("pflop_per_step");
  auto t = parse_gpu_table(j);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("pflop_per_step"), std::string::npos) << t.error().message;
  EXPECT_NE(t.error().message.find("tflop_per_step is no longer read"), std::string::npos);
}

TEST(ModelFlops, AnNvmlDeviceNameFindsItsGpu) {
  auto t = load_gpu_table();
  ASSERT_TRUE(t.ok());
  ASSERT_NE(t->find_device("NVIDIA H100 80GB HBM3"), nullptr);
  EXPECT_EQ(t->find_device("NVIDIA H100 80GB HBM3")->model, "H100");
  EXPECT_EQ(t->find_device("NVIDIA GeForce RTX 3080 Ti")->model, "RTX 3080 Ti");
  EXPECT_EQ(t->find_device("Tesla T10")->model, "T10");
  EXPECT_EQ(t->find_device("NVIDIA H200")->model, "H200");
  EXPECT_EQ(t->find_device("Intel Arc A770"), nullptr);
  EXPECT_NEAR(t->peak_gflops("Tesla T10", 4), 4 * 65e3, 1e-6);
  EXPECT_EQ(t->peak_gflops("unknown", 4), 0);
}
