#pragma once
// The `comfyui` runtime (docs/design.md "Runtimes"): a stage drives a ComfyUI server through its
// HTTP API the way the seeds' hosts ran — queue an API-format workflow with the job's parameters
// written into named node inputs, poll /history until it finishes, fetch the output through
// /view into the artifact's .part, validate it for the stage and commit it with its sidecar.
//
// Each attempt sends h3pipe's own prompt id (run, job, stage, attempt) and a per-attempt nonce
// in the execution targets, so ComfyUI's cache never hands back an earlier (possibly deleted)
// output, and a later attempt adopts an earlier attempt's prompt that is still queued or running
// instead of queueing a second.  Only the stage's outputs run (partial_execution_targets).
//
// Settings (comfyui_settings.h; validated at construction; unknown keys are errors naming the
// settings path; the full reference with examples is docs/runtimes.md):
//   url               "http://host:8188"  which server serves this stage (required)
//   workflow          path to an API-format JSON template, or the template inline (the default
//                     template; required unless fused or templates.default)
//   inject            {"prompt": {"node": "6", "input": "text"}, "seed": {"title": "Sampler",
//                     "input": "noise_seed"}, ...}; a value may be an array of targets
//   output            {"node": id} | {"title": t}: the node whose file is the artifact (default:
//                     the stage's kind from the most final node of the graph)
//   templates         {"reference": {workflow, inject, output}, "<class>[+reference]": ...}
//   input_dir         a folder the server reads (its input/ or a shared mount): inputs are
//                     copied there and removed after the task; without it, uploaded
//   input_ref         "path" (absolute path of the copy; default with input_dir) or "name"
//   output_dir        the server's output folder as mounted here: outputs deleted once fetched
//   upload_subfolder  "h3pipe";  max_upload_bytes 104857600 (the server's --max-upload-size)
//   poll_ms 500, unreachable_s 60, timeout_s 3600, connect_timeout_ms 3000, request_timeout_s 30
//   client_id         default "h3pipe-<pool>"
//   device            receipt text (default "comfyui@host:port")
//   keep_history      false: the prompt's history entry is deleted once it is done
//   fused             encode only: the sample workflow encodes the prompt itself (the seeds'
//                     deployment); encode then writes a small marker conditioning file and
//                     queues nothing
#include "common/runtime/runtime.h"

namespace h3pipe::runtime {

Result<std::unique_ptr<StageRuntime>> make_comfyui_encode(const FactoryArgs& a);
Result<std::unique_ptr<StageRuntime>> make_comfyui_sample(const FactoryArgs& a);
Result<std::unique_ptr<StageRuntime>> make_comfyui_decode(const FactoryArgs& a);

}  // namespace h3pipe::runtime
