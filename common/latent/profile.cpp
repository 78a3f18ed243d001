#include "common/latent/profile.h"

#include <fmt/format.h>

#include <algorithm>

namespace h3pipe::latent {
namespace {

constexpr std::int64_t L = AudioRule::kLength;

// 48 kHz stereo, one latent step per 86 samples (h3pipe's builtin audio VAE).
AudioRule builtin_audio() { return {{1, 32, 2, L}, 48000, 86, 0}; }
// LTX-2's audio latent: 8 channels x L x 16 mel bins, 25 steps a second; ComfyUI rounds L
// either way depending on the node, so one step either side is accepted.
AudioRule ltx2_audio() { return {{1, 8, L, 16}, 25, 1, 1}; }

// docs/latent.md, "Latent profiles": the one table every reader and the planner use.  Built on
// first use (a function-local static), so other translation units' statics may use it.
const std::vector<LatentProfile>& table() {
  static const std::vector<LatentProfile> kBuiltins = {
      // name           C    tf  sf  frame rule          multiple audio
      {"builtin",       24,  4,  16, FrameRule::kFloor,  16,      builtin_audio()},
      {"wan2.1",        16,  4,  8,  FrameRule::kStrict, 16,      {}},
      {"wan2.2-5b",     48,  4,  16, FrameRule::kStrict, 32,      {}},
      {"hunyuanvideo",  16,  4,  8,  FrameRule::kStrict, 16,      {}},
      {"ltxv",          128, 8,  32, FrameRule::kStrict, 32,      {}},
      {"mochi",         12,  6,  8,  FrameRule::kStrict, 16,      {}},
      {"ltx2",          128, 8,  32, FrameRule::kStrict, 32,      ltx2_audio()},
  };
  return kBuiltins;
}

}  // namespace

std::string to_string(const JobSize& j) {
  return fmt::format("{}x{}x{}@{}", j.width, j.height, j.frames, j.fps);
}

const char* frame_rule_name(FrameRule r) {
  return r == FrameRule::kStrict ? "strict" : "floor";
}

std::optional<AudioRule> named_audio_rule(std::string_view name) {
  if (name == "none") return AudioRule{};
  if (name == "builtin") return builtin_audio();
  if (name == "ltx2") return ltx2_audio();
  return std::nullopt;
}

const std::vector<LatentProfile>& builtin_profiles() { return table(); }

const LatentProfile* find_builtin_profile(std::string_view name) {
  for (const auto& p : table())
    if (p.name == name) return &p;
  return nullptr;
}

const LatentProfile& builtin_profile() { return table().front(); }

std::string profile_problem(const LatentProfile& p) {
  if (p.channels == 0) return "channels must be at least 1";
  if (p.temporal_factor == 0) return "temporal_factor must be at least 1";
  if (p.spatial_factor == 0) return "spatial_factor must be at least 1";
  if (p.frame_offset == 0) return "frame_offset must be at least 1";
  if (p.temporal_steps == 0) return "temporal_steps must be at least 1";
  if (p.size_multiple == 0 || p.size_multiple % p.spatial_factor != 0)
    return fmt::format("size_multiple {} must be a positive multiple of spatial_factor {}",
                       p.size_multiple, p.spatial_factor);
  if (!p.audio.present()) return {};
  int length_axes = 0;
  for (auto d : p.audio.shape) {
    if (d == AudioRule::kLength) ++length_axes;
    else if (d < 1) return fmt::format("audio shape sizes must be at least 1, got {}", d);
  }
  if (length_axes != 1)
    return fmt::format("audio shape must have exactly one \"L\" axis, it has {}", length_axes);
  if (p.audio.shape.size() > 8) return "audio shape has more than 8 axes";
  if (p.audio.rate_num == 0 || p.audio.rate_den == 0)
    return "audio rate must be two positive integers [per_seconds, divisor]";
  return {};
}

std::vector<JobIssue> job_fits(const LatentProfile& p, const JobSize& job) {
  std::vector<JobIssue> out;
  for (auto [field, v] : {std::pair{"width", job.width}, std::pair{"height", job.height}}) {
    if (v == 0 || v % p.size_multiple != 0)
      out.push_back({field, fmt::format("{} is not a multiple of {} (latent profile {}, spatial "
                                        "factor {})",
                                        v, p.size_multiple, p.name, p.spatial_factor)});
  }
  const std::uint32_t tf = std::max<std::uint32_t>(p.temporal_factor, 1);
  const std::uint32_t off = std::max<std::uint32_t>(p.frame_offset, 1);
  if (job.frames == 0) {
    out.push_back({"frames", "must be at least 1"});
  } else if (job.frames < off) {
    out.push_back({"frames", fmt::format("profile {} needs at least {} frames, got {}", p.name, off,
                                         job.frames)});
  } else if (p.frame_rule == FrameRule::kStrict && tf > 1 && (job.frames - off) % tf != 0) {
    const std::uint64_t up = (std::uint64_t{job.frames - off} / tf + 1) * tf + off;
    out.push_back({"frames", fmt::format("profile {} needs {}k+{} frames (e.g. {}), got {}",
                                         p.name, tf, off, up, job.frames)});
  }
  if (p.has_audio() && job.fps == 0)
    out.push_back({"fps", fmt::format("must be at least 1: profile {} carries audio", p.name)});
  return out;
}

std::uint64_t latent_frames(const LatentProfile& p, std::uint32_t frames) {
  const std::uint32_t off = std::max<std::uint32_t>(p.frame_offset, 1);
  if (frames < off) return 0;
  const std::uint64_t k = (frames - off) / std::max<std::uint32_t>(p.temporal_factor, 1);
  return k * std::max<std::uint32_t>(p.temporal_steps, 1) + p.latent_offset;
}

}  // namespace h3pipe::latent
