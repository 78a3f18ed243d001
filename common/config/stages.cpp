#include "common/config/stages.h"

#include <array>

#include "common/config/config.h"
#include "common/proto/h3pipe.pb.h"

namespace h3pipe::config {
namespace {

constexpr std::array<StageDescriptor, 4> kStages = {{
    {pb::STAGE_ENCODE, StageKind::kEncode, "encode", "encoder", "encode", true, Artifact::kNone,
     Artifact::kConditioning, false},
    {pb::STAGE_SAMPLE, StageKind::kSample, "sample", "sampler", "sample", true,
     Artifact::kConditioning, Artifact::kLatent, false},
    {pb::STAGE_TRANSFER, std::nullopt, "transfer", "transfer", "", false, Artifact::kLatent,
     Artifact::kLatent, false},
    {pb::STAGE_DECODE, StageKind::kDecode, "decode", "decoder", "decode", true, Artifact::kLatent,
     Artifact::kVideo, true},
}};

}  // namespace

std::span<const StageDescriptor> stage_table() {
  return kStages;
}

const StageDescriptor& describe_stage(StageKind k) {
  for (const auto& d : kStages)
    if (d.kind == k) return d;
  return kStages[0];  // not reached: every StageKind has its row
}

const StageDescriptor* find_stage(pb::Stage s) {
  for (const auto& d : kStages)
    if (d.stage == s) return &d;
  return nullptr;
}

const StageDescriptor* find_stage(std::string_view name) {
  for (const auto& d : kStages)
    if (d.name == name) return &d;
  return nullptr;
}

const char* stage_name(StageKind s) {
  return describe_stage(s).name.data();  // the table's names are literals: NUL-terminated
}

}  // namespace h3pipe::config
