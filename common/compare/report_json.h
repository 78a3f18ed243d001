#pragma once
// compare.json's pieces (fields: docs/compare.md) and the text table.  Private to common/compare.
// Infinite figures (identical frames: PSNR, SNR) are written as null.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/compare/compare.h"
#include "common/compare/quality.h"
#include "common/runtime/runtime.h"

namespace h3pipe::compare {

// What was measured for one decoder on one job.
struct Measured {
  bool is_reference = false;
  Summary summary;
  std::vector<FilterFrame> filter_frames;  // empty: no per-frame figures
  std::vector<PixelFrame> pixel_frames;
  std::optional<AudioDiff> audio;
};

nlohmann::json job_header(const Job& job, const std::string& latent_sha);
nlohmann::json result_json(const config::Pool& pool, const std::filesystem::path& mp4,
                           const runtime::StageOutput& out, double seconds,
                           const std::filesystem::path& receipt, const std::string& reference_sha,
                           const Measured& m, const std::filesystem::path& out_dir,
                           const nlohmann::json& ran_on);
// Per decoder over every job: mean decode seconds, mean and worst PSNR, SSIM, MAE, frame counts.
nlohmann::json summary_json(const nlohmann::json& doc);

}  // namespace h3pipe::compare
