#include "common/comfyui/ui_workflow.h"

#include <map>
#include <set>

namespace h3pipe::comfyui {
namespace {

constexpr int kModeMuted = 2, kModeBypass = 4;

struct UiLink {
  long long from = 0;
  int from_slot = 0;
  std::string type;
};

struct UiNode {
  long long id = 0;
  std::string type, title;
  int mode = 0;
  const Json* json = nullptr;
};

bool is_virtual(const std::string& type) {
  return type == "Reroute" || type == "PrimitiveNode" || type == "Note" || type == "MarkdownNote";
}

std::string ui_name(const UiNode& n) {
  return fmt::format("node {} ({})", n.id, n.type);
}

// A link as [id, from, from_slot, to, to_slot, type] (litegraph) or as an object (schema 1).
std::optional<std::pair<long long, UiLink>> parse_link(const Json& l) {
  // Ids as integers, the output slot 0..kMaxSlot (issue #35 D11: it once wrapped).
  auto id = [](const Json& v) {
    return v.is_number_integer() &&
           (!v.is_number_unsigned() || v.get<unsigned long long>() <= 9223372036854775807ull);
  };
  if (l.is_array() && l.size() >= 5 && id(l[0]) && id(l[1]) && slot_number(l[2]))
    return std::make_pair(l[0].get<long long>(),
                          UiLink{l[1].get<long long>(), *slot_number(l[2]),
                                 l.size() > 5 && l[5].is_string() ? l[5].get<std::string>() : ""});
  if (l.is_object() && l.contains("id") && l.contains("origin_id") && l.contains("origin_slot") &&
      id(l["id"]) && id(l["origin_id"]) && slot_number(l["origin_slot"]))
    return std::make_pair(
        l["id"].get<long long>(),
        UiLink{l["origin_id"].get<long long>(), *slot_number(l["origin_slot"]),
               l.contains("type") && l["type"].is_string() ? l["type"].get<std::string>() : ""});
  return std::nullopt;
}

class Converter {
 public:
  Converter(const Json& ui, const ObjectInfo& oi) : ui_(ui), oi_(oi) {}

  Result<Json> run() {
    for (const auto& l : ui_["links"]) {
      auto p = parse_link(l);
      if (!p)
        return make_error(errc::comfyui::kUiLink,
                          "UI workflow: link {} is not [id, from, slot, to, slot, type] with "
                          "integer ids and an output slot 0 to {}",
                          l.dump(), kMaxSlot);
      links_[p->first] = p->second;
    }
    std::set<std::string> subgraphs;
    if (ui_.contains("definitions") && ui_["definitions"].is_object() &&
        ui_["definitions"].contains("subgraphs") && ui_["definitions"]["subgraphs"].is_array())
      for (const auto& s : ui_["definitions"]["subgraphs"])
        if (s.contains("id") && s["id"].is_string()) subgraphs.insert(s["id"].get<std::string>());
    for (const auto& n : ui_["nodes"]) {
      if (!n.is_object() || !n.contains("id") || !n["id"].is_number_integer() ||
          !n.contains("type") || !n["type"].is_string())
        return make_error(errc::comfyui::kUiNode,
                          "UI workflow: a node without an integer \"id\" and a "
                          "\"type\": {}",
                          n.dump().substr(0, 120));
      UiNode u;
      u.id = n["id"].get<long long>();
      u.type = n["type"].get<std::string>();
      u.title = n.value("title", std::string());
      u.mode = n.value("mode", 0);
      u.json = &n;
      if (subgraphs.count(u.type))
        return make_error(errc::comfyui::kUiSubgraph,
                          "{} is a subgraph; convert it to nodes in the editor (or export the "
                          "workflow with \"Export (API)\") and split that",
                          ui_name(u));
      nodes_[u.id] = u;
    }
    Json api = Json::object();
    for (const auto& [id, n] : nodes_) {
      if (is_virtual(n.type) || n.mode == kModeMuted || n.mode == kModeBypass) continue;
      auto node = convert(n);
      if (!node.ok()) return node.error();
      api[std::to_string(id)] = std::move(*node);
    }
    if (api.empty())
      return make_error(errc::comfyui::kWorkflowNotGraph, "the UI workflow has no nodes to run");
    return api;
  }

 private:
  // The value an input linked by `link_id` gets: a link to a real node, a primitive's value, or
  // nothing (a muted source, a dangling link).
  std::optional<Json> resolve(long long link_id, int depth = 0) {
    auto l = links_.find(link_id);
    if (l == links_.end() || depth > 64) return std::nullopt;
    auto n = nodes_.find(l->second.from);
    if (n == nodes_.end()) return std::nullopt;
    const UiNode& src = n->second;
    if (src.type == "PrimitiveNode") {
      const Json& wv = src.json->value("widgets_values", Json::array());
      if (wv.is_array() && !wv.empty()) return wv[0];
      return std::nullopt;
    }
    if (src.type == "Reroute" || src.mode == kModeBypass) {
      // Through: a Reroute's one input; a bypassed node's input of the output's type (the one
      // at the same index first, as the frontend does).
      const Json& ins = src.json->value("inputs", Json::array());
      const std::string& want = l->second.type;
      const int slot = l->second.from_slot;
      std::optional<long long> through;
      if (src.type == "Reroute") {
        if (!ins.empty()) through = link_id_of(ins[0]);
      } else if (slot < static_cast<int>(ins.size()) && ins[slot].value("type", "") == want) {
        through = link_id_of(ins[slot]);
      }
      if (!through && src.type != "Reroute")
        for (const auto& i : ins)
          if (i.value("type", "") == want && link_id_of(i)) {
            through = link_id_of(i);
            break;
          }
      if (!through) return std::nullopt;
      return resolve(*through, depth + 1);
    }
    if (src.mode == kModeMuted || is_virtual(src.type)) return std::nullopt;
    return Json::array({std::to_string(src.id), l->second.from_slot});
  }

  static std::optional<long long> link_id_of(const Json& slot) {
    if (slot.is_object() && slot.contains("link") && slot["link"].is_number_integer())
      return slot["link"].get<long long>();
    return std::nullopt;
  }

  Result<Json> convert(const UiNode& n) {
    const ClassInfo* ci = oi_.find(n.type);
    if (!ci)
      return make_error(errc::comfyui::kSplitUnknownClass,
                        "{}: the server does not know class \"{}\" (not in its /object_info); "
                        "install the custom node pack that provides it, or remove the node",
                        ui_name(n), n.type);
    Json inputs = Json::object();
    const Json& wv = n.json->value("widgets_values", Json::array());
    if (wv.is_object()) {  // some custom nodes save widgets by name
      for (const auto& spec : ci->inputs)
        if (spec.is_widget() && wv.contains(spec.name)) inputs[spec.name] = wv[spec.name];
    } else if (wv.is_array()) {
      std::size_t i = 0;
      for (const auto& spec : ci->inputs) {
        if (!spec.is_widget()) continue;
        if (i >= wv.size()) break;
        inputs[spec.name] = wv[i++];
        if (spec.has_seed_control() && i < wv.size() && wv[i].is_string()) {
          static const std::set<std::string> kControl = {"fixed", "increment", "decrement",
                                                         "randomize"};
          if (kControl.count(wv[i].get<std::string>())) ++i;
        }
        if (spec.has_upload_widget() && i < wv.size() &&
            (wv[i].is_null() || wv[i] == "image" || wv[i] == "video" || wv[i] == "audio"))
          ++i;
      }
    }
    for (const auto& slot : n.json->value("inputs", Json::array())) {
      if (!slot.is_object() || !slot.contains("name")) continue;
      auto lid = link_id_of(slot);
      if (!lid) continue;
      std::string name = slot["name"].get<std::string>();
      if (slot.contains("widget") && slot["widget"].is_object() && slot["widget"].contains("name"))
        name = slot["widget"]["name"].get<std::string>();
      if (!ci->input(name))
        return make_error(errc::comfyui::kUiInput,
                          "{}: input \"{}\" is not an input of class {} on the "
                          "server",
                          ui_name(n), name, n.type);
      if (auto v = resolve(*lid))
        inputs[name] = std::move(*v);
      else
        inputs.erase(name);
    }
    Json node = {{"class_type", n.type}, {"inputs", std::move(inputs)}};
    node["_meta"] = {{"title", n.title.empty() ? n.type : n.title}};
    return node;
  }

  const Json& ui_;
  const ObjectInfo& oi_;
  std::map<long long, UiLink> links_;
  std::map<long long, UiNode> nodes_;
};

}  // namespace

bool is_ui_format(const Json& j) {
  return j.is_object() && j.contains("nodes") && j["nodes"].is_array() && j.contains("links");
}

Result<Json> ui_to_api(const Json& ui, const ObjectInfo& oi) {
  if (!is_ui_format(ui))
    return make_error(errc::comfyui::kUiNotUi,
                      "not a UI-format workflow (no \"nodes\" array and \"links\")");
  if (!ui["links"].is_array())
    return make_error(errc::comfyui::kUiLink, "UI workflow: \"links\" must be an array");
  return Converter(ui, oi).run();
}

}  // namespace h3pipe::comfyui
