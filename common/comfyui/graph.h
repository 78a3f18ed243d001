#pragma once
// A ComfyUI workflow in API format: {"<node id>": {"class_type": s, "inputs": {...}, "_meta": {}}},
// where an input is a widget value or a link ["<node id>", output slot].  Pure functions over
// nlohmann::json: no I/O, no server.  The checks here are the ones every consumer of a workflow
// file needs (the splitter, the template check, preflight).
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/core/result.h"

namespace h3pipe::comfyui {

using Json = nlohmann::json;

// One end of a link: a node's output slot.
struct Slot {
  std::string node;
  int index = 0;
  auto operator<=>(const Slot&) const = default;
};

// The largest output slot a link may name (ComfyUI's slots are list indexes).
inline constexpr long long kMaxSlot = 2147483647;

// A slot number as the workflow wrote it, or nullopt when it is not an integer 0..kMaxSlot
// (issue #35 D11: get<int>() once wrapped 4294967296 to slot 0).
std::optional<int> slot_number(const Json& n);

bool is_link(const Json& v);  // ["id", 0..kMaxSlot]
Slot link_of(const Json& v);  // precondition: is_link(v)
Json make_link(const Slot& s);

// Checks the shape: a non-empty object whose every value is {"class_type": string, "inputs":
// object}, every link naming a node of the graph, and no cycle.  Errors (code, message naming
// the node): comfyui.workflow.not_graph, comfyui.workflow.ui_format, comfyui.workflow.node,
// comfyui.workflow.missing_node, comfyui.workflow.cycle.
Status check_api_graph(const Json& g);

// Node ids in an order where every node comes after the nodes it links to; ties by id (numeric
// ids numerically).  Precondition: check_api_graph(g) passed.
std::vector<std::string> topological_order(const Json& g);

// "3" < "10" < "a": how node ids are listed in messages and outputs.
bool id_less(const std::string& a, const std::string& b);
using IdSet = std::set<std::string, decltype(&id_less)>;
inline IdSet make_id_set() {
  return IdSet(&id_less);
}
std::string join_ids(const IdSet& ids);  // "3, 8, 10"

// Every node `from` reaches by following links upstream, `from` included.  `cut` (optional):
// links that are not followed (the node behind them is not added through them).
IdSet ancestors(const Json& g, const std::vector<std::string>& from,
                const std::set<Slot>& cut = {});

// node id -> the (node, input name) pairs that consume each of its output slots.
struct Consumer {
  std::string node, input;
};
std::map<Slot, std::vector<Consumer>> consumers(const Json& g);

std::string class_of(const Json& g, const std::string& id);
std::string title_of(const Json& node);  // _meta.title, or ""
// "node 3 (KSampler)" / "node 3 (KSampler, "Sampler")": how messages name a node.
std::string describe(const Json& g, const std::string& id);

// The largest numeric id + 1 (ids that are not numbers are skipped).
long long next_free_id(const Json& g);

}  // namespace h3pipe::comfyui
