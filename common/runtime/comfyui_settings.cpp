#include "common/runtime/comfyui_settings.h"

#include <fmt/ranges.h>

#include <limits>
#include <set>

#include "common/core/json_reader.h"
#include "common/runtime/stage_output.h"

namespace h3pipe::runtime::comfyui {
namespace {
namespace fs = std::filesystem;
using config::StageKind;

constexpr std::string_view kReferenceSuffix = "+reference";

// "http://host:port/..." -> "host:port"; empty when the URL is not http(s).
std::string authority_of(const std::string& url) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (url.rfind(scheme, 0) != 0) continue;
    auto rest = url.substr(scheme.size());
    return rest.substr(0, rest.find('/'));
  }
  return {};
}

// A templates key: default | reference | <class> | <class>+reference.
void check_template_key(const std::string& key, const FactoryArgs& a, const std::string& path,
                        const Workflow& w, config::Errors& e) {
  bool for_reference = key == "reference" ||
                       (key.size() > kReferenceSuffix.size() && key.ends_with(kReferenceSuffix));
  std::string cls = key;
  if (key.ends_with(kReferenceSuffix)) cls = key.substr(0, key.size() - kReferenceSuffix.size());
  if (cls != "default" && cls != "reference" && a.cluster) {
    std::set<std::string> names = {"default"};
    for (const auto& c : a.cluster->classes) names.insert(c.name);
    if (!names.count(cls))
      e.add(path, fmt::format("\"{}\" is neither default, reference, nor a job class of this "
                              "config ({}), optionally with \"+reference\"",
                              key, fmt::join(names, ", ")));
  }
  if (for_reference && !w.uses("reference_image"))
    e.add(path + "/inject",
          "a template for jobs with a reference image must inject \"reference_image\"");
}

}  // namespace

const Workflow* choose(const Settings& s, const std::string& job_class, bool has_reference,
                       std::string* key) {
  std::vector<std::string> order;
  if (has_reference) order = {job_class + std::string(kReferenceSuffix), "reference"};
  order.push_back(job_class);
  order.push_back("default");
  for (const auto& k : order)
    if (auto it = s.templates.find(k); it != s.templates.end()) {
      if (key) *key = k;
      return &it->second;
    }
  return nullptr;
}

Settings read_settings(const FactoryArgs& a, StageKind stage, bool host, config::Errors& e) {
  std::string base = settings_path(a, stage);
  static const nlohmann::json kEmpty = nlohmann::json::object();
  const nlohmann::json& j = a.settings ? *a.settings : kEmpty;
  Settings s;
  {
    config::ObjectReader r(j, base, e);
    r.get("url", s.url, true);
    r.get("fused", s.fused);
    r.get("input_dir", s.input_dir);
    r.get("input_ref", s.input_ref);
    r.get("output_dir", s.output_dir);
    r.get("upload_subfolder", s.upload_subfolder);
    r.get("poll_ms", s.poll_ms, 1, 600000);
    r.get("timeout_s", s.timeout_s, 0.001, 1e7);
    r.get("unreachable_s", s.unreachable_s, 0.001, 1e7);
    r.get("connect_timeout_ms", s.connect_timeout_ms, 1, 600000);
    r.get("request_timeout_s", s.request_timeout_s, 0.001, 86400);
    r.get("max_upload_bytes", s.max_upload_bytes, 1, std::numeric_limits<long long>::max());
    r.get("client_id", s.client_id);
    r.get("device", s.device);
    r.get("keep_history", s.keep_history);
    const auto* workflow = r.raw("workflow");
    const auto* inject = r.raw("inject");
    const auto* output = r.raw("output");
    const auto* templates = r.raw("templates");
    if (r.ok()) {
      if (!s.url.empty() && authority_of(s.url).empty())
        e.add(r.path("url"), fmt::format("\"{}\": expected http://host:port", s.url));
      if (s.fused && stage != StageKind::kEncode)
        e.add(r.path("fused"), "only the encode stage can be fused into the sample workflow");
      if (s.fused && (workflow || inject || output || templates))
        e.add(r.path("fused"),
              "a fused encode queues no workflow: remove workflow, inject, output and templates");
      if (!s.fused && !workflow && !(templates && templates->contains("default")))
        e.add(r.path("workflow"),
              "required but missing (a file path or an inline object, or templates.default)");
      if (workflow && templates && templates->contains("default"))
        e.add(r.path("templates") + "/default",
              "the top-level workflow is the default template already: give one of the two");
      if (!workflow && (inject || output))
        e.add(r.path(inject ? "inject" : "output"), "belongs to a workflow; there is none here");
      if (!s.input_ref.empty() && s.input_ref != "path" && s.input_ref != "name")
        e.add(r.path("input_ref"),
              fmt::format("\"{}\": expected \"path\" or \"name\"", s.input_ref));
      if (s.input_ref == "path" && s.input_dir.empty())
        e.add(r.path("input_ref"),
              "\"path\" needs input_dir (an uploaded file has no path this runtime knows)");
      if (s.input_ref.empty()) s.input_ref = s.input_dir.empty() ? "name" : "path";
      for (auto [key, dir] : {std::pair{"input_dir", &s.input_dir}, {"output_dir", &s.output_dir}})
        if (host && !dir->empty() && !fs::is_directory(*dir))
          e.add(r.path(key), fmt::format("\"{}\" is not a directory", *dir));
      // A workflow file is read where the runtime runs (host); an inline one is checked anywhere.
      if (!s.fused && workflow && (host || workflow->is_object()))
        if (auto w = Workflow::parse(*workflow, inject, output, base, e))
          s.templates.emplace("default", std::move(*w));
      if (!s.fused && templates) {
        std::string tp = r.path("templates");
        if (!templates->is_object() || templates->empty())
          e.add(tp, "expected an object: key -> {\"workflow\", \"inject\", \"output\"}");
        else
          for (const auto& [key, t] : templates->items()) {
            std::string kp = tp + "/" + key;
            config::ObjectReader tr(t, kp, e);
            if (!tr.ok()) continue;
            const auto* tw = tr.raw("workflow");
            const auto* ti = tr.raw("inject");
            const auto* to = tr.raw("output");
            if (!tw) {
              e.add(tr.path("workflow"), "required but missing");
              continue;
            }
            if (!host && !tw->is_object()) continue;
            if (auto w = Workflow::parse(*tw, ti, to, kp, e)) {
              check_template_key(key, a, kp, *w, e);
              s.templates.emplace(key, std::move(*w));
            }
          }
      }
      for (const auto& [key, w] : s.templates)
        if (stage == StageKind::kEncode && w.uses("input"))
          e.add(base + (key == "default" && workflow ? "" : "/templates/" + key) + "/inject/input",
                "the encode stage has no input artifact");
    }
  }
  return s;
}

Result<Settings> parse_settings(const FactoryArgs& a, StageKind stage) {
  config::Errors e;
  Settings s = read_settings(a, stage, true, e);
  if (!e.empty())
    return make_error(errc::runtime::kSettings, "comfyui runtime ({}): invalid settings:\n{}",
                      config::stage_name(stage), e.joined());
  while (!s.url.empty() && s.url.back() == '/') s.url.pop_back();
  if (s.device.empty()) s.device = "comfyui@" + authority_of(s.url);
  if (s.client_id.empty())
    s.client_id = "h3pipe-" + (a.pool ? a.pool->name : std::string("worker"));
  if (a.cluster) s.input_roots = a.cluster->limits.input_roots;
  switch (stage) {
    case StageKind::kEncode:
      s.max_output_bytes = 1ull << 30;
      break;
    case StageKind::kSample:
      s.max_output_bytes = a.cluster ? a.cluster->limits.max_latent_bytes : (256ull << 20);
      break;
    case StageKind::kDecode:
      s.max_output_bytes = 16ull << 30;
      break;
  }
  return s;
}

}  // namespace h3pipe::runtime::comfyui
