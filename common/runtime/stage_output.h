#pragma once
// What the external runtimes (exec, comfyui) share: an artifact produced by someone else is
// written to this execution's own temporary, checked for its stage's kind, and only then committed
// under the final name with its sidecar (docs/design.md rules 2 and 4).  Also where a runtime's
// settings sit in the config file, for start-up error messages.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "common/artifacts/artifacts.h"
#include "common/runtime/runtime.h"

namespace h3pipe::runtime {

// "/pools/<i>/runtime/settings" when the pool overrides the runtime, else
// "/stages/<stage>/runtime/settings"; "settings" when the args carry no cluster or pool.
std::string settings_path(const FactoryArgs& a, config::StageKind stage);

// Checks a produced file for its stage: encode — a safetensors tensor file (latent::read_tensors);
// sample — a latent (v2, v1 or ComfyUI .latent) that fits the job's latent profile for its
// geometry (latent::read_latent, docs/latent.md; NaN/Inf: runtime.permanent.nonfinite); decode —
// an MP4 (`ftyp` first) whose video is the job's width x height x frames, with an audio stream
// when the profile has audio (media::probe_movie; a mismatch: runtime.permanent.output_geometry
// with both sizes).  Otherwise error code runtime.invalid_output, naming the file.
Status validate_stage_output(config::StageKind stage, const std::filesystem::path& file,
                             const pb::JobSpec& spec, const latent::LatentProfile& profile);

// What a reader of this stage's latent expects: ctx.latent_profile for the spec's geometry.
latent::Expected expected_latent(const StageContext& ctx);

// Where ctx.output goes, both absolute: the configured root it must stay below (ctx.root when
// set; else the folder above the run's in ctx.output as common/state/paths.h lays stages out,
// ROOT/RUN/JOB/NAME for encode and sample, ROOT/RUN/JOB.mp4 for decode; else, for an output not
// laid out so, its own folder) and the output path, for the artifacts:: Root overloads.
struct OutputTarget {
  artifacts::Root root;
  std::filesystem::path path;
};
OutputTarget output_target(const StageContext& ctx, config::StageKind stage);

// validate_stage_output on `part` (this execution's own temporary, from prepare_output), then
// artifacts::commit_own_part below output_target(ctx, stage).root.  The temporary is removed on
// any failure, so a rejected artifact never reaches the final name.
Result<StageOutput> commit_stage_output(config::StageKind stage, const StageContext& ctx,
                                        const std::filesystem::path& part, std::string device,
                                        nlohmann::json settings);

// A stage output made in memory (the builtin encoder and sampler, a fused marker): published once
// below output_target(ctx, stage).root through this execution's own temporaries
// (artifacts::write_once); `reused` set when another execution's output was there first.  bytes
// is the file's size.
Result<StageOutput> write_stage_output(config::StageKind stage, const StageContext& ctx,
                                       std::span<const std::uint8_t> bytes, std::string device,
                                       nlohmann::json settings);

// Creates the output's folder below output_target(ctx, stage).root, never following a symlink (a
// symlink planted anywhere below the root fails here, path.symlink naming the path, before a
// writer that opens its temporary by path — libav, an exec child, a download — can write through
// it), removes the temporaries of ctx.output that a killed execution left
// (artifacts::remove_dead_temps), and returns this execution's own temporary
// (artifacts::own_part_path): the writer streams the output there, never into a name another
// execution of the same task (a retry beside a worker presumed dead, a re-delivery) also writes
// (issue #35 D6).
Result<std::filesystem::path> prepare_output(const StageContext& ctx, config::StageKind stage);

}  // namespace h3pipe::runtime
