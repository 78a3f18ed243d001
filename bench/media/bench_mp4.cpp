// MP4 write benchmark: the sim decoder's artifact write (runtime::render_latent_mp4: latent read,
// projection, H.264 + AAC mux) timed per clip, and the Mp4Writer's parts (open, video frames,
// audio, finish) timed on synthetic input of the same size.  The sim decode profile must cover
// the write, so this shows how much of e.g. a 40 ms profile the write takes.
//   bench_mp4 [--width 64 --height 64 --frames 9 --fps 12 --clips 50] [--warm-up] [--keep-heap]
//             [--preset P --tune T --threads N --aac-coder C --aac-bitrate B]   (the parts'
//             settings; default: media::fast_video_params / fast_audio_params, what the sim decoder
//             uses)
// Last line of stdout: one JSON object (ms per clip: p50, p90, max, first, per part).
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "common/latent/latent.h"
#include "common/media/media.h"
#include "common/runtime/sim_runtime.h"

using namespace h3pipe;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

nlohmann::json stats(std::vector<double> v) {
  const double first = v.empty() ? 0 : v.front();
  std::sort(v.begin(), v.end());
  auto q = [&](double p) {
    return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<std::size_t>(p * v.size()))];
  };
  auto r = [](double x) { return std::round(x * 100) / 100; };
  return {{"first_ms", r(first)},
          {"p50_ms", r(q(0.5))},
          {"p90_ms", r(q(0.9))},
          {"max_ms", r(v.empty() ? 0 : v.back())}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"MP4 write benchmark (sim decoder artifact)"};
  int width = 64, height = 64, frames = 9, fps = 12, clips = 50;
  app.add_option("--width", width);
  app.add_option("--height", height);
  app.add_option("--frames", frames);
  app.add_option("--fps", fps);
  app.add_option("--clips", clips);
  bool warm = false, keep_heap = false;
  std::string preset, tune = "(fast)", coder;
  int threads = -1, abitrate = 0;
  app.add_flag("--warm-up", warm,
               "media::warm_up() before the first clip, as the decoder service does");
  app.add_flag(
      "--keep-heap", keep_heap,
      "the stage services' malloc settings (freed memory stays mapped: no page faults per clip)");
  app.add_option("--preset", preset);
  app.add_option("--tune", tune, "x264 tune; none = no tune");
  app.add_option("--threads", threads);
  app.add_option("--aac-coder", coder);
  app.add_option("--aac-bitrate", abitrate);
  CLI11_PARSE(app, argc, argv);
  media::set_libav_log_level(16);

  std::random_device rd;
  const fs::path dir = fs::temp_directory_path() / ("h3pipe_bench_mp4_" + std::to_string(rd()));
  fs::create_directories(dir);

  // A latent of the job's geometry, as the sim sampler would write it.
  pb::JobSpec spec;
  spec.set_job_id("bench");
  spec.set_prompt("bench");
  spec.set_width(width);
  spec.set_height(height);
  spec.set_frames(frames);
  spec.set_fps(fps);
  latent::Latent l = latent::make_latent(
      latent::builtin_profile(), {static_cast<uint32_t>(width), static_cast<uint32_t>(height),
                                  static_cast<uint32_t>(frames), static_cast<uint32_t>(fps)});
  for (std::size_t i = 0; i < l.video.size(); ++i)
    l.video[i] = std::sin(0.37f * static_cast<float>(i));
  for (std::size_t i = 0; i < l.audio.size(); ++i)
    l.audio[i] = 0.5f * std::sin(0.01f * static_cast<float>(i));
  auto ws = latent::write_latent(dir / "in.h3latent", l);
  if (!ws.ok()) {
    std::cerr << ws.error().to_string() << "\n";
    return 1;
  }

  if (keep_heap) {  // as common/runner/stage_service.cpp does at service start
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  }
  double warm_ms = 0;
  if (warm) {
    auto t0 = Clock::now();
    if (auto s = media::warm_up(); !s.ok())
      std::cerr << "warm-up: " << s.error().to_string() << "\n";
    warm_ms = ms_since(t0);
  }
  // 1. The whole sim decoder write, as the runtime does it.
  std::vector<double> total;
  for (int i = 0; i < clips; ++i) {
    auto t0 = Clock::now();
    auto s = runtime::render_latent_mp4(dir / "in.h3latent", spec, dir / "out.mp4.part");
    total.push_back(ms_since(t0));
    if (!s.ok()) {
      std::cerr << s.error().to_string() << "\n";
      return 1;
    }
  }
  const auto bytes = fs::file_size(dir / "out.mp4.part");

  // 2. The writer's parts on synthetic input of the same size.
  std::vector<double> open_ms, video_ms, audio_ms, finish_ms;
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(width) * height * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<std::uint8_t>(i * 7);
  const auto samples =
      static_cast<std::size_t>(std::llround(static_cast<double>(frames) / fps * 48000));
  std::vector<float> pcm(samples * 2);
  for (std::size_t i = 0; i < pcm.size(); ++i)
    pcm[i] = 0.2f * std::sin(0.05f * static_cast<float>(i));
  for (int i = 0; i < clips; ++i) {
    media::VideoParams vp = media::fast_video_params(width, height, fps);
    media::AudioParams ap = media::fast_audio_params();
    if (!preset.empty()) vp.preset = preset;
    if (tune != "(fast)") vp.tune = tune == "none" ? "" : tune;
    if (threads >= 0) vp.threads = threads;
    if (!coder.empty()) ap.coder = coder;
    if (abitrate > 0) ap.bitrate = abitrate;
    auto t0 = Clock::now();
    auto w = media::Mp4Writer::open(dir / "parts.mp4", vp, ap);
    open_ms.push_back(ms_since(t0));
    if (!w.ok()) {
      std::cerr << w.error().to_string() << "\n";
      return 1;
    }
    t0 = Clock::now();
    for (int f = 0; f < frames; ++f) {
      rgb[f % rgb.size()] ^= 0x5a;
      if (!(*w)->add_frame(rgb).ok()) return 1;
    }
    video_ms.push_back(ms_since(t0));
    t0 = Clock::now();
    if (!(*w)->add_audio(pcm).ok()) return 1;
    audio_ms.push_back(ms_since(t0));
    t0 = Clock::now();
    if (!(*w)->finish().ok()) return 1;
    finish_ms.push_back(ms_since(t0));
  }
  fs::remove_all(dir);

  nlohmann::json out = {{"width", width},           {"height", height},
                        {"frames", frames},         {"fps", fps},
                        {"clips", clips},           {"warm_up_ms", std::round(warm_ms * 100) / 100},
                        {"mp4_bytes", bytes},       {"render_latent_mp4", stats(total)},
                        {"open", stats(open_ms)},   {"video_frames", stats(video_ms)},
                        {"audio", stats(audio_ms)}, {"finish", stats(finish_ms)}};
  std::cout << out.dump() << std::endl;
  return 0;
}
