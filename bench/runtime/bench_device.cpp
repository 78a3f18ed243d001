// Device benchmark of the builtin model (docs/model.md "Device backend"): per-stage seconds of
// one clip with the default model and a large one (width 1536, depth 30, ~1.5 B parameters:
// a real video DiT's size), achieved TFLOP/s, the card's measured bf16 GEMM peak in the same
// run (cuBLASLt, fp32 accumulation) and the MFU, peak device memory, NVML series sampled through
// the services' own exporter (common/gpu GpuMonitor), and CPU figures for the ratio.
//
// CPU figures: the full CPU run of a large model takes hours, so the CPU side is sampled and
// extrapolated (and says so in the JSON): one sampler step at depth 1 and depth 2 gives a fixed
// part and a per-block part -> steps * (fixed + depth * per_block); the video decoder runs on
// the first 3 latent frames (9 output frames) and is scaled per output frame.
// UNRUN on a GPU: scripts/gpu_check.sh runs it.
#include "bench/runtime/bench_device.h"

#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "common/gpu/gpu_monitor.h"
#include "common/model/cuda/backend.h"

namespace h3pipe::bench {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

model::ModelConfig sized(const model::ModelConfig& base, const std::string& name) {
  model::ModelConfig c = base;
  if (name == "large") {
    c.width = 1536;
    c.depth = 30;
    c.heads = 12;  // head dim 128
    c.mlp_ratio = 4;
  }
  return c;
}

// NVML series through the services' exporter: a GpuMonitor on a private registry, read back
// every `period` by a thread; summary (max / mean) per series and the raw samples.
class MetricsTap {
 public:
  explicit MetricsTap(std::chrono::milliseconds period) : period_(period) {
    monitor_ = gpu::GpuMonitor::start(registry_, {}, period);
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        sample();
        std::this_thread::sleep_for(period_);
      }
    });
  }
  ~MetricsTap() { stop(); }
  void stop() {
    if (thread_.joinable()) {
      stop_ = true;
      thread_.join();
    }
  }
  void mark(const std::string& phase) {
    std::lock_guard lk(mu_);
    phase_ = phase;
  }
  bool available() const { return monitor_ && monitor_->available(); }
  json summary() const {
    std::lock_guard lk(mu_);
    json s = json::object();
    for (const auto& [name, v] : series_) {
      double mx = -1e300, sum = 0;
      for (double x : v) mx = std::max(mx, x), sum += x;
      s[name] = {{"max", mx}, {"mean", v.empty() ? 0 : sum / v.size()}, {"samples", v.size()}};
    }
    return s;
  }
  void write(const std::string& path) const {
    std::lock_guard lk(mu_);
    std::ofstream o(path);
    for (const auto& r : rows_) o << r.dump() << "\n";
  }

 private:
  void sample() {
    const double t = since(t0_);
    json row = {{"t", t}};
    {
      std::lock_guard lk(mu_);
      row["phase"] = phase_;
    }
    for (const auto& fam : registry_.Collect()) {
      if (fam.name.rfind("h3pipe_gpu_", 0) != 0) continue;
      for (const auto& m : fam.metric) {
        std::string key = fam.name;
        for (const auto& l : m.label)
          if (l.name == "gpu") key += "{gpu=" + l.value + "}";
        row[key] = m.gauge.value;
        std::lock_guard lk(mu_);
        series_[key].push_back(m.gauge.value);
      }
    }
    std::lock_guard lk(mu_);
    rows_.push_back(std::move(row));
  }

  prometheus::Registry registry_;
  std::unique_ptr<gpu::GpuMonitor> monitor_;
  std::chrono::milliseconds period_;
  Clock::time_point t0_ = Clock::now();
  mutable std::mutex mu_;
  std::string phase_ = "start";
  std::map<std::string, std::vector<double>> series_;
  std::vector<json> rows_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct StageTimes {
  double load = 0, encode = 0, sample = 0, decode_video = 0, decode_audio = 0;
  double sample_gflop = 0, decode_gflop = 0, audio_gflop = 0;
  std::uint64_t peak_bytes = 0, weight_bytes = 0;
  std::int64_t params = 0;
  model::DecodePlan plan;
  std::string error;
};

// One full clip on `c` (no MP4: the mux is the CPU's and the same on both; bench_runtime's CPU
// mode measures it).
StageTimes run_clip(const model::ModelConfig& c, const DeviceBenchArgs& a, MetricsTap* tap,
                    const std::string& tag) {
  StageTimes r;
  auto t0 = Clock::now();
  if (tap) tap->mark(tag + ":load");
  auto m = model::Model::load(c);
  if (!m) {
    r.error = m.error().to_string();
    return r;
  }
  r.load = since(t0);
  r.params = (*m)->parameters();
  t0 = Clock::now();
  auto cond = (*m)->encode("a red dress turning in the wind, studio light", nullptr);
  r.encode = since(t0);
  if (!cond) {
    r.error = cond.error().to_string();
    return r;
  }
  const auto dims = model::latent_dims(a.width, a.height, a.frames, a.fps);
  std::vector<float> video, audio;
  if (tap) tap->mark(tag + ":sample");
  t0 = Clock::now();
  Status s = (*m)->sample(*cond, dims, static_cast<std::uint32_t>(a.steps), a.seed, video, audio);
  r.sample = since(t0);
  r.sample_gflop = (*m)->last_gflop();
  if (!s) {
    r.error = s.error().to_string();
    return r;
  }
  r.plan = (*m)->plan_decode(dims, a.width, a.height);
  if (tap) tap->mark(tag + ":decode_video");
  t0 = Clock::now();
  std::size_t frames = 0;
  s = (*m)->decode_video(video.data(), dims, a.frames, a.width, a.height,
                         [&](std::span<const std::uint8_t>) {
                           ++frames;
                           return Status::Ok();
                         });
  r.decode_video = since(t0);
  r.decode_gflop = (*m)->last_gflop();
  if (!s) {
    r.error = s.error().to_string();
    return r;
  }
  if (tap) tap->mark(tag + ":decode_audio");
  std::vector<float> pcm;
  t0 = Clock::now();
  s = (*m)->decode_audio(audio.data(), dims, model::audio_samples(a.frames, a.fps), pcm);
  r.decode_audio = since(t0);
  r.audio_gflop = (*m)->last_gflop();
  if (!s) r.error = s.error().to_string();
  r.peak_bytes = (*m)->device_peak_bytes();
  r.weight_bytes = (*m)->device_weight_bytes();
  if (tap) tap->mark(tag + ":done");
  return r;
}

// CPU seconds of the same clip, sampled and extrapolated (see the file comment).
json cpu_estimate(const model::ModelConfig& c0, const DeviceBenchArgs& a) {
  model::ModelConfig c = c0;
  c.device = "cpu";
  const auto dims = model::latent_dims(a.width, a.height, a.frames, a.fps);
  double step_s[2] = {0, 0}, gf[2] = {0, 0};
  for (int depth : {1, 2}) {
    c.depth = depth;
    auto m = model::Model::load(c, model::kEncoder | model::kSampler);
    if (!m) return {{"error", m.error().to_string()}};
    auto cond = (*m)->encode("a red dress turning in the wind, studio light", nullptr);
    if (!cond) return {{"error", cond.error().to_string()}};
    std::vector<float> v, au;
    const auto t0 = Clock::now();
    Status s = (*m)->sample(*cond, dims, 1, a.seed, v, au);
    if (!s) return {{"error", s.error().to_string()}};
    step_s[depth - 1] = since(t0);
    gf[depth - 1] = (*m)->last_gflop();
  }
  const double per_block = std::max(0.0, step_s[1] - step_s[0]);
  const double fixed = std::max(0.0, step_s[0] - per_block);
  const double sample_s = a.steps * (fixed + c0.depth * per_block);
  const double per_block_gf = gf[1] - gf[0];
  const double sample_gf = a.steps * (gf[0] - per_block_gf + c0.depth * per_block_gf);

  c.depth = c0.depth;
  auto dec = model::Model::load(c, model::kDecoder);
  if (!dec) return {{"error", dec.error().to_string()}};
  model::LatentDims d3 = dims;
  d3.t = std::min(dims.t, 3);
  std::vector<float> lat(static_cast<std::size_t>(d3.video_numel()), 0.1f);
  for (std::size_t i = 0; i < lat.size(); ++i)
    lat[i] = 0.5f * std::sin(0.01f * static_cast<float>(i));
  const int f3 = 1 + 4 * (d3.t - 1);
  const auto t0 = Clock::now();
  Status s = (*dec)->decode_video(lat.data(), d3, f3, a.width, a.height,
                                  [](std::span<const std::uint8_t>) { return Status::Ok(); });
  if (!s) return {{"error", s.error().to_string()}};
  const double dec_s = since(t0) * a.frames / f3;
  const double dec_gf = (*dec)->last_gflop() * a.frames / f3;
  return {{"threads", c.threads},
          {"method",
           "sampler: one step at depth 1 and 2, extrapolated to steps x depth; decoder: "
           "first 3 latent frames, scaled per output frame"},
          {"sample_step_seconds_depth1_depth2", {step_s[0], step_s[1]}},
          {"seconds", {{"sample", sample_s}, {"decode_video", dec_s}}},
          {"gflops",
           {{"sample", sample_gf / std::max(sample_s, 1e-9)},
            {"decode_video", dec_gf / std::max(dec_s, 1e-9)}}}};
}

json times_json(const StageTimes& r, double peak_tflops) {
  const double st = r.sample_gflop / 1e3 / std::max(r.sample, 1e-9);
  const double dt = r.decode_gflop / 1e3 / std::max(r.decode_video, 1e-9);
  return {{"parameters", r.params},
          {"seconds",
           {{"load", r.load},
            {"encode_cpu", r.encode},
            {"sample", r.sample},
            {"decode_video", r.decode_video},
            {"decode_audio", r.decode_audio}}},
          {"tflop", {{"sample", r.sample_gflop / 1e3}, {"decode_video", r.decode_gflop / 1e3}}},
          {"tflops", {{"sample", st}, {"decode_video", dt}}},
          {"mfu", {{"sample", st / peak_tflops}, {"decode_video", dt / peak_tflops}}},
          {"peak_device_bytes", r.peak_bytes},
          {"weight_device_bytes", r.weight_bytes},
          {"decode_plan",
           {{"segment_frames", r.plan.segment_frames},
            {"tiles", r.plan.tiles},
            {"segment_bytes", r.plan.segment_bytes}}},
          {"error", r.error}};
}

}  // namespace

int run_device_bench(const DeviceBenchArgs& a) {
  model::ModelConfig base = a.base;
  base.device = a.device;
  auto dev = model::parse_device(a.device);
  if (!dev || !dev->cuda) {
    std::cerr << "--device: expected cuda or cuda:N\n";
    return 2;
  }
  const int ordinal = std::max(0, dev->ordinal);
  if (!model::cuda_built()) {
    std::cerr << "this build has no CUDA backend (H3PIPE_CUDA=OFF or no toolkit at configure)\n";
    return 2;
  }
  if (model::cuda_device_count() < 1) {
    std::cerr << "no CUDA device visible\n";
    return 2;
  }
  MetricsTap tap(std::chrono::milliseconds(250));
  tap.mark("gemm_peak");
  auto peak0 = model::cuda_gemm_peak_tflops(ordinal, a.peak_n, 3);
  if (!peak0) {
    std::cerr << peak0.error().to_string() << "\n";
    return 1;
  }
  json runs = json::object(), cpu = json::object();
  std::vector<std::string> names;
  std::stringstream ss(a.models);
  for (std::string n; std::getline(ss, n, ',');) names.push_back(n);
  std::map<std::string, StageTimes> res;
  for (const auto& n : names) {
    res[n] = run_clip(sized(base, n), a, &tap, n);
  }
  tap.mark("gemm_peak_after");
  auto peak1 = model::cuda_gemm_peak_tflops(ordinal, a.peak_n, 3);
  const double peak = std::max(*peak0, peak1 ? *peak1 : 0.0);
  tap.mark("cpu_reference");
  for (const auto& n : names) {
    runs[n] = times_json(res[n], peak);
    runs[n]["model"] = model::config_to_json(sized(base, n));
    if (a.cpu_reference) {
      cpu[n] = cpu_estimate(sized(base, n), a);
      if (cpu[n].contains("seconds")) {
        const auto& cs = cpu[n]["seconds"];
        runs[n]["cpu_over_gpu"] = {
            {"sample", cs["sample"].get<double>() / std::max(res[n].sample, 1e-9)},
            {"decode_video",
             cs["decode_video"].get<double>() / std::max(res[n].decode_video, 1e-9)}};
      }
    }
    std::fprintf(stderr,
                 "%s: %lld params  load %.2fs  sample %.3fs (%.1f TFLOP/s, MFU %.2f)  decode %.3fs "
                 "(%.1f TFLOP/s; %d-frame segments, %d tiles)  audio %.3fs  peak %.2f GiB  %s\n",
                 n.c_str(), static_cast<long long>(res[n].params), res[n].load, res[n].sample,
                 runs[n]["tflops"]["sample"].get<double>(), runs[n]["mfu"]["sample"].get<double>(),
                 res[n].decode_video, runs[n]["tflops"]["decode_video"].get<double>(),
                 res[n].plan.segment_frames, res[n].plan.tiles, res[n].decode_audio,
                 res[n].peak_bytes / double(1 << 30), res[n].error.c_str());
  }
  tap.stop();
  if (!a.metrics_out.empty()) tap.write(a.metrics_out);
  const bool large_ok = res.count("large") && res["large"].error.empty();
  const double large_mfu = large_ok ? runs["large"]["mfu"]["sample"].get<double>() : 0.0;
  bool errors = false;
  for (const auto& [n, r] : res) errors |= !r.error.empty();
  json j = {{"bench", "runtime_builtin_device"},
            {"device", fmt::format("cuda:{}", ordinal)},
            {"width", a.width},
            {"height", a.height},
            {"frames", a.frames},
            {"fps", a.fps},
            {"steps", a.steps},
            {"bf16_gemm_peak_tflops", peak},
            {"bf16_gemm_peak_before_after", {*peak0, peak1 ? *peak1 : 0.0}},
            {"gemm_peak_n", a.peak_n},
            {"runs", runs},
            {"cpu", cpu},
            {"nvml", {{"available", tap.available()}, {"series", tap.summary()}}},
            {"target_large_sample_mfu", 0.4},
            {"pass", !errors && large_mfu >= 0.4}};
  std::cout << j.dump() << std::endl;
  return errors ? 1 : 0;
}

}  // namespace h3pipe::bench
