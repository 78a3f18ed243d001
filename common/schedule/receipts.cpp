#include "common/schedule/receipts.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "common/core/bounded_file.h"
#include "common/core/json_parse.h"
#include "common/schedule/plan.h"
#include "common/schedule/plan_mix.h"

namespace h3pipe::schedule {
namespace {

const nlohmann::json* field(const nlohmann::json& o, const char* camel, const char* snake) {
  if (!o.is_object()) return nullptr;
  if (auto it = o.find(camel); it != o.end()) return &*it;
  if (auto it = o.find(snake); it != o.end()) return &*it;
  return nullptr;
}

std::string str(const nlohmann::json& o, const char* camel, const char* snake) {
  const auto* v = field(o, camel, snake);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

// proto3 JSON: int64 as a string, but numbers are accepted too.
std::optional<double> num(const nlohmann::json& o, const char* camel, const char* snake) {
  const auto* v = field(o, camel, snake);
  if (!v) return std::nullopt;
  if (v->is_number()) return v->get<double>();
  if (v->is_string()) {
    try {
      std::size_t pos = 0;
      double d = std::stod(v->get<std::string>(), &pos);
      if (pos == v->get<std::string>().size()) return d;
    } catch (const std::exception&) {
    }
  }
  return std::nullopt;
}

std::string stage_of(const nlohmann::json& v) {
  static const char* kNames[] = {"", "encode", "sample", "transfer", "decode"};
  if (v.is_number_integer()) {
    int n = v.get<int>();
    return n >= 1 && n <= 4 ? kNames[n] : "";
  }
  if (!v.is_string()) return "";
  const std::string s = v.get<std::string>();
  for (int i = 1; i <= 4; ++i) {
    std::string up = std::string("STAGE_") + kNames[i];
    std::transform(up.begin(), up.end(), up.begin(), ::toupper);
    if (s == up || s == kNames[i]) return kNames[i];
  }
  return "";
}

int kind_rank(const std::string& k) {
  return k == "encode" ? 0 : k == "sample" ? 1 : k == "transfer" ? 2 : 3;
}

Status write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".part";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    if (!f) return make_error(errc::io::kWrite, "{}: write failed", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return make_error(errc::io::kRename, "{}: {}", path, ec.message());
  return Status::Ok();
}

Result<config::Cluster> maybe_load(const std::string& path) {
  if (path.empty()) return config::Cluster{};
  return config::load_file(path);
}

}  // namespace

std::vector<MeasuredStage> parse_receipts(const std::vector<nlohmann::json>& receipts,
                                          const config::Cluster* cluster,
                                          std::vector<std::string>& warnings) {
  std::vector<MeasuredStage> out;
  for (std::size_t i = 0; i < receipts.size(); ++i) {
    const auto& r = receipts[i];
    const std::string job = str(r, "jobId", "job_id");
    const auto* spec = field(r, "spec", "spec");
    const auto* stages = field(r, "stages", "stages");
    if (job.empty() || !stages || !stages->is_array()) {
      warnings.push_back(fmt::format("receipt {}: no jobId or no stages[]; skipped", i));
      continue;
    }
    std::string cls = spec ? str(*spec, "jobClass", "job_class") : "";
    if (cls.empty() && spec && cluster) {
      auto g = [&](const char* a, const char* b) {
        return static_cast<std::uint32_t>(num(*spec, a, b).value_or(0));
      };
      cls = cluster->class_of(g("width", "width"), g("height", "height"), g("frames", "frames"),
                              g("steps", "steps"));
    }
    if (cls.empty()) cls = "default";
    std::string sample_host, decode_host;
    for (const auto& s : *stages) {
      const std::string st =
          stage_of(field(s, "stage", "stage") ? *field(s, "stage", "stage") : nlohmann::json());
      if (st == "sample") sample_host = str(s, "host", "host");
      if (st == "decode") decode_host = str(s, "host", "host");
    }
    for (std::size_t k = 0; k < stages->size(); ++k) {
      const auto& s = (*stages)[k];
      MeasuredStage m;
      m.job_id = job;
      m.job_class = cls;
      m.stage =
          stage_of(field(s, "stage", "stage") ? *field(s, "stage", "stage") : nlohmann::json());
      m.pool = str(s, "pool", "pool");
      m.host = str(s, "host", "host");
      auto start = num(s, "startUnixMs", "start_unix_ms");
      auto end = num(s, "endUnixMs", "end_unix_ms");
      if (m.stage.empty() || !start || !end || *end < *start) {
        warnings.push_back(fmt::format(
            "receipt {} ({}): stages/{}: needs stage, startUnixMs <= endUnixMs; skipped", i, job,
            k));
        continue;
      }
      if (m.stage == "transfer" && m.pool.empty())
        m.pool = (sample_host.empty() ? m.host : sample_host) + "->" +
                 (decode_host.empty() ? "?" : decode_host);
      if (m.pool.empty()) m.pool = m.stage + "@" + m.host;
      m.start_s = *start / 1000.0;
      m.end_s = *end / 1000.0;
      m.queue_wait_s = num(s, "queueWaitS", "queue_wait_s").value_or(0);
      m.run_s = num(s, "runS", "run_s").value_or(0);
      m.mux_s = num(s, "muxS", "mux_s").value_or(0);
      m.wire_s = num(s, "wireS", "wire_s").value_or(0);
      m.verify_s = num(s, "verifyS", "verify_s").value_or(0);
      m.gpu_wait_s = num(s, "gpuWaitS", "gpu_wait_s").value_or(0);
      m.device = str(s, "device", "device");
      m.end_to_end_s = num(r, "endToEndS", "end_to_end_s").value_or(0);
      m.settings = str(s, "settingsJson", "settings_json");
      if (spec) {
        m.width = static_cast<std::uint32_t>(num(*spec, "width", "width").value_or(0));
        m.height = static_cast<std::uint32_t>(num(*spec, "height", "height").value_or(0));
        m.frames = static_cast<std::uint32_t>(num(*spec, "frames", "frames").value_or(0));
        m.steps = static_cast<std::uint32_t>(num(*spec, "steps", "steps").value_or(0));
        const double fps = num(*spec, "fps", "fps").value_or(0);
        if (fps > 0) m.video_s = num(*spec, "frames", "frames").value_or(0) / fps;
      }
      // The runtime's reported GFLOP (builtin: settings_json.runtime_reported.gflop).
      if (const std::string sj = str(s, "settingsJson", "settings_json"); !sj.empty()) {
        std::string why;
        const auto j = json_reader::parse_limited(sj, {}, &why).value_or(nlohmann::json());
        if (j.is_object() && j.contains("runtime_reported") && j["runtime_reported"].is_object()) {
          const auto& rr = j["runtime_reported"];
          if (auto g = rr.find("gflop"); g != rr.end() && g->is_number())
            m.gflop = g->get<double>();
          if (auto g = rr.find("peak_gflops"); g != rr.end() && g->is_number())
            m.peak_gflops = g->get<double>();
        }
      }
      out.push_back(std::move(m));
    }
  }
  return out;
}

LearnedProfiles learn_profiles(const std::vector<MeasuredStage>& stages, std::size_t min_samples) {
  std::map<std::string, std::map<std::string, std::vector<double>>> d;
  for (const auto& s : stages)
    if (s.stage != "transfer") d[s.pool][s.job_class].push_back(s.end_s - s.start_s);
  LearnedProfiles out;
  for (const auto& [pool, by_class] : d)
    for (const auto& [cls, v] : by_class) {
      if (v.size() < min_samples) continue;
      LearnedProfile p;
      p.n = v.size();
      double sum = 0;
      for (double x : v) sum += x;
      p.mean = sum / static_cast<double>(p.n);
      double ss = 0;
      for (double x : v) ss += (x - p.mean) * (x - p.mean);
      p.sd = p.n > 1 ? std::sqrt(ss / static_cast<double>(p.n - 1)) : 0;
      std::vector<double> sorted = v;
      std::sort(sorted.begin(), sorted.end());
      p.min = sorted.front();
      p.max = sorted.back();
      p.p50 = nearest_rank(sorted, 0.50);
      p.p95 = nearest_rank(sorted, 0.95);
      out[pool][cls] = p;
    }
  return out;
}

namespace {

// Learned seconds are measured seconds over the config's time_scale (issue #34 P9).
void unscale(LearnedProfiles& all, double scale) {
  for (auto& [pool, by_class] : all)
    for (auto& [cls, p] : by_class) {
      p.mean /= scale;
      p.sd /= scale;
      p.min /= scale;
      p.max /= scale;
      p.p50 /= scale;
      p.p95 /= scale;
    }
}

// The config to update (-o), as ordered JSON so that the written file keeps its key order; an exit
// code on failure, printed to `err`.
std::optional<int> read_config_to_update(const ProfileLearnArgs& a, const std::string& source,
                                         nlohmann::ordered_json& j, std::ostream& err) {
  std::string parse_why;
  try {
    if (a.config.empty()) {
      j = json_reader::parse_limited_ordered(a.config_text, {}, &parse_why)
              .value_or(nlohmann::ordered_json());
      return std::nullopt;
    }
    auto text = read_bounded_file(a.config, {"a config", kMaxConfigFileBytes, errc::config::kOpen});
    if (!text.ok()) {
      fmt::print(err, "profile learn: {}\n", text.error().message);
      return 2;
    }
    auto parsed = json_reader::parse_limited_ordered(*text, {kMaxConfigFileBytes}, &parse_why);
    if (!parsed) {
      fmt::print(err, "profile learn: {}: not valid JSON: {}\n", source, parse_why);
      return 2;
    }
    j = std::move(*parsed);
  } catch (const std::exception& ex) {
    fmt::print(err, "profile learn: {}: {}\n", source, ex.what());
    return 1;
  }
  return std::nullopt;
}

// Writes the config with the learned profiles (those with min_samples or more) to a.output, after
// checking that it still loads; `updated` names each pool/class written.  0 or an exit code.
int write_learned_config(const ProfileLearnArgs& a, const std::string& source,
                         const LearnedProfiles& all, std::vector<std::string>& updated,
                         std::vector<std::string>& warnings, std::ostream& err) {
  nlohmann::ordered_json j;
  if (auto rc = read_config_to_update(a, source, j, err)) return *rc;
  std::set<std::string> known;
  for (auto& p : j["pools"]) {
    const std::string name = p.value("name", "");
    known.insert(name);
    auto it = all.find(name);
    if (it == all.end()) continue;
    for (const auto& [cls, lp] : it->second) {
      if (lp.n < a.min_samples) continue;
      p["profiles"][cls] = {{"kind", "normal"},
                            {"mean", std::round(lp.mean * 1000) / 1000},
                            {"sd", std::round(lp.sd * 1000) / 1000}};
      updated.push_back(fmt::format("{}/{}", name, cls));
    }
  }
  for (const auto& [pool, _] : all)
    if (!known.count(pool))
      warnings.push_back(fmt::format("pool \"{}\" is in the receipts but not in {}", pool, source));
  const std::string text = j.dump(2) + "\n";
  auto base = std::filesystem::absolute(a.output).parent_path();
  std::string parse_why;
  auto reparsed = json_reader::parse_limited(text, {}, &parse_why);
  if (auto c = config::parse(reparsed.value_or(nullptr), base); !c.ok()) {
    fmt::print(err, "profile learn: the updated config does not load:\n{}\n", c.error().message);
    return 1;
  }
  if (auto s = write_file(a.output, text); !s.ok()) {
    fmt::print(err, "profile learn: {}\n", s.error().message);
    return 1;
  }
  return 0;
}

void print_learned_json(const ProfileLearnArgs& a, const LearnedProfiles& all,
                        const std::vector<MeasuredStage>& stages, double scale,
                        const std::vector<std::string>& updated,
                        const std::vector<std::string>& warnings, std::ostream& out) {
  nlohmann::json j;
  j["profiles"] = nlohmann::json::object();
  for (const auto& [pool, by_class] : all)
    for (const auto& [cls, p] : by_class)
      j["profiles"][pool][cls] = {
          {"kind", "normal"}, {"mean", p.mean}, {"sd", p.sd},
          {"n", p.n},         {"min", p.min},   {"max", p.max},
          {"p50", p.p50},     {"p95", p.p95},   {"used", p.n >= a.min_samples}};
  std::map<std::string, std::vector<double>> tr;
  for (const auto& s : stages)
    if (s.stage == "transfer") tr[s.pool].push_back(s.end_s - s.start_s);
  j["transfers"] = nlohmann::json::object();
  for (const auto& [lane, v] : tr) {
    double sum = 0;
    for (double x : v) sum += x;
    j["transfers"][lane] = {{"n", v.size()}, {"mean", sum / static_cast<double>(v.size())}};
  }
  j["time_scale"] = scale;
  j["updated"] = updated;
  j["warnings"] = warnings;
  if (!a.output.empty()) j["output"] = a.output;
  out << j.dump() << "\n";
}

void print_learned_table(const ProfileLearnArgs& a, const LearnedProfiles& all, double scale,
                         const std::vector<std::string>& updated,
                         const std::vector<std::string>& warnings, std::ostream& out) {
  fmt::print(out, "{:<24} {:<8} {:>4} {:>10} {:>9} {:>10} {:>10} {:>10} {:>10}\n", "pool", "class",
             "n", "mean_s", "sd_s", "min_s", "p50_s", "p95_s", "max_s");
  for (const auto& [pool, by_class] : all)
    for (const auto& [cls, p] : by_class)
      fmt::print(
          out, "{:<24} {:<8} {:>4} {:>10.3f} {:>9.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f}{}\n",
          pool, cls, p.n, p.mean, p.sd, p.min, p.p50, p.p95, p.max,
          p.n < a.min_samples ? "  (too few: not used)" : "");
  if (scale != 1.0)
    fmt::print(out, "profiles in the config's seconds: measured / time_scale {}\n", scale);
  if (!a.output.empty())
    fmt::print(out, "wrote {} ({} profiles updated)\n", a.output, updated.size());
  for (const auto& w : warnings) fmt::print(out, "warning: {}\n", w);
}

}  // namespace

int run_profile_learn(const ProfileLearnArgs& a, std::ostream& out, std::ostream& err) {
  if (!a.output.empty() && a.config.empty() && a.config_text.empty()) {
    fmt::print(err, "profile learn: -o needs --config (the config whose profiles are updated)\n");
    return 2;
  }
  const std::string source = a.config.empty() ? a.config_name : a.config;
  std::string parse_why;
  auto cluster = !a.config.empty() || a.config_text.empty()
                     ? maybe_load(a.config)
                     : config::parse(json_reader::parse_limited(a.config_text, {}, &parse_why)
                                         .value_or(nlohmann::json()),
                                     std::filesystem::current_path());
  if (!cluster.ok()) {
    fmt::print(err, "profile learn: {}\n", cluster.error().message);
    return 1;
  }
  std::vector<std::string> warnings;
  const bool have_config = !a.config.empty() || !a.config_text.empty();
  auto stages = parse_receipts(a.receipts, have_config ? &cluster.value() : nullptr, warnings);
  if (stages.empty()) {
    fmt::print(err, "profile learn: no usable stage in {} receipts\n", a.receipts.size());
    for (const auto& w : warnings) fmt::print(err, "warning: {}\n", w);
    return 1;
  }
  // A profile is in the config's own seconds: every stage runs (and plans) as its profile times
  // time_scale, so a rehearsal at time_scale 0.01 measures 1/100 of them.  Learned profiles are
  // the measured seconds divided by it, and the config keeps its time_scale: the learned config
  // plans what was measured, and a profile not learned keeps its meaning (issue #34 P9).
  const double scale = cluster->time_scale > 0 ? cluster->time_scale : 1.0;
  auto all = learn_profiles(stages, 1);
  unscale(all, scale);
  std::vector<std::string> updated;
  if (!a.output.empty())
    if (int rc = write_learned_config(a, source, all, updated, warnings, err); rc != 0) return rc;
  if (a.json)
    print_learned_json(a, all, stages, scale, updated, warnings, out);
  else
    print_learned_table(a, all, scale, updated, warnings, out);
  return 0;
}

GanttChart gantt_from_receipts(const std::vector<MeasuredStage>& stages, std::string title) {
  GanttChart g;
  g.title = std::move(title);
  if (stages.empty()) return g;
  double t0 = stages.front().start_s;
  for (const auto& s : stages) t0 = std::min(t0, s.start_s);
  // Rows: (kind, pool) in pipeline order, then order of first appearance.
  std::vector<std::pair<std::string, std::string>> rows;
  std::vector<std::string> hosts;
  for (const auto& s : stages)
    if (std::find(rows.begin(), rows.end(), std::make_pair(s.stage, s.pool)) == rows.end()) {
      rows.emplace_back(s.stage, s.pool);
      hosts.push_back(s.host);
    }
  std::vector<std::size_t> order(rows.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return kind_rank(rows[a].first) < kind_rank(rows[b].first);
  });
  std::map<std::pair<std::string, std::string>, std::size_t> row_of;
  for (std::size_t i = 0; i < order.size(); ++i) {
    row_of[rows[order[i]]] = i;
    g.rows.push_back({rows[order[i]].second, rows[order[i]].first, hosts[order[i]]});
  }
  std::map<std::string, std::size_t> job_index;
  for (const auto& s : stages) {
    auto [it, _] = job_index.emplace(s.job_id, job_index.size());
    g.bars.push_back(
        {row_of[{s.stage, s.pool}], it->second, s.job_id, s.stage, s.start_s - t0, s.end_s - t0});
  }
  return g;
}

}  // namespace h3pipe::schedule
