#include "common/latent/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common/latent/latent_profiles_json.h"  // generated: kLatentProfilesJson
#include "common/latent/profile_json.h"

namespace h3pipe::latent {
namespace {

// The built-in table, parsed from latent_profiles.json (compiled in by CMakeLists.txt) on first
// use (a function-local static, so other translation units' statics may use it).  The file is
// part of the source: a broken one is a broken build, reported loudly at the first use.
std::vector<LatentProfile> parse_table() {
  // json-parse: own text (built in)
  const auto j = nlohmann::json::parse(kLatentProfilesJson, nullptr, /*allow_exceptions=*/false);
  config::Errors e;
  std::vector<LatentProfile> out;
  if (!j.is_object() || !j.contains("profiles") || !j["profiles"].is_array()) {
    e.add("/profiles", "expected an array of profiles");
  } else {
    for (std::size_t i = 0; i < j["profiles"].size(); ++i) {
      const auto& entry = j["profiles"][i];
      const std::string path = fmt::format("/profiles/{}", i);
      LatentProfile p;
      if (entry.is_object() && entry.contains("name") && entry["name"].is_string())
        p.name = entry["name"].get<std::string>();
      else
        e.add(path + "/name", "required: a string");
      read_profile(entry, path, p, e, /*allow_named_audio=*/false);
      out.push_back(std::move(p));
    }
  }
  if (!e.empty()) {
    fmt::print(stderr,
               "h3pipe: the built-in latent profile table (latent_profiles.json) is "
               "invalid:\n{}\n",
               e.joined());
    std::abort();
  }
  return out;
}

const std::vector<LatentProfile>& table() {
  static const std::vector<LatentProfile> kBuiltins = parse_table();
  return kBuiltins;
}

}  // namespace

std::string to_string(const JobSize& j) {
  return fmt::format("{}x{}x{}@{}", j.width, j.height, j.frames, j.fps);
}

const char* frame_rule_name(FrameRule r) {
  return r == FrameRule::kStrict ? "strict" : "floor";
}

const char* rounding_name(Rounding r) {
  return r == Rounding::kCeil ? "ceil" : "nearest";
}

std::uint64_t audio_length(const AudioRule& a, std::uint32_t frames, std::uint32_t fps) {
  const std::uint64_t num = std::uint64_t{frames} * a.rate_num;
  const std::uint64_t den = std::uint64_t{fps} * std::max<std::uint32_t>(a.rate_den, 1);
  if (den == 0) return 0;
  const std::uint64_t q = num / den, r = num % den;
  if (a.rounding == Rounding::kCeil) return q + (r != 0);
  if (2 * r != den) return q + (2 * r > den);
  return q + (q % 2);  // a half: to even, as Python's round()
}

std::optional<AudioRule> named_audio_rule(std::string_view name) {
  if (name == "none") return AudioRule{};
  const LatentProfile* p = find_builtin_profile(name);
  if (p == nullptr || !p->has_audio()) return std::nullopt;
  return p->audio;
}

const std::vector<LatentProfile>& builtin_profiles() {
  return table();
}

const LatentProfile* find_builtin_profile(std::string_view name) {
  for (const auto& p : table())
    if (p.name == name) return &p;
  return nullptr;
}

const LatentProfile& builtin_profile() {
  return table().front();
}

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
    if (d == AudioRule::kLength)
      ++length_axes;
    else if (d < 1)
      return fmt::format("audio shape sizes must be at least 1, got {}", d);
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
    // "e.g." names the next valid count: what ComfyUI's nodes snap a length up to.
    out.push_back({"frames", fmt::format("profile {} needs {}k+{} frames (e.g. {}), got {}", p.name,
                                         tf, off, next_valid_frames(p, job.frames), job.frames)});
  }
  if (p.fps != 0 && job.fps != p.fps)
    out.push_back(
        {"fps", fmt::format("profile {} makes {} fps only, got {}", p.name, p.fps, job.fps)});
  else if (p.has_audio() && job.fps == 0)
    out.push_back({"fps", fmt::format("must be at least 1: profile {} carries audio", p.name)});
  return out;
}

std::uint32_t next_valid_frames(const LatentProfile& p, std::uint32_t frames) {
  const std::uint32_t tf = std::max<std::uint32_t>(p.temporal_factor, 1);
  const std::uint32_t off = std::max<std::uint32_t>(p.frame_offset, 1);
  if (frames <= off) return off;
  if (p.frame_rule == FrameRule::kFloor) return frames;
  const std::uint64_t k = (std::uint64_t{frames} - off + tf - 1) / tf;
  const std::uint64_t up = k * tf + off;
  return up > UINT32_MAX ? UINT32_MAX : static_cast<std::uint32_t>(up);
}

std::uint64_t latent_frames(const LatentProfile& p, std::uint32_t frames) {
  const std::uint32_t off = std::max<std::uint32_t>(p.frame_offset, 1);
  if (frames < off) return 0;
  const std::uint64_t k = (frames - off) / std::max<std::uint32_t>(p.temporal_factor, 1);
  return k * std::max<std::uint32_t>(p.temporal_steps, 1) + p.latent_offset;
}

}  // namespace h3pipe::latent
