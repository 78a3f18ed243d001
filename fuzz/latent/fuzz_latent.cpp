// libFuzzer target for the latent/safetensors reader: hostile bytes must be refused with an error,
// never crash, hang, over-allocate or trip ASan/UBSan; anything accepted must round-trip.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "common/latent/latent.h"
#include "common/latent/safetensors.h"

using namespace h3pipe::latent;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::uint8_t> bytes(data, size);
  auto generic = parse_tensors(bytes);
  auto l = parse_latent(bytes, nullptr);
  // The small jobs of the seeds: builtin (v1 and v2 seeds) and wan2.1 (v2 and ComfyUI seeds).
  static const Expected kBuiltin{builtin_profile(), {32, 32, 1, 200}};
  static const Expected kWan{*find_builtin_profile("wan2.1"), {64, 48, 9, 16}};
  for (const Expected* want : {&kBuiltin, &kWan}) {
    auto checked = parse_latent(bytes, want);
    if (checked.ok() && !l.ok()) std::abort();  // an expectation only adds checks
  }
  if (l.ok()) {
    if (!generic.ok()) std::abort();  // a valid latent is a valid tensor file
    // Written again in its own form, read back the same: v2 by the writer, ComfyUI's by its
    // writer, v1 (whose job is unknown) as its two tensors without a version key.
    std::vector<std::uint8_t> again_bytes;
    if (l->container == Container::kV2)
      again_bytes = serialize(*l);
    else if (l->container == Container::kComfy)
      again_bytes = serialize_comfy(*l).value();
    else
      again_bytes = st::serialize(
          {{"video", l->geometry.video, l->video}, {"audio", l->geometry.audio, l->audio}},
          l->metadata, DType::kF32);
    auto again = parse_latent(again_bytes, nullptr);
    if (!again.ok() || again->video != l->video || again->audio != l->audio ||
        again->geometry != l->geometry)
      std::abort();
  }
  if (generic.ok()) {
    auto again = parse_tensors(serialize_tensors(*generic, {}));
    if (!again.ok() || again->size() != generic->size()) std::abort();
  }
  return 0;
}
