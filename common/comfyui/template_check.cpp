#include "common/comfyui/template_check.h"

#include <algorithm>
#include <cmath>

#include "common/comfyui/node_classes.h"

namespace h3pipe::comfyui {
namespace {

std::string preview(const std::vector<Json>& choices) {
  if (choices.empty()) return "none";
  std::string s;
  for (std::size_t i = 0; i < choices.size() && i < 8; ++i)
    s += (i ? ", " : "") +
         (choices[i].is_string() ? choices[i].get<std::string>() : choices[i].dump());
  if (choices.size() > 8) s += fmt::format(", ... ({} in all)", choices.size());
  return s;
}

std::optional<std::string> check_value(const InputSpec& spec, const Json& v) {
  const auto& o = spec.options;
  auto range = [&](double x) -> std::optional<std::string> {
    if (o.contains("min") && o["min"].is_number() && x < o["min"].get<double>())
      return fmt::format("{} is below the minimum {}", v.dump(), o["min"].dump());
    if (o.contains("max") && o["max"].is_number() && x > o["max"].get<double>())
      return fmt::format("{} is above the maximum {}", v.dump(), o["max"].dump());
    return std::nullopt;
  };
  if (spec.type == "INT") {
    if (!v.is_number_integer()) return fmt::format("expected an integer, got {}", v.dump());
    if (v.is_number_unsigned()) return range(static_cast<double>(v.get<unsigned long long>()));
    return range(static_cast<double>(v.get<long long>()));
  }
  if (spec.type == "FLOAT") {
    if (!v.is_number()) return fmt::format("expected a number, got {}", v.dump());
    if (!std::isfinite(v.get<double>())) return std::string("not a finite number");
    return range(v.get<double>());
  }
  if (spec.type == "BOOLEAN" && !v.is_boolean())
    return fmt::format("expected true or false, got {}", v.dump());
  if (spec.type == "STRING" && !v.is_string())
    return fmt::format("expected a string, got {}", v.dump());
  return std::nullopt;
}

}  // namespace

const char* issue_kind_name(IssueKind k) {
  switch (k) {
    case IssueKind::kUnknownClass:
      return "unknown_class";
    case IssueKind::kMissingInput:
      return "missing_input";
    case IssueKind::kBadLink:
      return "bad_link";
    case IssueKind::kBadValue:
      return "bad_value";
    case IssueKind::kMissingModelFile:
      return "missing_model_file";
  }
  return "?";
}

std::set<std::string> injected_inputs(const Json& inject) {
  std::set<std::string> out;
  if (!inject.is_object()) return out;
  for (const auto& v : inject) {
    auto add = [&](const Json& t) {
      if (t.is_object() && t.contains("node") && t.contains("input") && t["node"].is_string() &&
          t["input"].is_string())
        out.insert(t["node"].get<std::string>() + "/" + t["input"].get<std::string>());
    };
    if (v.is_array())
      for (const auto& t : v) add(t);
    else
      add(v);
  }
  return out;
}

std::set<std::string> classes_of(const Json& g) {
  std::set<std::string> out;
  if (!g.is_object()) return out;
  for (const auto& n : g)
    if (n.is_object() && n.contains("class_type") && n["class_type"].is_string())
      out.insert(n["class_type"].get<std::string>());
  return out;
}

std::vector<Issue> check_workflow(const Json& g, const ObjectInfo& oi, const CheckOptions& o) {
  std::vector<Issue> out;
  if (!check_api_graph(g).ok()) {
    out.push_back({IssueKind::kBadValue, "", "", "", check_api_graph(g).error().message});
    return out;
  }
  for (const auto& id : topological_order(g)) {
    std::string cls = class_of(g, id);
    const auto* ci = oi.find(cls);
    if (!ci) {
      if (!o.skip_unknown_classes)
        out.push_back({IssueKind::kUnknownClass, id, cls, "",
                       fmt::format("{}: class \"{}\" is not on the server (install the node pack "
                                   "that provides it)",
                                   describe(g, id), cls)});
      continue;
    }
    const auto& in = g[id].value("inputs", Json::object());
    for (const auto& spec : ci->inputs) {
      auto issue = [&](IssueKind k, std::string what) {
        out.push_back({k, id, cls, spec.name,
                       fmt::format("{}: input \"{}\": {}", describe(g, id), spec.name, what)});
      };
      if (!in.contains(spec.name)) {
        if (spec.required) issue(IssueKind::kMissingInput, "required but missing");
        continue;
      }
      const Json& v = in[spec.name];
      if (is_link(v)) {
        Slot s = link_of(v);
        const auto* src = oi.find(class_of(g, s.node));
        if (!src) continue;
        if (s.index >= static_cast<int>(src->output_types.size())) {
          issue(IssueKind::kBadLink,
                fmt::format("links to output {} of {}, which has {} output(s)", s.index,
                            describe(g, s.node), src->output_types.size()));
          continue;
        }
        const std::string& have = src->output_types[s.index];
        if (spec.type != "COMBO" && have != "*" && spec.type != "*" && have != spec.type &&
            spec.type.find(have) == std::string::npos)
          issue(IssueKind::kBadLink, fmt::format("expects {}, but output {} of {} is {}", spec.type,
                                                 s.index, describe(g, s.node), have));
        continue;
      }
      bool injected = o.injected.count(id + "/" + spec.name) != 0;
      if (spec.type == "COMBO" && spec.choices) {
        bool file = is_model_file_input(cls, spec.name);
        if (injected && !file) continue;
        // A server without model files still lists built-in entries such as "pixel_space".
        bool no_files = std::none_of(spec.choices->begin(), spec.choices->end(), [](const Json& c) {
          return c.is_string() && c.get<std::string>().find('.') != std::string::npos;
        });
        if (file && no_files && o.skip_empty_file_lists) continue;
        if (std::find(spec.choices->begin(), spec.choices->end(), v) == spec.choices->end()) {
          if (file)
            issue(IssueKind::kMissingModelFile,
                  fmt::format("model file {} is not on the server (it has: {})", v.dump(),
                              preview(*spec.choices)));
          else if (!spec.choices->empty())
            issue(IssueKind::kBadValue,
                  fmt::format("{} is not one of: {}", v.dump(), preview(*spec.choices)));
        }
        continue;
      }
      if (auto why = check_value(spec, v)) issue(IssueKind::kBadValue, *why);
    }
  }
  return out;
}

}  // namespace h3pipe::comfyui
