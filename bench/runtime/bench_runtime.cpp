// Builtin runtime benchmark: per-stage seconds (encode, sample, video decode, audio decode, mux)
// for one clip, and the sampler's and decoder's achieved GFLOP/s as a fraction of this CPU's
// OpenBLAS sgemm peak measured in the same run (large square sgemm, same thread count).
// Last line of stdout: one JSON object.
#include <cblas.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/runtime/bench_device.h"
#include "common/media/media.h"
#include "common/model/model.h"

using namespace h3pipe;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// CPU seconds (user + system, all threads) of this process: with other work on the machine the
// wall-clock rate drops, the rate per CPU-second much less.
double cpu_seconds() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

struct Peak {
  double wall = 0;  // GFLOP/s, best of the repetitions
  double cpu = 0;   // GFLOP per CPU-second, best
};

// Best of `reps` n x n x n sgemm with `threads` OpenBLAS threads.
Peak sgemm_peak(int n, int threads, int reps) {
  openblas_set_num_threads(threads);
  std::vector<float> a(static_cast<std::size_t>(n) * n), b(a.size()), c(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 17) * 0.01f;
    b[i] = static_cast<float>(i % 13) * 0.01f;
  }
  Peak best;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    const double s = seconds_since(t0), cs = cpu_seconds() - c0;
    if (r == 0) continue;  // the first call warms up
    const double gf = 2.0 * n * n * n / 1e9;
    best.wall = std::max(best.wall, gf / s);
    // Per CPU-second; with one thread this is the rate a pool of single-threaded calls (the
    // model's) can reach on each core it gets.
    if (cs > 0) best.cpu = std::max(best.cpu, gf / cs);
  }
  openblas_set_num_threads(1);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"builtin runtime benchmark"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  int width = 736, height = 416, frames = 124, fps = 24, steps = 6, peak_n = 2048;
  std::uint64_t seed = 1;
  std::string settings = "{}", out, prompt = "a red dress turning in the wind, studio light";
  app.add_option("--width", width);
  app.add_option("--height", height);
  app.add_option("--frames", frames);
  app.add_option("--fps", fps);
  app.add_option("--steps", steps);
  app.add_option("--seed", seed);
  app.add_option("--settings", settings, "builtin model settings JSON (docs/model.md)");
  app.add_option("--out", out, "write the MP4 here (default: a temp file, removed)");
  app.add_option("--peak-n", peak_n, "square sgemm size for the peak measurement");
  std::string device = "cpu", models = "default,large", metrics_out;
  bool no_cpu_ref = false;
  app.add_option("--device", device, "cpu | cuda | cuda:N (the device backend: bench_device.cpp)");
  app.add_option("--models", models, "device mode: model sizes to run (default,large)");
  app.add_option("--metrics-out", metrics_out, "device mode: NVML series as JSON lines");
  app.add_flag("--no-cpu-reference", no_cpu_ref, "device mode: skip the sampled CPU figures");
  CLI11_PARSE(app, argc, argv);
  media::set_libav_log_level(16);

  const auto sj = nlohmann::json::parse(settings, nullptr, false);
  auto cfg = model::parse_config(sj, "--settings");
  if (!cfg) {
    std::cerr << cfg.error().to_string() << "\n";
    return 2;
  }
  if (device != "cpu") {
    bench::DeviceBenchArgs da;
    da.width = width, da.height = height, da.frames = frames, da.fps = fps, da.steps = steps;
    da.seed = seed, da.device = device, da.models = models, da.base = *cfg;
    da.metrics_out = metrics_out, da.cpu_reference = !no_cpu_ref;
    if (peak_n != 2048) da.peak_n = peak_n;
    return bench::run_device_bench(da);
  }
  const Peak peak_before = sgemm_peak(peak_n, cfg->threads, 3);
  const Peak peak1 = sgemm_peak(peak_n, 1, 3);  // per CPU-second reference: one thread

  auto t0 = Clock::now();
  auto m = model::Model::load(*cfg);
  if (!m) {
    std::cerr << m.error().to_string() << "\n";
    return 1;
  }
  const double load_s = seconds_since(t0);
  model::Model& mdl = **m;

  t0 = Clock::now();
  double c0 = cpu_seconds();
  auto cond = mdl.encode(prompt, nullptr);
  const double enc_s = seconds_since(t0), enc_gf = mdl.last_gflop();
  if (!cond) return 1;

  const auto dims = model::latent_dims(width, height, frames, fps);
  std::vector<float> video, audio;
  t0 = Clock::now();
  c0 = cpu_seconds();
  auto st = mdl.sample(*cond, dims, static_cast<std::uint32_t>(steps), seed, video, audio);
  const double samp_s = seconds_since(t0), samp_gf = mdl.last_gflop(),
               samp_cpu = cpu_seconds() - c0;
  if (!st) {
    std::cerr << st.error().to_string() << "\n";
    return 1;
  }

  const bool keep = !out.empty();
  const std::filesystem::path mp4 =
      keep ? std::filesystem::path(out)
           : std::filesystem::temp_directory_path() /
                 ("h3pipe_bench_" + std::to_string(::getpid()) + ".mp4");
  auto wr = media::Mp4Writer::open(mp4, {width, height, fps}, {});
  if (!wr) {
    std::cerr << wr.error().to_string() << "\n";
    return 1;
  }
  double mux_s = 0, mux_cpu = 0;
  t0 = Clock::now();
  c0 = cpu_seconds();
  const auto plan = mdl.plan_decode(dims, width, height);
  st = mdl.decode_video(video.data(), dims, frames, width, height,
                        [&](std::span<const std::uint8_t> rgb) {
                          const auto m0 = Clock::now();
                          const double mc0 = cpu_seconds();
                          Status s = (*wr)->add_frame(rgb);
                          mux_s += seconds_since(m0);
                          mux_cpu += cpu_seconds() - mc0;
                          return s;
                        });
  const double vdec_s = seconds_since(t0) - mux_s, vdec_gf = mdl.last_gflop();
  const double vdec_cpu = cpu_seconds() - c0 - mux_cpu;
  if (!st) {
    std::cerr << st.error().to_string() << "\n";
    return 1;
  }
  std::vector<float> pcm;
  t0 = Clock::now();
  st = mdl.decode_audio(audio.data(), dims, model::audio_samples(frames, fps), pcm);
  const double adec_s = seconds_since(t0), adec_gf = mdl.last_gflop();
  if (!st) return 1;
  t0 = Clock::now();
  st = (*wr)->add_audio(pcm);
  if (st) st = (*wr)->finish();
  mux_s += seconds_since(t0);
  if (!st) {
    std::cerr << st.error().to_string() << "\n";
    return 1;
  }
  const auto mp4_bytes = std::filesystem::file_size(mp4);
  if (!keep) std::filesystem::remove(mp4);

  const Peak peak_after = sgemm_peak(peak_n, cfg->threads, 3);
  const double peak = std::max(peak_before.wall, peak_after.wall);
  const double peak_cpu = peak1.cpu;
  const double samp_cpu_rate = samp_gf / samp_cpu, vdec_cpu_rate = vdec_gf / vdec_cpu;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double samp_rate = samp_gf / samp_s, vdec_rate = vdec_gf / vdec_s;
  std::fprintf(
      stderr,
      "model: %lld params, width %d depth %d heads %d, threads %d\n"
      "clip %dx%d x %d frames @ %d fps, %d steps, latent t=%d h=%d w=%d L=%d\n"
      "load %.2fs  encode %.2fs  sample %.2fs (%.1f GFLOP, %.1f GFLOP/s)\n"
      "video decode %.2fs (%.1f GFLOP, %.1f GFLOP/s; segments of %d latent frames, %d tiles)\n"
      "audio decode %.2fs  mux %.2fs  mp4 %llu bytes\n"
      "sgemm peak %.1f GFLOP/s (n=%d) -> sampler %.2f, decoder %.2f of peak; max RSS %ld MB\n"
      "per CPU-second: sgemm %.1f, sampler %.1f (%.2f), decoder %.1f (%.2f)\n",
      static_cast<long long>(mdl.parameters()), cfg->width, cfg->depth, cfg->heads, cfg->threads,
      width, height, frames, fps, steps, dims.t, dims.h, dims.w, dims.audio_len, load_s, enc_s,
      samp_s, samp_gf, samp_rate, vdec_s, vdec_gf, vdec_rate, plan.segment_frames, plan.tiles,
      adec_s, mux_s, static_cast<unsigned long long>(mp4_bytes), peak, peak_n, samp_rate / peak,
      vdec_rate / peak, ru.ru_maxrss / 1024, peak_cpu, samp_cpu_rate, samp_cpu_rate / peak_cpu,
      vdec_cpu_rate, vdec_cpu_rate / peak_cpu);
  nlohmann::json j = {{"bench", "runtime_builtin"},
                      {"width", width},
                      {"height", height},
                      {"frames", frames},
                      {"fps", fps},
                      {"steps", steps},
                      {"model", model::config_to_json(*cfg)},
                      {"parameters", mdl.parameters()},
                      {"seconds",
                       {{"load", load_s},
                        {"encode", enc_s},
                        {"sample", samp_s},
                        {"decode_video", vdec_s},
                        {"decode_audio", adec_s},
                        {"mux", mux_s}}},
                      {"gflop",
                       {{"encode", enc_gf},
                        {"sample", samp_gf},
                        {"decode_video", vdec_gf},
                        {"decode_audio", adec_gf}}},
                      {"gflops", {{"sample", samp_rate}, {"decode_video", vdec_rate}}},
                      {"sgemm_peak_gflops", peak},
                      {"sgemm_peak_before_after", {peak_before.wall, peak_after.wall}},
                      {"cpu_seconds", {{"sample", samp_cpu}, {"decode_video", vdec_cpu}}},
                      {"sgemm_gflop_per_cpu_second", peak_cpu},
                      {"sample_fraction_per_cpu_second", samp_cpu_rate / peak_cpu},
                      {"decode_fraction_per_cpu_second", vdec_cpu_rate / peak_cpu},
                      {"sample_fraction_of_peak", samp_rate / peak},
                      {"decode_fraction_of_peak", vdec_rate / peak},
                      {"decode_plan",
                       {{"segment_frames", plan.segment_frames},
                        {"tiles", plan.tiles},
                        {"segment_bytes", plan.segment_bytes},
                        {"whole_bytes", plan.whole_bytes}}},
                      {"latent_bytes", 4 * (dims.video_numel() + dims.audio_numel())},
                      {"mp4_bytes", mp4_bytes},
                      {"max_rss_mb", ru.ru_maxrss / 1024},
                      {"target_sample_fraction", 0.5},
                      {"pass", samp_rate / peak >= 0.5}};
  std::cout << j.dump() << std::endl;
  return 0;
}
