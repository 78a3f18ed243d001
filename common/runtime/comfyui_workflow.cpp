#include "common/runtime/comfyui_workflow.h"

#include <fmt/ranges.h>

#include <charconv>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "common/core/bounded_file.h"
#include "common/core/json_parse.h"
#include "common/core/sha256.h"

namespace h3pipe::runtime::comfyui {
namespace {

bool is_link(const nlohmann::json& v) {
  return v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_number_integer();
}

std::optional<nlohmann::json> load_graph(const nlohmann::json& w, const std::string& path,
                                         std::string& source, config::Errors& e) {
  if (w.is_object()) {
    source = "inline";
    return w;
  }
  if (!w.is_string() || w.get<std::string>().empty()) {
    e.add(path, "expected a file path or an API-format workflow object");
    return std::nullopt;
  }
  source = w.get<std::string>();
  auto text = read_bounded_file(source, {"a workflow file", kMaxJsonFileBytes});
  if (!text.ok()) {
    e.add(path, text.error().code == errc::io::kOpen
                    ? fmt::format("cannot read workflow file \"{}\" (relative paths resolve "
                                  "against the working directory)",
                                  source)
                    : text.error().message);
    return std::nullopt;
  }
  std::string why;
  auto j = json_reader::parse_limited(*text, {}, &why);
  if (!j) {
    e.add(path, fmt::format("\"{}\" is not valid JSON: {}", source, why));
    return std::nullopt;
  }
  return j;
}

// API format: every node an object with a class_type and inputs; every link names a node.
bool check_graph(const nlohmann::json& g, const std::string& path, config::Errors& e) {
  if (!g.is_object() || g.empty()) {
    e.add(path, "a workflow must be a non-empty object of nodes (ComfyUI API format)");
    return false;
  }
  if (g.contains("nodes") && g.contains("links")) {
    e.add(path,
          "this is a UI-format workflow; export it with \"Export (API)\" / \"Save (API Format)\"");
    return false;
  }
  bool ok = true;
  for (auto it = g.begin(); it != g.end(); ++it) {
    const auto& n = it.value();
    std::string np = fmt::format("{} node \"{}\"", path, it.key());
    if (!n.is_object() || !n.contains("class_type") || !n["class_type"].is_string() ||
        !n.contains("inputs") || !n["inputs"].is_object()) {
      e.add(np, "expected {\"class_type\": string, \"inputs\": object}");
      ok = false;
      continue;
    }
    for (auto in = n["inputs"].begin(); in != n["inputs"].end(); ++in) {
      if (is_link(in.value()) && !g.contains(in.value()[0].get<std::string>())) {
        e.add(np, fmt::format("input \"{}\" links to node \"{}\", which is not in the workflow",
                              in.key(), in.value()[0].get<std::string>()));
        ok = false;
      }
    }
  }
  return ok;
}

std::string title_of(const nlohmann::json& node) {
  if (node.contains("_meta") && node["_meta"].is_object() && node["_meta"].contains("title") &&
      node["_meta"]["title"].is_string())
    return node["_meta"]["title"].get<std::string>();
  return {};
}

// {"node": id} or {"title": t} -> node id; `input` is read by the caller.
std::optional<std::string> resolve_node(const nlohmann::json& g, config::ObjectReader& r,
                                        config::Errors& e) {
  std::string node, title;
  r.get("node", node);
  r.get("title", title);
  if (node.empty() == title.empty()) {
    e.add(r.path("node"),
          "give exactly one of \"node\" (a node id) or \"title\" (a node's _meta.title)");
    return std::nullopt;
  }
  if (!node.empty()) {
    if (!g.contains(node)) {
      e.add(r.path("node"), fmt::format("no node \"{}\" in the workflow", node));
      return std::nullopt;
    }
    return node;
  }
  std::vector<std::string> hits;
  for (auto it = g.begin(); it != g.end(); ++it)
    if (title_of(it.value()) == title) hits.push_back(it.key());
  if (hits.size() == 1) return hits[0];
  if (hits.empty())
    e.add(r.path("title"), fmt::format("no node titled \"{}\" in the workflow", title));
  else
    e.add(r.path("title"),
          fmt::format("title \"{}\" is ambiguous (nodes {})", title, fmt::join(hits, ", ")));
  return std::nullopt;
}

std::optional<Target> parse_target(const nlohmann::json& g, const nlohmann::json& j,
                                   const std::string& path, config::Errors& e) {
  config::ObjectReader r(j, path, e);
  if (!r.ok()) return std::nullopt;
  auto node = resolve_node(g, r, e);
  std::string input;
  r.get("input", input, true);
  if (!node || input.empty()) return std::nullopt;
  const auto& n = g[*node];
  if (!n["inputs"].contains(input)) {
    std::vector<std::string> names;
    for (auto it = n["inputs"].begin(); it != n["inputs"].end(); ++it) names.push_back(it.key());
    e.add(r.path("input"),
          fmt::format("node \"{}\" ({}) has no input \"{}\"; it has: {}", *node,
                      n["class_type"].get<std::string>(), input, fmt::join(names, ", ")));
    return std::nullopt;
  }
  if (is_link(n["inputs"][input])) {
    e.add(r.path("input"),
          fmt::format("input \"{}\" of node \"{}\" is linked to node \"{}\"; inject into a widget "
                      "input instead",
                      input, *node, n["inputs"][input][0].get<std::string>()));
    return std::nullopt;
  }
  return Target{*node, input};
}

bool known_key(const std::string& k) {
  if (k.rfind("params.", 0) == 0) return k.size() > 7;
  for (const auto& x : injectable_keys())
    if (x == k) return true;
  return false;
}

// A JobSpec.params string aimed at a numeric widget becomes a number when it parses as one.
nlohmann::json coerce(const nlohmann::json& value, const nlohmann::json& existing) {
  if (!value.is_string() || !existing.is_number()) return value;
  const std::string& s = value.get_ref<const std::string&>();
  if (existing.is_number_integer()) {
    long long n = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec == std::errc() && p == s.data() + s.size()) return n;
  }
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (!s.empty() && end == s.c_str() + s.size()) return d;
  return value;
}

}  // namespace

const std::vector<std::string>& injectable_keys() {
  static const std::vector<std::string> k = {"prompt",
                                             "negative_prompt",
                                             "seed",
                                             "steps",
                                             "width",
                                             "height",
                                             "frames",
                                             "fps",
                                             "job_id",
                                             "run_id",
                                             "filename_prefix",
                                             "input",
                                             "reference_image",
                                             "reference_audio",
                                             "last_frame_image",
                                             "latent_profile"};
  return k;
}

std::optional<Workflow> Workflow::parse(const nlohmann::json& workflow,
                                        const nlohmann::json* inject, const nlohmann::json* output,
                                        const std::string& path, config::Errors& e) {
  Workflow w;
  auto g = load_graph(workflow, path + "/workflow", w.source_, e);
  if (!g || !check_graph(*g, path + "/workflow", e)) return std::nullopt;
  w.graph_ = std::move(*g);
  w.sha256_ = sha256_hex(w.graph_.dump());
  std::size_t before = e.list().size();
  if (inject) {
    std::string ip = path + "/inject";
    if (!inject->is_object()) {
      e.add(ip, "expected an object: parameter -> {\"node\"|\"title\", \"input\"}");
    } else {
      for (auto it = inject->begin(); it != inject->end(); ++it) {
        std::string kp = ip + "/" + it.key();
        if (!known_key(it.key())) {
          e.add(kp, fmt::format("unknown parameter; expected one of {} or params.<key>",
                                fmt::join(injectable_keys(), ", ")));
          continue;
        }
        const auto& v = it.value();
        std::vector<Target> targets;
        if (v.is_array()) {
          if (v.empty()) e.add(kp, "expected at least one target");
          for (std::size_t i = 0; i < v.size(); ++i)
            if (auto t = parse_target(w.graph_, v[i], fmt::format("{}/{}", kp, i), e))
              targets.push_back(*t);
        } else if (auto t = parse_target(w.graph_, v, kp, e)) {
          targets.push_back(*t);
        }
        if (!targets.empty()) w.targets_[it.key()] = std::move(targets);
      }
    }
  }
  if (output) {
    config::ObjectReader r(*output, path + "/output", e);
    if (r.ok())
      if (auto n = resolve_node(w.graph_, r, e)) w.output_node_ = *n;
  }
  if (e.list().size() != before) return std::nullopt;
  w.analyse();
  return w;
}

void Workflow::analyse() {
  for (auto it = graph_.begin(); it != graph_.end(); ++it) consumed_[it.key()] = false;
  for (auto it = graph_.begin(); it != graph_.end(); ++it)
    for (const auto& [name, v] : it.value()["inputs"].items())
      if (is_link(v)) consumed_[v[0].get<std::string>()] = true;
  // Longest path from a source (memoised); a cycle, which ComfyUI refuses at run time, counts as
  // a source where it closes instead of recursing forever.
  std::set<std::string> visiting;
  std::function<int(const std::string&)> depth = [&](const std::string& id) {
    if (auto d = depth_.find(id); d != depth_.end()) return d->second;
    if (!visiting.insert(id).second) return 0;
    int best = 0;
    for (const auto& [name, v] : graph_[id]["inputs"].items())
      if (is_link(v)) best = std::max(best, depth(v[0].get<std::string>()) + 1);
    visiting.erase(id);
    depth_[id] = best;
    return best;
  };
  for (auto it = graph_.begin(); it != graph_.end(); ++it) depth(it.key());
  if (!output_node_.empty())
    exec_targets_ = {output_node_};
  else
    for (const auto& [id, used] : consumed_)
      if (!used) exec_targets_.push_back(id);
}

std::pair<int, int> Workflow::output_rank(const std::string& node_id) const {
  auto c = consumed_.find(node_id);
  auto d = depth_.find(node_id);
  return {c != consumed_.end() && !c->second ? 1 : 0, d == depth_.end() ? -1 : d->second};
}

nlohmann::json Workflow::instantiate(const std::map<std::string, nlohmann::json>& values,
                                     const std::string& nonce) const {
  nlohmann::json g = graph_;
  if (!nonce.empty())
    for (const auto& id : exec_targets_) g[id]["inputs"]["h3pipe_attempt"] = nonce;
  for (const auto& [key, targets] : targets_) {
    auto v = values.find(key);
    if (v == values.end()) continue;
    for (const auto& t : targets) {
      auto& slot = g[t.node_id]["inputs"][t.input];
      slot = coerce(v->second, slot);
    }
  }
  return g;
}

}  // namespace h3pipe::runtime::comfyui
