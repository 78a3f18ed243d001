#pragma once
// `bench_runtime --device cuda[:N]` (bench_device.cpp): the builtin model on the device backend.
#include <cstdint>
#include <string>

#include "common/model/model.h"

namespace h3pipe::bench {

struct DeviceBenchArgs {
  int width = 736, height = 416, frames = 124, fps = 24, steps = 6;
  std::uint64_t seed = 1;
  std::string device = "cuda";
  std::string models = "default,large";  // which sizes to run
  model::ModelConfig base;               // --settings on top of the defaults
  int peak_n = 8192;                     // bf16 GEMM size of the peak measurement
  std::string metrics_out;               // NVML series as JSON lines (empty: not written)
  bool cpu_reference = true;             // CPU figures (sampled, extrapolated) for the ratio
};

// Runs the benchmark, prints a human summary on stderr and one JSON line on stdout.
int run_device_bench(const DeviceBenchArgs& a);

}  // namespace h3pipe::bench
