#pragma once
// The table of known GPUs (configs/gpus.json, compiled in): memory, bandwidth, relative speed per
// stage, each with its source, plus the reference stage times that config-adapt scales into
// default profiles.  docs/planner.md explains the formula.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"

namespace h3pipe::schedule {

struct GpuInfo {
  std::string model;
  std::vector<std::string> aliases;
  double memory_gb = 0, bandwidth_gbs = 0;
  double peak_tflops = 0;  // dense FP16/BF16 tensor, FP32 accumulate (peak_tflops_fp16); 0 unknown
  // Per stage: class -> speed relative to one T10; "" is the value for every class.
  std::map<config::StageKind, std::map<std::string, double>> speed;
  double speed_for(config::StageKind stage, const std::string& job_class) const;
};

struct StageReference {
  std::string gpu;                        // the reference device's model
  int gpus = 1;                           // in one pool
  std::map<std::string, double> seconds;  // by class
  std::string source;
};

// A model's declared FLOPs per denoising step at one geometry (configs/gpus.json model_flops):
// the MFU numerator for runtimes that count none (ComfyUI).  `match`: lower-case substrings of a
// stage's runtime settings (its workflow template names the model).
struct ModelFlops {
  std::string name;
  std::vector<std::string> match;
  std::uint32_t width = 0, height = 0, frames = 0;
  double pflop_per_step = 0;  // PFLOP (1e15 FLOP) per denoising step (field pflop_per_step)
};

struct GpuTable {
  std::vector<config::JobClass> classes;
  std::map<config::StageKind, StageReference> reference;
  std::map<config::StageKind, double> parallel_efficiency;
  std::vector<ModelFlops> model_flops;
  std::vector<GpuInfo> gpus;

  // By model or alias, case-insensitive, ignoring spaces and dashes; nullptr if unknown.
  const GpuInfo* find(const std::string& model) const;
  std::string known_models() const;  // "T10, RTX 3080 Ti, ..." for error messages
  double parallel_speedup(config::StageKind stage, int gpus) const;  // 1 + (gpus-1) * efficiency
  // A device by the name NVML gives it ("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 3080 Ti"):
  // find(), else the longest model or alias contained in the name; nullptr if none is.
  const GpuInfo* find_device(const std::string& nvml_name) const;
  // MFU's denominator: `gpus` x the model's dense FP16/BF16 peak, in GFLOP/s; 0 if unknown.
  double peak_gflops(const std::string& model, std::size_t gpus) const;
  // MFU's numerator for a sample task whose runtime counts no FLOPs: the declared FLOPs of the
  // model its settings name (model_flops `match`, case-insensitive) at exactly this geometry,
  // times `steps`, in GFLOP; 0 when no entry matches.
  double declared_gflop(const std::string& settings, std::uint32_t width, std::uint32_t height,
                        std::uint32_t frames, std::uint32_t steps) const;
  // Expected seconds of `stage` for one job of `job_class` on a pool of `gpus` x `model`.
  Result<double> stage_seconds(const std::string& model, int gpus, config::StageKind stage,
                               const std::string& job_class) const;
};

// `path` empty: the compiled-in configs/gpus.json.
Result<GpuTable> load_gpu_table(const std::string& path = {});
Result<GpuTable> parse_gpu_table(const nlohmann::json& j);

}  // namespace h3pipe::schedule
