// comfyui.templates rows: every class and model file the configured comfyui workflows name,
// asked of the pool's own server (GET /object_info/<class>), the way POST /prompt would judge
// them, before any job is queued.
#include <fstream>
#include <map>
#include <sstream>

#include "common/comfyui/node_classes.h"
#include "common/comfyui/template_check.h"
#include "common/core/bounded_file.h"
#include "common/core/json_parse.h"
#include "common/preflight/checks.h"
#include "common/preflight/core_classes.h"
#include "common/preflight/http_get.h"

namespace h3pipe::preflight {
namespace {

using comfyui::Json;

struct Template {
  std::string label;  // the workflow's path, or "<settings path> (inline)"
  Json graph;
  Json inject;
  std::string error;  // could not be read
};

// settings.workflow (+ inject), and any nested object holding a "workflow" (per-job templates).
void collect(const Json& s, const std::string& where, std::vector<Template>& out) {
  if (!s.is_object()) return;
  if (s.contains("workflow")) {
    Template t;
    const Json& w = s["workflow"];
    t.inject = s.value("inject", Json::object());
    if (w.is_object()) {
      t.label = where + " (inline)";
      t.graph = w;
    } else if (w.is_string()) {
      t.label = w.get<std::string>();
      std::ifstream in(t.label, std::ios::binary);
      std::stringstream ss;
      if (in) ss << in.rdbuf();
      std::string why;
      auto parsed = json_reader::parse_limited(ss.str(), {kMaxJsonFileBytes}, &why);
      t.graph = parsed ? std::move(*parsed) : Json(Json::value_t::discarded);
      if (!in)
        t.error =
            "cannot read the workflow file (relative paths resolve against the working directory)";
      else if (t.graph.is_discarded())
        t.error = "the workflow file is not valid JSON: " + why;
    }
    out.push_back(std::move(t));
  }
  for (auto it = s.begin(); it != s.end(); ++it)
    if (it.key() != "workflow" && it.value().is_object())
      collect(it.value(), where + "/" + it.key(), out);
    else if (it.value().is_array())
      for (std::size_t i = 0; i < it.value().size(); ++i)
        collect(it.value()[i], fmt::format("{}/{}/{}", where, it.key(), i), out);
}

std::string escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~')
      out += static_cast<char>(c);
    else
      out += fmt::format("%{:02X}", c);
  }
  return out;
}

// /object_info of one server, one class at a time (the full answer can pass the probe's size cap
// on a server with many models); an unknown class answers {}.
class ServerClasses {
 public:
  ServerClasses(std::string base, std::chrono::milliseconds timeout)
      : base_(std::move(base)), timeout_(timeout) {}
  // Fills `into` with the entries of `classes` the server has; error text when it cannot answer.
  std::optional<std::string> fetch(const std::set<std::string>& classes, Json& into) {
    for (const auto& c : classes) {
      auto it = cache_.find(c);
      if (it == cache_.end()) {
        auto r = http_get(base_ + "/object_info/" + escape(c), timeout_);
        if (!r.ok()) return r.error().message;
        if (r->status != 200)
          return fmt::format("{}/object_info/{} answered {}", base_, c, r->status);
        std::string why;
        auto parsed = json_reader::parse_limited(r->body, {}, &why);
        if (!parsed || !parsed->is_object())
          return fmt::format("{}/object_info/{} is not a JSON object{}", base_, c,
                             parsed ? "" : ": " + why);
        Json& j = *parsed;
        it = cache_.emplace(c, j.contains(c) ? j[c] : Json()).first;
      }
      if (!it->second.is_null()) into[c] = it->second;
    }
    return std::nullopt;
  }

  // /system_stats' comfyui_version, asked once; empty when the server does not say.
  const std::string& version() {
    if (!version_) {
      version_.emplace();
      auto r = http_get(base_ + "/system_stats", timeout_);
      if (r.ok() && r->status == 200) {
        std::string why;
        auto parsed = json_reader::parse_limited(r->body, {}, &why);
        const Json j = parsed ? std::move(*parsed) : Json();
        if (j.is_object() && j.contains("system") && j["system"].is_object() &&
            j["system"].contains("comfyui_version") && j["system"]["comfyui_version"].is_string())
          *version_ = j["system"]["comfyui_version"].get<std::string>();
      }
    }
    return *version_;
  }

 private:
  std::string base_;
  std::chrono::milliseconds timeout_;
  std::map<std::string, Json> cache_;
  std::optional<std::string> version_;
};

std::string fix_for(comfyui::IssueKind k, const std::string& url) {
  switch (k) {
    case comfyui::IssueKind::kUnknownClass:
      return fmt::format(
          "install the node pack that provides the class on {} (h3pipe's own: "
          "`h3pipe comfyui install-nodes COMFYUI_DIR`), restart it, or edit the template",
          url);
    case comfyui::IssueKind::kMissingModelFile:
      return fmt::format(
          "put the file into that server's models/ folder (the loader's kind: "
          "checkpoints, vae, diffusion_models, text_encoders, loras, ...) or edit the "
          "template to name a file {} lists",
          url);
    default:
      return "fix the template: ComfyUI rejects it at POST /prompt";
  }
}

}  // namespace

void check_comfyui_templates(const config::Cluster& c, const Options& o, const Scope& s,
                             Report& rep) {
  std::map<std::string, ServerClasses> servers;
  for (const config::Host* h : s.checked) {
    for (const config::Pool* p : c.pools_on(h->name)) {
      const auto& rt = c.runtime_for(*p);
      if (rt.name != "comfyui") continue;
      auto u = rt.settings.find("url");
      if (u == rt.settings.end() || !u->is_string() || u->get<std::string>().empty()) continue;
      std::string url = u->get<std::string>();
      while (!url.empty() && url.back() == '/') url.pop_back();
      std::string target = fmt::format("{}@{}", p->name, h->name);
      std::vector<Template> templates;
      collect(rt.settings, "settings", templates);
      auto& server = servers.try_emplace(url, url, o.timeout).first->second;
      for (const auto& t : templates) {
        if (!t.error.empty()) {
          rep.fail("comfyui.templates", target, fmt::format("template {}: {}", t.label, t.error),
                   "fix settings.workflow of the pool's comfyui runtime");
          continue;
        }
        Json info = Json::object();
        auto err = server.fetch(comfyui::classes_of(t.graph), info);
        if (err) {
          rep.fail(
              "comfyui.templates", target,
              fmt::format("template {}: cannot ask {} for its classes: {}", t.label, url, *err),
              "start ComfyUI on that address, or fix settings.url");
          break;
        }
        auto oi = comfyui::ObjectInfo::parse(info, /*allow_empty=*/true);
        if (!oi.ok()) {
          rep.fail("comfyui.templates", target,
                   fmt::format("template {}: {}", t.label, oi.error().message),
                   "check the server's /object_info");
          continue;
        }
        comfyui::CheckOptions co;
        co.injected = comfyui::injected_inputs(t.inject);
        auto issues = comfyui::check_workflow(t.graph, *oi, co);
        for (const auto& i : issues) {
          // A core class the server lacks: its ComfyUI is older than the release that added it.
          const CoreClass* core =
              i.kind == comfyui::IssueKind::kUnknownClass ? find_core_class(i.cls) : nullptr;
          if (core) {
            const std::string node = i.message.substr(0, i.message.find(": class \""));
            rep.fail("comfyui.templates", target,
                     fmt::format("template {}: {}", t.label,
                                 core_class_missing(*core, node, server.version())),
                     core_class_fix(*core, url, server.version()));
            continue;
          }
          rep.fail("comfyui.templates", target, fmt::format("template {}: {}", t.label, i.message),
                   fix_for(i.kind, url));
        }
        if (issues.empty()) {
          std::size_t files = 0;
          for (const auto& n : t.graph) {
            if (!n.contains("inputs")) continue;
            const Json& ins = n["inputs"];
            for (auto in = ins.begin(); in != ins.end(); ++in)
              files +=
                  comfyui::is_model_file_input(n.value("class_type", std::string()), in.key()) &&
                  in.value().is_string();
          }
          rep.pass("comfyui.templates", target,
                   fmt::format("template {}: {} classes and {} model file(s) on {}", t.label,
                               comfyui::classes_of(t.graph).size(), files, url));
        }
      }
    }
  }
}

}  // namespace h3pipe::preflight
