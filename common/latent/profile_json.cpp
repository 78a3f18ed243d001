#include "common/latent/profile_json.h"

#include <fmt/format.h>

namespace h3pipe::latent {
namespace {

using nlohmann::json;

void read_audio(const json& j, const std::string& path, AudioRule& a, config::Errors& e,
                bool allow_named) {
  if (j.is_string() && allow_named) {
    auto named = named_audio_rule(j.get<std::string>());
    if (!named) {
      std::string names = "none";
      for (const auto& p : builtin_profiles())
        if (p.has_audio()) names += ", " + p.name;
      return e.add(path,
                   fmt::format("\"{}\": expected {} or an object", j.get<std::string>(), names));
    }
    a = *named;
    return;
  }
  config::ObjectReader r(j, path, e);
  if (!r.ok()) return;
  if (auto* s = r.raw("shape")) {
    if (!s->is_array() || s->empty() || s->size() > 8) {
      e.add(r.path("shape"), "expected an array of 1 to 8 sizes, one of them \"L\"");
    } else {
      for (std::size_t i = 0; i < s->size(); ++i) {
        const auto& d = (*s)[i];
        if (d.is_string() && d.get<std::string>() == "L")
          a.shape.push_back(AudioRule::kLength);
        else if (d.is_number_unsigned() && d.get<std::uint64_t>() >= 1 &&
                 d.get<std::uint64_t>() <= 65536)
          a.shape.push_back(static_cast<std::int64_t>(d.get<std::uint64_t>()));
        else
          e.add(fmt::format("{}/{}", r.path("shape"), i), "expected a size in [1, 65536] or \"L\"");
      }
    }
  } else {
    e.add(r.path("shape"), "required but missing");
  }
  if (auto* v = r.raw("rate")) {
    if (!v->is_array() || v->size() != 2 || !(*v)[0].is_number_unsigned() ||
        !(*v)[1].is_number_unsigned() || (*v)[0].get<std::uint64_t>() < 1 ||
        (*v)[1].get<std::uint64_t>() < 1 || (*v)[0].get<std::uint64_t>() > 1000000 ||
        (*v)[1].get<std::uint64_t>() > 1000000)
      e.add(r.path("rate"),
            "expected [per_second, divisor], two integers in [1, 1000000]: L = frames / "
            "fps * per_second / divisor, rounded by \"rounding\"");
    else {
      a.rate_num = static_cast<std::uint32_t>((*v)[0].get<std::uint64_t>());
      a.rate_den = static_cast<std::uint32_t>((*v)[1].get<std::uint64_t>());
    }
  } else {
    e.add(r.path("rate"), "required but missing");
  }
  std::string rounding = rounding_name(a.rounding);
  r.get("rounding", rounding);
  if (rounding == "ceil")
    a.rounding = Rounding::kCeil;
  else if (rounding == "nearest")
    a.rounding = Rounding::kNearest;
  else
    e.add(r.path("rounding"), fmt::format("\"{}\": expected ceil or nearest (halves to even, as "
                                          "Python's round)",
                                          rounding));
  r.get("tolerance", a.tolerance, 0, 1000);
}

}  // namespace

void read_profile(const json& j, const std::string& path, LatentProfile& p, config::Errors& e,
                  bool allow_named_audio) {
  config::ObjectReader r(j, path, e);
  if (!r.ok()) return;
  if (!allow_named_audio) r.raw("name");  // the table's entries carry it; the caller owns p.name
  r.get("models", p.models);
  r.get("channels", p.channels, 1, 65536, true);
  r.get("temporal_factor", p.temporal_factor, 1, 1024, true);
  r.get("spatial_factor", p.spatial_factor, 1, 1024, true);
  p.size_multiple = 0;
  r.get("size_multiple", p.size_multiple, 1, 4096);
  if (p.size_multiple == 0) p.size_multiple = p.spatial_factor;
  r.get("frame_offset", p.frame_offset, 1, 1024);
  r.get("temporal_steps", p.temporal_steps, 1, 1024);
  r.get("latent_offset", p.latent_offset, 0, 1024);
  r.get("fps", p.fps, 0, 1000);
  std::string rule = frame_rule_name(p.frame_rule);
  r.get("frame_rule", rule);
  if (rule == "strict")
    p.frame_rule = FrameRule::kStrict;
  else if (rule == "floor")
    p.frame_rule = FrameRule::kFloor;
  else
    e.add(r.path("frame_rule"),
          fmt::format("\"{}\": expected strict (F = k * temporal_factor + frame_offset) or floor",
                      rule));
  if (auto* a = r.raw("audio")) read_audio(*a, r.path("audio"), p.audio, e, allow_named_audio);
  if (r.has("channels") && r.has("temporal_factor") && r.has("spatial_factor")) {
    if (auto why = profile_problem(p); !why.empty()) e.add(path, why);
  }
}

json profile_to_json(const LatentProfile& p) {
  json j = {{"name", p.name},
            {"channels", p.channels},
            {"temporal_factor", p.temporal_factor},
            {"spatial_factor", p.spatial_factor},
            {"frame_rule", frame_rule_name(p.frame_rule)},
            {"size_multiple", p.size_multiple},
            {"frame_offset", p.frame_offset},
            {"temporal_steps", p.temporal_steps},
            {"latent_offset", p.latent_offset},
            {"fps", p.fps}};
  if (!p.models.empty()) j["models"] = p.models;
  if (p.has_audio()) {
    json shape = json::array();
    for (auto d : p.audio.shape)
      shape.push_back(d == AudioRule::kLength ? json("L") : json(static_cast<std::uint64_t>(d)));
    j["audio"] = {{"shape", shape},
                  {"rate", {p.audio.rate_num, p.audio.rate_den}},
                  {"rounding", rounding_name(p.audio.rounding)},
                  {"tolerance", p.audio.tolerance}};
  }
  return j;
}

}  // namespace h3pipe::latent
