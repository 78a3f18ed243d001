#pragma once
// Latent profiles (docs/latent.md, "Latent profiles"): what latent a model makes for a job of
// width W, height H, F frames at fps.  A profile is data: channel count, temporal and spatial
// factors, frame rule, size multiple, frame rate and audio rule.  The built-in profiles are one
// table, integrations/comfyui/h3pipe_nodes/latent_profiles.json, compiled in (profile.cpp) and
// read by the ComfyUI node pack too; a cluster config declares more with the same fields
// (profile_json.h reads both).
//
// Threading: everything here is pure; the built-in table is immutable.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace h3pipe::latent {

// The job geometry a latent is made for.
struct JobSize {
  std::uint32_t width = 0, height = 0, frames = 0, fps = 0;
  bool operator==(const JobSize&) const = default;
};
std::string to_string(const JobSize& j);  // "832x480x81@16"

// How many latent frames T' a job of F frames has.  With the defaults frame_offset = 1,
// temporal_steps = 1, latent_offset = 1 below (every built-in profile):
enum class FrameRule {
  kStrict,  // F = k * temporal_factor + 1 only (Wan's 4k+1, LTX-Video's 8k+1), T' = k + 1
  kFloor,   // any F >= 1, T' = floor((F - 1) / temporal_factor) + 1 (h3pipe's builtin grid)
};
// In general k = (F - frame_offset) / temporal_factor (exact for kStrict, floored for kFloor)
// and T' = k * temporal_steps + latent_offset: MiniMax H3's nodes take F = 17k + 5 frames and
// make T' = 5k + 2 (the built-in profile minimax-h3).
const char* frame_rule_name(FrameRule r);  // "strict", "floor"

// How L = F / fps * rate_num / rate_den becomes a whole number.
enum class Rounding {
  kCeil,     // up (h3pipe's builtin audio VAE, LTX-2)
  kNearest,  // to nearest, halves to even: Python's round(), as ComfyUI's MiniMax H3 nodes use it
};
const char* rounding_name(Rounding r);  // "ceil", "nearest"

// The audio tensor a profile carries, as data: its shape with one axis being the length L,
// L = round(F / fps * rate_num / rate_den) by `rounding`, accepted within +-tolerance.  No
// shape: no audio.
struct AudioRule {
  static constexpr std::int64_t kLength = -1;  // marks the L axis in `shape`
  std::vector<std::int64_t> shape;             // e.g. {1, 32, 2, kLength}; empty = no audio
  std::uint32_t rate_num = 0, rate_den = 1;    // latent steps per second = rate_num / rate_den
  Rounding rounding = Rounding::kCeil;
  std::uint32_t tolerance = 0;
  bool present() const { return !shape.empty(); }
  bool operator==(const AudioRule&) const = default;
};
// L for F frames at fps (0 when fps is 0).
std::uint64_t audio_length(const AudioRule& a, std::uint32_t frames, std::uint32_t fps);

// The named audio rules a config may refer to: "none", and the audio rule of each built-in
// profile that has one by that profile's name ("builtin", "ltx2", "minimax-h3").
std::optional<AudioRule> named_audio_rule(std::string_view name);

struct LatentProfile {
  std::string name;
  std::uint32_t channels = 0;
  std::uint32_t temporal_factor = 1;
  std::uint32_t spatial_factor = 1;
  FrameRule frame_rule = FrameRule::kStrict;
  std::uint32_t size_multiple = 16;  // width and height must be multiples of it
  AudioRule audio;
  std::uint32_t frame_offset = 1, temporal_steps = 1, latent_offset = 1;  // see FrameRule
  std::uint32_t fps = 0;  // the only frame rate the model makes; 0: any
  std::string models{};   // which models make it, for listings and errors
  bool has_audio() const { return audio.present(); }
  bool operator==(const LatentProfile&) const = default;
};

// The built-in table: builtin, wan2.1, wan2.2-5b, hunyuanvideo, ltxv, mochi, ltx2, minimax-h3
// (latent_profiles.json, in that order: "auto" readers take the first that fits).
const std::vector<LatentProfile>& builtin_profiles();
const LatentProfile* find_builtin_profile(std::string_view name);
const LatentProfile& builtin_profile();  // "builtin", h3pipe's own grid

// Why a profile's numbers cannot describe a latent ("" when they can): factors and the multiple
// at least 1, channels at least 1, the multiple a multiple of the spatial factor, frame_offset
// and temporal_steps at least 1, an audio rule with exactly one L axis, positive fixed axes and
// rate_den >= 1.
std::string profile_problem(const LatentProfile& p);

// T' for F frames by the profile's frame rule (0 when F < frame_offset).
std::uint64_t latent_frames(const LatentProfile& p, std::uint32_t frames);

// The smallest frame count >= F that the profile's frame rule accepts (what ComfyUI's nodes
// snap a `length` up to), F itself when it fits.
std::uint32_t next_valid_frames(const LatentProfile& p, std::uint32_t frames);

// Where a job does not fit a profile: the spec field ("width", "height", "frames", "fps") and
// the rule, e.g. {"frames", "profile wan2.1 needs 4k+1 frames (e.g. 81), got 80"}.
struct JobIssue {
  std::string field, reason;
};
std::vector<JobIssue> job_fits(const LatentProfile& p, const JobSize& job);

}  // namespace h3pipe::latent
