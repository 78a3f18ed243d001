#pragma once
// Node classes that ship in ComfyUI core from some release on, with that release: what
// preflight names when a template needs one its server lacks (upgrading ComfyUI is the fix, not
// a node pack).  One row per class, so another model family's core nodes are listed the same way.
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace h3pipe::preflight {

struct CoreClass {
  std::string_view cls;            // the node's class_type
  std::string_view first_version;  // the first ComfyUI release that has it, "0.30.0"
  std::string_view family;         // the model family, for the message: "MiniMax H3"
  std::string_view source;         // where it lives in ComfyUI: "comfy_extras/nodes_minimax_h3.py"
};

std::span<const CoreClass> core_classes();

// The row for `cls`; nullptr for a class not in the table (a custom node's, or an old core one).
const CoreClass* find_core_class(std::string_view cls);

// Compares two dotted release numbers numerically ("0.3.64" < "0.30.0"); nullopt when either is
// not digits and dots (a nightly's "0.30.0-dev+abc" is compared by its leading numbers).
std::optional<int> compare_versions(std::string_view a, std::string_view b);

// The FAIL row's detail and fix for a core class the server at `url` lacks; `server_version` is
// its /system_stats comfyui_version, empty when unknown.
std::string core_class_missing(const CoreClass& c, const std::string& node,
                               const std::string& server_version);
std::string core_class_fix(const CoreClass& c, const std::string& url,
                           const std::string& server_version);

}  // namespace h3pipe::preflight
