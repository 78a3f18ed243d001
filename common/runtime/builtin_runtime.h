#pragma once
// The `builtin` runtime (docs/design.md "Runtimes"): the reference model of common/model with real
// compute.  encode writes the conditioning tensor `cond` (N, D) as a safetensors file; sample
// writes the dual-stream .h3latent; decode streams frames from the causal VAE decoder into the
// MP4 writer (never the whole clip in memory) and adds the decoded AAC audio.
//
// Settings: the model's (docs/model.md: width, depth, heads, ..., threads, memory_budget_mb,
// seed, weights_file) plus, for decode, "crf" and "preset" of the H.264 encoder.  Unknown keys
// are start-up errors naming the settings path.  Each runtime loads only the weights of its own
// network.
#include "common/core/json_reader.h"
#include "common/runtime/runtime.h"

namespace h3pipe::runtime {

// The factories' settings checks, every problem into `e` under its settings path; host true adds
// what this machine must provide (weights_file readable).  runtime::check_settings calls it.
void check_builtin_settings(const FactoryArgs& a, config::StageKind stage, bool host,
                            config::Errors& e);

Result<std::unique_ptr<StageRuntime>> make_builtin_encode(const FactoryArgs& a);
Result<std::unique_ptr<StageRuntime>> make_builtin_sample(const FactoryArgs& a);
Result<std::unique_ptr<StageRuntime>> make_builtin_decode(const FactoryArgs& a);

}  // namespace h3pipe::runtime
