#include "common/schedule/gpu_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>

#include "common/core/bounded_file.h"
#include "common/core/json_parse.h"
#include "common/schedule/embedded_gpus.h"

namespace h3pipe::schedule {
namespace {

using config::StageKind;

constexpr std::pair<const char*, StageKind> kStages[] = {
    {"encode", StageKind::kEncode}, {"sample", StageKind::kSample}, {"decode", StageKind::kDecode}};

std::string norm(std::string_view s) {
  std::string o;
  for (char c : s)
    if (c != ' ' && c != '-' && c != '_')
      o += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

}  // namespace

double GpuInfo::speed_for(StageKind stage, const std::string& job_class) const {
  auto it = speed.find(stage);
  if (it == speed.end()) return 0;
  if (auto c = it->second.find(job_class); c != it->second.end()) return c->second;
  if (auto c = it->second.find(""); c != it->second.end()) return c->second;
  if (auto c = it->second.find("default"); c != it->second.end()) return c->second;
  return 0;
}

const GpuInfo* GpuTable::find(const std::string& model) const {
  const std::string m = norm(model);
  for (const auto& g : gpus) {
    if (norm(g.model) == m) return &g;
    for (const auto& a : g.aliases)
      if (norm(a) == m) return &g;
  }
  return nullptr;
}

std::string GpuTable::known_models() const {
  std::string s;
  for (const auto& g : gpus) s += (s.empty() ? "" : ", ") + g.model;
  return s;
}

const GpuInfo* GpuTable::find_device(const std::string& nvml_name) const {
  if (const GpuInfo* g = find(nvml_name)) return g;
  const std::string n = norm(nvml_name);
  const GpuInfo* best = nullptr;
  std::size_t best_len = 0;
  for (const auto& g : gpus) {
    std::vector<std::string> names = g.aliases;
    names.push_back(g.model);
    for (const auto& a : names)
      if (const std::string k = norm(a); k.size() > best_len && n.find(k) != std::string::npos)
        best = &g, best_len = k.size();
  }
  return best;
}

double GpuTable::peak_gflops(const std::string& model, std::size_t n) const {
  const GpuInfo* g = find_device(model);
  return g && g->peak_tflops > 0
             ? g->peak_tflops * 1e3 * static_cast<double>(std::max<std::size_t>(1, n))
             : 0;
}

double GpuTable::declared_gflop(const std::string& settings, std::uint32_t width,
                                std::uint32_t height, std::uint32_t frames,
                                std::uint32_t steps) const {
  std::string lower = settings;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const auto& mf : model_flops)
    if (mf.width == width && mf.height == height && mf.frames == frames &&
        std::any_of(mf.match.begin(), mf.match.end(),
                    [&](const std::string& k) { return lower.find(k) != std::string::npos; }))
      return mf.pflop_per_step * 1e6 * steps;  // PFLOP -> GFLOP
  return 0;
}

double GpuTable::parallel_speedup(StageKind stage, int n) const {
  auto it = parallel_efficiency.find(stage);
  const double e = it == parallel_efficiency.end() ? 0 : it->second;
  return 1 + std::max(0, n - 1) * e;
}

Result<double> GpuTable::stage_seconds(const std::string& model, int n, StageKind stage,
                                       const std::string& job_class) const {
  auto ref = reference.find(stage);
  if (ref == reference.end())
    return make_error(errc::gpus::kReference, "the GPU table has no reference for stage {}",
                      config::stage_name(stage));
  auto secs = ref->second.seconds.find(job_class);
  if (secs == ref->second.seconds.end())
    return make_error(errc::gpus::kClass,
                      "the GPU table has no reference {} time for job class \"{}\"",
                      config::stage_name(stage), job_class);
  const GpuInfo* ref_gpu = find(ref->second.gpu);
  const GpuInfo* gpu = find(model);
  if (!ref_gpu || !gpu)
    return make_error(errc::gpus::kModel, "unknown GPU model \"{}\"",
                      gpu ? ref->second.gpu : model);
  const double ref_speed =
      ref_gpu->speed_for(stage, job_class) * parallel_speedup(stage, ref->second.gpus);
  const double speed = gpu->speed_for(stage, job_class) * parallel_speedup(stage, n);
  if (ref_speed <= 0 || speed <= 0)
    return make_error(errc::gpus::kSpeed, "no {} speed for {} (class {})",
                      config::stage_name(stage), model, job_class);
  return secs->second * ref_speed / speed;
}

Result<GpuTable> parse_gpu_table(const nlohmann::json& j) {
  GpuTable t;
  try {
    for (const auto& c : j.at("classes"))
      t.classes.push_back({c.at("name").get<std::string>(),
                           c.at("width").get<std::uint32_t>(),
                           c.at("height").get<std::uint32_t>(),
                           c.at("frames").get<std::uint32_t>(),
                           c.at("steps").get<std::uint32_t>(),
                           {}});
    for (const auto& [name, stage] : kStages) {
      const auto& r = j.at("reference").at(name);
      StageReference ref;
      ref.gpu = r.at("gpu").get<std::string>();
      ref.gpus = r.at("gpus").get<int>();
      for (auto it = r.at("seconds").begin(); it != r.at("seconds").end(); ++it)
        ref.seconds[it.key()] = it.value().get<double>();
      ref.source = r.value("source", "");
      t.reference[stage] = ref;
      t.parallel_efficiency[stage] = j.at("parallel_efficiency").at(name).at("value").get<double>();
    }
    for (const auto& g : j.at("gpus")) {
      GpuInfo info;
      info.model = g.at("model").get<std::string>();
      info.aliases = g.value("aliases", std::vector<std::string>{});
      info.memory_gb = g.at("memory_gb").get<double>();
      info.bandwidth_gbs = g.at("bandwidth_gbs").get<double>();
      info.peak_tflops = g.value("peak_tflops_fp16", 0.0);
      for (const auto& [name, stage] : kStages) {
        const auto& s = g.at("speed").at(name);
        if (s.is_number()) {
          info.speed[stage][""] = s.get<double>();
        } else {
          for (auto it = s.begin(); it != s.end(); ++it)
            info.speed[stage][it.key()] = it.value().get<double>();
        }
      }
      if (!g.contains("source"))
        return make_error(errc::gpus::kSource, "GPU \"{}\" has no source for its numbers",
                          info.model);
      t.gpus.push_back(std::move(info));
    }
    if (j.contains("model_flops"))
      for (const auto& m : j.at("model_flops")) {
        const auto name = m.at("name").get<std::string>();
        // The unit is in the field's name; the old field held PFLOP under a TFLOP name.
        if (!m.contains("pflop_per_step"))
          return make_error(errc::gpus::kInvalid,
                            "the GPU table's model_flops entry \"{}\" has no pflop_per_step (the "
                            "model's PFLOP per denoising step){}",
                            name,
                            m.contains("tflop_per_step")
                                ? "; tflop_per_step is no longer read (its values were PFLOP)"
                                : "");
        t.model_flops.push_back(
            {name, m.value("match", std::vector<std::string>{}), m.at("width").get<std::uint32_t>(),
             m.at("height").get<std::uint32_t>(), m.at("frames").get<std::uint32_t>(),
             m.at("pflop_per_step").get<double>()});
      }
  } catch (const nlohmann::json::exception& e) {
    return make_error(errc::gpus::kInvalid, "the GPU table is malformed: {}", e.what());
  }
  return t;
}

Result<GpuTable> load_gpu_table(const std::string& path) {
  nlohmann::json j;
  try {
    if (path.empty()) {
      j = nlohmann::json::parse(kEmbeddedGpuTable);  // json-parse: own text (built in)
    } else {
      auto text = read_bounded_file(path, {"a GPU table", kMaxJsonFileBytes, errc::gpus::kOpen});
      if (!text.ok()) return text.error();
      std::string why;
      auto parsed = json_reader::parse_limited(*text, {kMaxJsonFileBytes}, &why);
      if (!parsed) return make_error(errc::gpus::kJson, "{}: not valid JSON: {}", path, why);
      j = std::move(*parsed);
    }
  } catch (const nlohmann::json::parse_error& e) {
    return make_error(errc::gpus::kJson, "{}: not valid JSON: {}",
                      path.empty() ? "configs/gpus.json" : path, e.what());
  }
  return parse_gpu_table(j);
}

}  // namespace h3pipe::schedule
