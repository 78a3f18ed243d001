#pragma once
// The `exec` runtime (docs/design.md "Runtimes"): a stage runs a command template, without a shell.
//
// Settings (validated at construction; unknown keys are errors naming the settings path):
//   {"command": ["prog", "--in", "{input}", "--out", "{output}"],  required, argv
//    "timeout_s": 3600,        the process group is killed after this (SIGTERM, then SIGKILL)
//    "kill_grace_s": 2,        SIGTERM -> SIGKILL delay
//    "env": {"KEY": "value"},  added to the service's environment (values may use placeholders)
//    "cwd": "/path",           working directory (default: the service's)
//    "device": "cuda:0"}       what computed it, for the receipt (default "exec")
// A sample command's latent must fit the job's latent profile (docs/latent.md).
// Placeholders (docs/runtimes.md): {input} {output} {spec_json} {job_id} {run_id} {stage}
// {conditioning} {reference_image} {prompt} {negative_prompt} {width} {height} {frames} {fps}
// {steps} {seed}; `{{` and `}}` are literal braces.  {reference_image} (and {spec_json}'s
// referenceImage) is a private copy of the job's file, OUTPUT.reference<ext> beside the output,
// made from the file opened beneath limits.input_roots (inputs.h) and removed when the command
// ends; the command never gets the job's own path.  {output} is the output's .part path: the
// command writes there; the runtime then validates it for its stage (stage_output.h) and
// commits it with its sidecar.  A non-zero exit, a timeout, a missing or invalid output fail the
// task with the tail of the command's stderr in the reason.
// Step progress (#37): a line `progress N/M` on stdout or stderr (leading spaces allowed, 0 <= N
// <= M, M >= 1) reports step N of M; other lines are ignored.
#include <optional>
#include <string_view>
#include <utility>

#include "common/core/json_reader.h"
#include "common/runtime/runtime.h"

namespace h3pipe::runtime {

// The checks of the factories below, every problem into `e` under its settings path.  host
// false: only what the config says (keys, types, placeholders); true: also what this machine must
// provide (the program, directly or on PATH; cwd).  runtime::check_settings calls it.
void check_exec_settings(const FactoryArgs& a, config::StageKind stage, bool host,
                         config::Errors& e);

// {N, M} from a `progress N/M` line; nullopt for any other line.
std::optional<std::pair<long long, long long>> parse_progress_line(std::string_view line);

Result<std::unique_ptr<StageRuntime>> make_exec_encode(const FactoryArgs& a);
Result<std::unique_ptr<StageRuntime>> make_exec_sample(const FactoryArgs& a);
Result<std::unique_ptr<StageRuntime>> make_exec_decode(const FactoryArgs& a);

}  // namespace h3pipe::runtime
