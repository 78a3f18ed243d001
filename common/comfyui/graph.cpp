#include "common/comfyui/graph.h"

#include <algorithm>
#include <charconv>
#include <deque>

namespace h3pipe::comfyui {
namespace {

std::optional<long long> numeric(const std::string& s) {
  long long n = 0;
  if (s.empty()) return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return n;
}

// ["id", integer]: what ComfyUI takes for a link, whatever the integer.
bool link_shaped(const Json& v) {
  return v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_number_integer();
}

}  // namespace

std::optional<int> slot_number(const Json& n) {
  if (!n.is_number_integer()) return std::nullopt;
  if (n.is_number_unsigned())
    return n.get<unsigned long long>() <= static_cast<unsigned long long>(kMaxSlot)
               ? std::optional<int>(static_cast<int>(n.get<unsigned long long>()))
               : std::nullopt;
  const long long v = n.get<long long>();
  return v >= 0 && v <= kMaxSlot ? std::optional<int>(static_cast<int>(v)) : std::nullopt;
}

bool is_link(const Json& v) {
  return link_shaped(v) && slot_number(v[1]).has_value();
}

Slot link_of(const Json& v) {
  return Slot{v[0].get<std::string>(), *slot_number(v[1])};
}

Json make_link(const Slot& s) {
  return Json::array({s.node, s.index});
}

bool id_less(const std::string& a, const std::string& b) {
  auto na = numeric(a), nb = numeric(b);
  if (na && nb) return *na < *nb;
  if (na != nb) return na.has_value();  // numbers first
  return a < b;
}

std::string join_ids(const IdSet& ids) {
  std::string s;
  for (const auto& i : ids) s += (s.empty() ? "" : ", ") + i;
  return s;
}

std::string class_of(const Json& g, const std::string& id) {
  const auto& n = g.at(id);
  return n.at("class_type").get<std::string>();
}

std::string title_of(const Json& node) {
  if (node.is_object() && node.contains("_meta") && node["_meta"].is_object() &&
      node["_meta"].contains("title") && node["_meta"]["title"].is_string())
    return node["_meta"]["title"].get<std::string>();
  return {};
}

std::string describe(const Json& g, const std::string& id) {
  if (!g.contains(id)) return fmt::format("node {}", id);
  std::string t = title_of(g[id]);
  std::string c = g[id].contains("class_type") && g[id]["class_type"].is_string()
                      ? g[id]["class_type"].get<std::string>()
                      : std::string("?");
  if (t.empty() || t == c) return fmt::format("node {} ({})", id, c);
  return fmt::format("node {} ({}, \"{}\")", id, c, t);
}

long long next_free_id(const Json& g) {
  long long m = 0;
  for (auto it = g.begin(); it != g.end(); ++it)
    if (auto n = numeric(it.key())) m = std::max(m, *n);
  return m + 1;
}

Status check_api_graph(const Json& g) {
  if (!g.is_object() || g.empty())
    return make_error(errc::comfyui::kWorkflowNotGraph,
                      "not a ComfyUI workflow: expected a non-empty JSON object of nodes "
                      "({{\"<id>\": {{\"class_type\": ..., \"inputs\": {{...}}}}}}), got {}",
                      g.is_object() ? "an empty object" : g.type_name());
  if (g.contains("nodes") && g.contains("links") && g["nodes"].is_array())
    return make_error(errc::comfyui::kWorkflowUiFormat,
                      "this is a UI-format workflow (nodes/links); convert it with --server URL or "
                      "--object-info FILE, or export it with \"Export (API)\"");
  for (auto it = g.begin(); it != g.end(); ++it) {
    const auto& n = it.value();
    if (!n.is_object() || !n.contains("class_type") || !n["class_type"].is_string() ||
        n["class_type"].get<std::string>().empty())
      return make_error(errc::comfyui::kWorkflowNode,
                        "not a ComfyUI API-format graph: node \"{}\" has no \"class_type\" "
                        "(every value must be {{\"class_type\": string, \"inputs\": object}})",
                        it.key());
    if (n.contains("inputs") && !n["inputs"].is_object())
      return make_error(errc::comfyui::kWorkflowNode, "{}: \"inputs\" must be an object, got {}",
                        describe(g, it.key()), n["inputs"].type_name());
  }
  for (auto it = g.begin(); it != g.end(); ++it) {
    if (!it.value().contains("inputs")) continue;
    for (auto in = it.value()["inputs"].begin(); in != it.value()["inputs"].end(); ++in) {
      if (!link_shaped(in.value())) continue;
      if (!slot_number(in.value()[1]))
        return make_error(errc::comfyui::kWorkflowNode,
                          "{}: input \"{}\" names output slot {}, which is not a slot number (0 "
                          "to {})",
                          describe(g, it.key()), in.key(), in.value()[1].dump(), kMaxSlot);
      Slot s = link_of(in.value());
      if (!g.contains(s.node))
        return make_error(errc::comfyui::kWorkflowMissingNode,
                          "{}: input \"{}\" links to node \"{}\", which is not in the workflow",
                          describe(g, it.key()), in.key(), s.node);
    }
  }
  // Kahn's algorithm; whatever is left over sits on or behind a cycle.
  std::map<std::string, int> indegree;
  std::map<std::string, std::vector<std::string>> users;
  for (auto it = g.begin(); it != g.end(); ++it) {
    indegree[it.key()];
    if (!it.value().contains("inputs")) continue;
    std::set<std::string> deps;
    for (const auto& v : it.value()["inputs"])
      if (is_link(v)) deps.insert(v[0].get<std::string>());
    for (const auto& d : deps) {
      ++indegree[it.key()];
      users[d].push_back(it.key());
    }
  }
  std::deque<std::string> ready;
  for (const auto& [id, d] : indegree)
    if (d == 0) ready.push_back(id);
  std::size_t seen = 0;
  while (!ready.empty()) {
    auto id = ready.front();
    ready.pop_front();
    ++seen;
    for (const auto& u : users[id])
      if (--indegree[u] == 0) ready.push_back(u);
  }
  if (seen != g.size()) {
    // Left over: the nodes on a cycle and those behind one; peel off the latter (nodes whose
    // users are all gone) so the message names the loop.
    std::set<std::string> left;
    for (const auto& [id, d] : indegree)
      if (d > 0) left.insert(id);
    for (bool changed = true; changed;) {
      changed = false;
      for (auto it = left.begin(); it != left.end();) {
        bool feeds = false;
        for (const auto& u : users[*it]) feeds |= left.count(u) != 0;
        if (!feeds) {
          it = left.erase(it);
          changed = true;
        } else {
          ++it;
        }
      }
    }
    auto loop = make_id_set();
    loop.insert(left.begin(), left.end());
    return make_error(errc::comfyui::kWorkflowCycle,
                      "the workflow has a cycle: nodes {} link to each other in a loop (ComfyUI "
                      "runs a graph without cycles)",
                      join_ids(loop));
  }
  return Status::Ok();
}

std::vector<std::string> topological_order(const Json& g) {
  // Kahn's algorithm with the ready nodes kept sorted: the smallest ready id goes next, the order
  // the earlier all-pairs scan gave, in O((nodes + links) log nodes) (issue #35 D8: 8,000 nodes
  // took 29.7 s).
  std::map<std::string, std::size_t> waiting;  // node -> distinct nodes it still waits for
  std::map<std::string, std::vector<std::string>> users;
  for (auto it = g.begin(); it != g.end(); ++it) {
    std::set<std::string> deps;
    if (it.value().contains("inputs"))
      for (const auto& v : it.value()["inputs"])
        if (is_link(v)) deps.insert(v[0].get<std::string>());
    waiting[it.key()] = deps.size();
    for (const auto& d : deps) users[d].push_back(it.key());
  }
  auto ready = make_id_set();
  for (const auto& [id, n] : waiting)
    if (n == 0) ready.insert(id);
  std::vector<std::string> out;
  out.reserve(waiting.size());
  while (!ready.empty()) {  // what is never ready sits on a cycle: check_api_graph reports it
    const std::string id = *ready.begin();
    ready.erase(ready.begin());
    out.push_back(id);
    if (auto u = users.find(id); u != users.end())
      for (const auto& user : u->second)
        if (--waiting[user] == 0) ready.insert(user);
  }
  return out;
}

IdSet ancestors(const Json& g, const std::vector<std::string>& from, const std::set<Slot>& cut) {
  IdSet out = make_id_set();
  std::vector<std::string> stack(from.begin(), from.end());
  while (!stack.empty()) {
    auto id = stack.back();
    stack.pop_back();
    if (!g.contains(id) || !out.insert(id).second) continue;
    if (!g[id].contains("inputs")) continue;
    for (const auto& v : g[id]["inputs"]) {
      if (!is_link(v)) continue;
      Slot s = link_of(v);
      if (cut.count(s)) continue;
      stack.push_back(s.node);
    }
  }
  return out;
}

std::map<Slot, std::vector<Consumer>> consumers(const Json& g) {
  std::map<Slot, std::vector<Consumer>> out;
  for (auto it = g.begin(); it != g.end(); ++it) {
    if (!it.value().contains("inputs")) continue;
    for (auto in = it.value()["inputs"].begin(); in != it.value()["inputs"].end(); ++in)
      if (is_link(in.value())) out[link_of(in.value())].push_back({it.key(), in.key()});
  }
  return out;
}

}  // namespace h3pipe::comfyui
