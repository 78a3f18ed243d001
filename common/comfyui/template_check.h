#pragma once
// Checks an API-format workflow against a server's /object_info the way ComfyUI validates a
// prompt at POST /prompt, before any job is queued: every class known, every required input
// given, links from outputs of the right type, widget values of the right kind and in range,
// combo values among the choices, and every model file a loader names present on the server.
// Used by the template tests and by `h3pipe preflight` (comfyui.templates).
#include <set>
#include <string>
#include <vector>

#include "common/comfyui/object_info.h"

namespace h3pipe::comfyui {

enum class IssueKind { kUnknownClass, kMissingInput, kBadLink, kBadValue, kMissingModelFile };
const char* issue_kind_name(IssueKind k);

struct Issue {
  IssueKind kind;
  std::string node, cls, input;
  std::string
      message;  // "node 39 (VAELoader): model file \"x\" is not on the server (vae_name: ...)"
};

struct CheckOptions {
  // Inputs the runtime writes per job ("<node>/<input>"): their template value is a placeholder
  // and is not checked against the choices (LoadImage's image, for one).
  std::set<std::string> injected;
  // Classes that may be missing (e.g. custom packs when checking against a core-only server).
  bool skip_unknown_classes = false;
  // Model-file combos whose choice list is empty are a server without models: skip them.
  bool skip_empty_file_lists = false;
};

std::vector<Issue> check_workflow(const Json& api_graph, const ObjectInfo& oi,
                                  const CheckOptions& options = {});

// "<node>/<input>" for every target of a runtime inject map ({param: {node,input} | [...]}).
std::set<std::string> injected_inputs(const Json& inject);

// Every class a graph uses, and every (class, input, value) model file its loaders name.
std::set<std::string> classes_of(const Json& api_graph);

}  // namespace h3pipe::comfyui
