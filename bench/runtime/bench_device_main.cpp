// bench_runtime_device: the device mode of bench_runtime alone (bench_device.cpp), for the
// device-machine bundle, which carries no libav (bundle_media_shim.cpp).  Same options.
#include <CLI/CLI.hpp>
#include <iostream>

#include "bench/runtime/bench_device.h"

int main(int argc, char** argv) {
  using namespace h3pipe;
  CLI::App app{"builtin runtime device benchmark"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  bench::DeviceBenchArgs a;
  std::string settings = "{}";
  bool no_cpu_ref = false;
  app.add_option("--width", a.width);
  app.add_option("--height", a.height);
  app.add_option("--frames", a.frames);
  app.add_option("--fps", a.fps);
  app.add_option("--steps", a.steps);
  app.add_option("--seed", a.seed);
  app.add_option("--settings", settings, "builtin model settings JSON (docs/model.md)");
  app.add_option("--device", a.device, "cuda | cuda:N");
  app.add_option("--models", a.models, "model sizes to run (default,large)");
  app.add_option("--peak-n", a.peak_n, "square bf16 GEMM size for the peak measurement");
  app.add_option("--metrics-out", a.metrics_out, "NVML series as JSON lines");
  app.add_flag("--no-cpu-reference", no_cpu_ref, "skip the sampled CPU figures");
  CLI11_PARSE(app, argc, argv);
  a.cpu_reference = !no_cpu_ref;
  auto cfg = model::parse_config(nlohmann::json::parse(settings, nullptr, false), "--settings");
  if (!cfg) {
    std::cerr << cfg.error().to_string() << "\n";
    return 2;
  }
  a.base = *cfg;
  return bench::run_device_bench(a);
}
