#include "common/api/videos.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/latent/profile.h"

namespace h3pipe::api {
namespace {

bool parse_uint(const std::string& s, std::uint64_t& out) {
  if (s.empty() || s.size() > 19) return false;
  out = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    out = out * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return true;
}

// The request field a spec field comes from.
std::string param_of(const std::string& spec_field) {
  if (spec_field == "width" || spec_field == "height") return "size";
  if (spec_field == "jobClass") return "model";
  if (spec_field == "negativePrompt") return "negative_prompt";
  if (spec_field == "referenceImage") return "input_reference";
  return spec_field;
}

}  // namespace

std::variant<VideoRequest, FieldProblem> parse_video_request(
    const std::map<std::string, std::string>& fields, const config::Cluster& cluster,
    const std::string& job_id, const std::string& reference_image) {
  static const std::set<std::string> kKnown = {
      "prompt", "model", "size", "seconds", "negative_prompt", "fps", "frames", "steps", "seed"};
  for (const auto& [k, v] : fields)
    if (!kKnown.count(k))
      return FieldProblem{k, fmt::format("{}: unknown field (expected one of prompt, model, size, "
                                         "seconds, negative_prompt, fps, frames, steps, seed)",
                                         k)};
  auto get = [&](const char* k) -> std::string {
    auto it = fields.find(k);
    return it == fields.end() ? "" : it->second;
  };
  VideoRequest out;
  nlohmann::json line = {{"jobId", job_id}};
  if (fields.count("prompt")) line["prompt"] = get("prompt");
  out.model = get("model").empty() ? "default" : get("model");
  const config::JobClass* cls = nullptr;
  for (const auto& c : cluster.classes)
    if (c.name == out.model) cls = &c;
  if (out.model != "default") {
    if (!cls)
      return FieldProblem{
          "model",
          fmt::format("model: \"{}\" is not a job class of this cluster (known: default{})",
                      out.model, [&] {
                        std::string s;
                        for (const auto& c : cluster.classes) s += ", " + c.name;
                        return s;
                      }())};
    line["jobClass"] = out.model;
  }
  std::uint64_t w = cls ? cls->width : 0, h = cls ? cls->height : 0;
  if (const std::string size = get("size"); !size.empty()) {
    const auto x = size.find('x');
    if (x == std::string::npos || !parse_uint(size.substr(0, x), w) ||
        !parse_uint(size.substr(x + 1), h) || w == 0 || h == 0 || w > 65535 || h > 65535)
      return FieldProblem{"size", fmt::format("size: expected \"WIDTHxHEIGHT\" in pixels such as "
                                              "\"832x480\", got \"{}\"",
                                              size)};
  }
  if (w) line["width"] = w;
  if (h) line["height"] = h;
  for (const char* k : {"fps", "frames", "steps", "seed"}) {
    const std::string v = get(k);
    if (v.empty()) continue;
    std::uint64_t n = 0;
    if (!parse_uint(v, n) || (std::string(k) != "seed" && n > 0xffffffffull))
      return FieldProblem{k, fmt::format("{}: expected a non-negative integer, got \"{}\"", k, v)};
    line[k] = std::string(k) == "seed" ? nlohmann::json(std::to_string(n)) : nlohmann::json(n);
  }
  if (!get("negative_prompt").empty()) line["negativePrompt"] = get("negative_prompt");
  if (!reference_image.empty()) line["referenceImage"] = reference_image;
  if (const std::string secs = get("seconds"); !secs.empty() && !line.contains("frames")) {
    char* end = nullptr;
    const double s = std::strtod(secs.c_str(), &end);
    if (end == secs.c_str() || *end != '\0' || !(s > 0) || s > 3600)
      return FieldProblem{"seconds",
                          fmt::format("seconds: expected a number of seconds above 0 such as "
                                      "\"4\", got \"{}\"",
                                      secs)};
    auto prof = cluster.latent_profile_for(out.model == "default" ? "" : out.model);
    if (!prof.ok()) return FieldProblem{"model", prof.error().message};
    // The request's fps, else the one rate the profile makes (minimax-h3: 24), else 24.
    std::uint32_t fps = spec::kDefaultFps;
    if (line.contains("fps") && line["fps"].get<std::uint64_t>() > 0)
      fps = line["fps"].get<std::uint32_t>();
    else if (prof->fps > 0)
      fps = prof->fps, line["fps"] = prof->fps;
    const auto raw = static_cast<std::uint64_t>(std::ceil(s * fps - 1e-9));
    if (raw > 0xffffffull)
      return FieldProblem{"seconds", fmt::format("seconds: {} is too long", secs)};
    std::uint32_t f = latent::next_valid_frames(*prof, static_cast<std::uint32_t>(raw));
    // A floor-rule profile (builtin) takes any count; seconds are rounded up to the next count
    // its latent grid holds whole (tf x k + 1: 2 s at 24 fps -> 49), as a strict profile needs.
    if (prof->frame_rule == latent::FrameRule::kFloor && prof->temporal_factor > 1)
      while ((f - 1) % prof->temporal_factor != 0) ++f;
    line["frames"] = f;
    out.seconds = secs;
  } else if (!line.contains("frames") && cls && cls->frames) {
    line["frames"] = cls->frames;
  }
  out.batch = spec::parse_batch(line.dump() + "\n", cluster);
  if (!out.batch.errors.empty()) {
    const auto& e = out.batch.errors.front().error;
    return FieldProblem{param_of(e.field), e.to_string()};
  }
  const pb::JobSpec& s = out.batch.specs.front();
  out.size = fmt::format("{}x{}", s.width(), s.height());
  if (out.seconds.empty()) {
    const double secs = static_cast<double>(s.frames()) / (s.fps() ? s.fps() : spec::kDefaultFps);
    out.seconds = fmt::format("{:g}", secs);
  }
  return out;
}

}  // namespace h3pipe::api
