#pragma once
// A ComfyUI workflow template in API format ({"<node id>": {"class_type", "inputs", "_meta"}}) and
// the map saying which node inputs receive a job's parameters.  Parsed and checked once, at
// runtime construction: every target node must exist (by id, or by its unique _meta.title), the
// input must exist in the node and must not be a link, so a typo fails at start-up rather than
// on the first job.  instantiate() is pure: it copies the graph and writes the values.
//
// Threading: immutable after parse(); instantiate() is const and reentrant.
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/core/json_reader.h"

namespace h3pipe::runtime::comfyui {

// Parameters that can be injected; "params.<key>" (from JobSpec.params) is accepted as well.
// prompt negative_prompt seed steps width height frames fps job_id run_id filename_prefix
// input reference_image reference_audio last_frame_image
const std::vector<std::string>& injectable_keys();

struct Target {
  std::string node_id;
  std::string input;
};

class Workflow final {
 public:
  // `workflow` is a path (absolute, or relative to the working directory) or an inline object;
  // `inject` maps parameter -> {"node": id | "title": t, "input": name} or an array of those;
  // `output` (may be null) is {"node": id} or {"title": t}.  Errors go to `e` under `path`.
  static std::optional<Workflow> parse(const nlohmann::json& workflow, const nlohmann::json* inject,
                                       const nlohmann::json* output, const std::string& path,
                                       config::Errors& e);

  bool uses(const std::string& key) const { return targets_.count(key) != 0; }
  // The nodes the stage runs (partial_execution_targets): the `output` node when one is named,
  // else every node that no other node consumes (ComfyUI runs only the output nodes among them).
  const std::vector<std::string>& execution_targets() const { return exec_targets_; }
  // How final a node's output is, for choosing the artifact among the files a prompt lists:
  // greater = later.  A node nothing consumes ranks above a consumed one; then the longest path
  // from a source (ComfyUI executes a node after everything upstream of it, so the output
  // furthest downstream is the last to run).
  std::pair<int, int> output_rank(const std::string& node_id) const;
  const std::map<std::string, std::vector<Target>>& targets() const { return targets_; }
  const std::string& output_node() const { return output_node_; }  // empty = any
  const std::string& source() const { return source_; }            // file path or "inline"
  const std::string& sha256() const { return sha256_; }            // of the template as loaded
  const nlohmann::json& graph() const { return graph_; }

  // The graph with `values` (parameter -> JSON value) written into their targets.  A parameter
  // without a value leaves the template's value in place.  A string value aimed at a numeric
  // input is converted when it parses as a number (JobSpec.params are strings).
  // `nonce` (when not empty) is written into every execution target as the extra input
  // "h3pipe_attempt": ComfyUI passes a node only the inputs it declares, but its output cache
  // keys on every input, so each attempt's outputs run afresh and never come from the cache.
  nlohmann::json instantiate(const std::map<std::string, nlohmann::json>& values,
                             const std::string& nonce = {}) const;

 private:
  void analyse();

  nlohmann::json graph_;
  std::map<std::string, std::vector<Target>> targets_;
  std::string output_node_, source_, sha256_;
  std::vector<std::string> exec_targets_;
  std::map<std::string, int> depth_;
  std::map<std::string, bool> consumed_;
};

}  // namespace h3pipe::runtime::comfyui
