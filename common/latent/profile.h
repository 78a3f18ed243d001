#pragma once
// Latent profiles (docs/latent.md, "Latent profiles"): what latent a model makes for a job of
// width W, height H, F frames at fps.  A profile is data: channel count, temporal and spatial
// factors, frame rule, size multiple and audio rule.  The built-in profiles are one table
// (profile.cpp); a cluster config declares more with the same fields (common/config).
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
// make T' = 5k + 2 (configs/comfyui/two_host_comfyui.json declares that profile).
const char* frame_rule_name(FrameRule r);  // "strict", "floor"

// The audio tensor a profile carries, as data: its shape with one axis being the length L,
// L = ceil(F / fps * rate_num / rate_den), accepted within +-tolerance.  No shape: no audio.
struct AudioRule {
  static constexpr std::int64_t kLength = -1;  // marks the L axis in `shape`
  std::vector<std::int64_t> shape;             // e.g. {1, 32, 2, kLength}; empty = no audio
  std::uint32_t rate_num = 0, rate_den = 1;    // latent steps per second = rate_num / rate_den
  std::uint32_t tolerance = 0;
  bool present() const { return !shape.empty(); }
  bool operator==(const AudioRule&) const = default;
};
// The named audio rules a config may refer to: "none", "builtin" (1, 32, 2, L) with
// L = ceil(F / fps * 48000 / 86), "ltx2" (1, 8, L, 16) with L = ceil(F / fps * 25) +- 1.
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
  bool has_audio() const { return audio.present(); }
  bool operator==(const LatentProfile&) const = default;
};

// The built-in table: builtin, wan2.1, wan2.2-5b, hunyuanvideo, ltxv, mochi, ltx2.
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

// Where a job does not fit a profile: the spec field ("width", "height", "frames", "fps") and
// the rule, e.g. {"frames", "profile wan2.1 needs 4k+1 frames (e.g. 81), got 80"}.
struct JobIssue {
  std::string field, reason;
};
std::vector<JobIssue> job_fits(const LatentProfile& p, const JobSize& job);

}  // namespace h3pipe::latent
