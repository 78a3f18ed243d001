#pragma once
// One row per stage (#40 item 2): what tells encode, sample, transfer and decode apart, in one
// table that the rest asks instead of keeping its own names or switches.  Per stage: its enum in
// tasks and records (pb::Stage), its enum in the config (config::StageKind: the stages a pool
// runs), its name (config, logs, Redis fields such as attempts:NAME, events), the service that
// runs it, the stream its tasks wait on (the name keys::stage_stream takes), whether a runtime
// computes it (runtime/runtime.h), and the artifacts it reads and writes (state/paths.h).
//
// Light on purpose: both enums are declared opaque here (their underlying types are fixed), so
// including this header pulls in neither config.h nor the generated protobuf header.
#include <optional>
#include <span>
#include <string_view>

namespace h3pipe::pb {
enum Stage : int;  // common/proto/h3pipe.proto
}

namespace h3pipe::config {
enum class StageKind;  // config.h

// A file a stage reads or writes, below the artifact root (conditioning, latent) or the output
// root (the video); the paths themselves come from state/paths.h.
enum class Artifact { kNone, kConditioning, kLatent, kVideo };

struct StageDescriptor {
  pb::Stage stage;
  // The config's stage of a pool running it; none for transfer (the transfer service, no pool).
  std::optional<StageKind> kind;
  std::string_view name;     // "encode", "sample", "transfer", "decode"
  std::string_view service;  // "encoder", "sampler", "transfer", "decoder"
  // The name keys::stage_stream takes (per decode host for decode); empty: the stage's work is
  // not queued on a stream (the transfer's latents are pushed to the receiver).
  std::string_view stream;
  bool runtime;  // a StageRuntime computes it (the pools' stages); else its own service does
  Artifact reads;
  Artifact writes;
  bool writes_receipt;  // the last stage writes JOB.pipeline.json before it acks
};

// Every stage, in pipeline order.
std::span<const StageDescriptor> stage_table();
// A pool's stage: every StageKind has its row.
const StageDescriptor& describe_stage(StageKind k);
// nullptr for STAGE_UNSPECIFIED, a value no row has, or a name no stage has.
const StageDescriptor* find_stage(pb::Stage s);
const StageDescriptor* find_stage(std::string_view name);

}  // namespace h3pipe::config
