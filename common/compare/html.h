#pragma once
// `h3pipe compare --html FILE`: one self-contained page (no external resource: images are
// data: URIs, the style inline) with compare.json's table and, per job, a frame strip of each
// decoder's worst frame beside the reference's same frame and their difference, viewable offline.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "common/core/result.h"

namespace h3pipe::compare {

// Differences are drawn |reference - decoder| x kDiffGain per channel, clipped at 255.
inline constexpr int kDiffGain = 8;
// Frame strips for at most this many jobs (the table has every job).
inline constexpr int kMaxStripJobs = 8;

// The page for a compare.json document whose MP4s lie under doc["out_dir"].
Result<std::string> render_html(const nlohmann::json& doc);

}  // namespace h3pipe::compare
