#pragma once
// What a ComfyUI server says about its node classes (GET /object_info), read once into a
// lookup: per class its inputs in the server's order (required, then optional), which of them
// are widgets (values, not links), combo choices and number ranges, and its outputs.  Pure data:
// the CLI and preflight fetch the JSON, this only reads it.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/comfyui/graph.h"

namespace h3pipe::comfyui {

struct InputSpec {
  std::string name;
  bool required = true;
  std::string type;  // "INT", "FLOAT", "STRING", "BOOLEAN", "COMBO", "LATENT", ...
  std::optional<std::vector<Json>> choices;  // COMBO: the values the server accepts
  Json options = Json::object();             // the spec's option object (default, min, max, ...)

  // A value typed into the node (the UI shows a widget) rather than a link from another node.
  bool is_widget() const;
  // The UI adds a "control_after_generate" value (fixed/randomize/...) after this widget.
  bool has_seed_control() const;
  // The UI adds an upload button whose value follows this widget's (LoadImage: "image").
  bool has_upload_widget() const;
};

struct ClassInfo {
  std::string name;
  std::vector<InputSpec> inputs;
  std::vector<std::string> output_types, output_names;
  bool output_node = false;
  std::string python_module;  // "nodes", "comfy_extras.nodes_wan", "custom_nodes.X"

  const InputSpec* input(const std::string& n) const;
};

class ObjectInfo final {
 public:
  // `j` is the body of GET /object_info (or entries of GET /object_info/<class> merged;
  // allow_empty: none of them known).  Error comfyui.object_info naming the malformed class.
  static Result<ObjectInfo> parse(const Json& j, bool allow_empty = false);

  const ClassInfo* find(const std::string& cls) const;
  std::size_t size() const { return classes_.size(); }

 private:
  std::map<std::string, ClassInfo> classes_;
};

// The built-in view of the core classes the splitter knows by name, used when no object_info
// is given (API-format input): output names only.  Empty when the class is not known.
const std::vector<std::string>& known_output_names(const std::string& cls);

}  // namespace h3pipe::comfyui
