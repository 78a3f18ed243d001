#pragma once
// The comfyui runtime's settings (docs/runtimes.md, "comfyui" > Settings), parsed and checked once
// at construction with every problem reported together, each naming its settings path.
//
// Templates: the top-level workflow/inject/output is the "default" template; `templates` adds
// more, chosen per job (choose()):
//   "templates": {"default": {...}, "reference": {...}, "hd": {...}, "hd+reference": {...}}
// each {"workflow", "inject", "output"} like the top level.  A key is "default", "reference" (jobs
// with a referenceImage), a job class of the cluster config, or "<class>+reference".
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/core/json_reader.h"
#include "common/runtime/comfyui_workflow.h"
#include "common/runtime/runtime.h"

namespace h3pipe::runtime::comfyui {

struct Settings {
  std::string url, device, client_id, input_dir, input_ref, output_dir;
  std::string upload_subfolder = "h3pipe";
  std::map<std::string, Workflow> templates;  // by key, see above
  double poll_ms = 500, timeout_s = 3600, request_timeout_s = 30, unreachable_s = 60;
  int connect_timeout_ms = 3000;
  bool fused = false, keep_history = false;
  std::uint64_t max_output_bytes = 0;
  std::uint64_t max_upload_bytes = 100ull << 20;   // ComfyUI's default --max-upload-size
  std::vector<std::filesystem::path> input_roots;  // the cluster's limits.input_roots
};

Result<Settings> parse_settings(const FactoryArgs& a, config::StageKind stage);
// The checks of parse_settings, every problem into `e` under its settings path.  host false: only
// what the config says (keys, types, values, inline workflows), true: also what this machine must
// provide (workflow files, input_dir/output_dir).  runtime::check_settings calls it.
Settings read_settings(const FactoryArgs& a, config::StageKind stage, bool host, config::Errors& e);

// The template for a job: with a reference image "<class>+reference", "reference", then (for
// every job) "<class>", "default".  Returns the key chosen; nullptr when none fits.
const Workflow* choose(const Settings& s, const std::string& job_class, bool has_reference,
                       std::string* key);

}  // namespace h3pipe::runtime::comfyui
