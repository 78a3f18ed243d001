// libFuzzer target for the latent/safetensors reader: hostile bytes must be refused with an error,
// never crash, hang, over-allocate or trip ASan/UBSan; anything accepted must round-trip.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "common/latent/latent.h"
#include "common/latent/safetensors.h"

using namespace h3pipe::latent;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::uint8_t> bytes(data, size);
  auto generic = parse_tensors(bytes);
  auto l = parse_latent(bytes, nullptr);
  const Geometry small{24, 1, 2, 2, 32, 3};
  auto checked = parse_latent(bytes, &small);
  if (checked.ok() && !l.ok()) std::abort();  // expected geometry only adds checks
  if (l.ok()) {
    if (!generic.ok()) std::abort();  // a valid latent is a valid tensor file
    auto again = parse_latent(serialize(*l), &l->geometry);
    if (!again.ok() || again->video != l->video || again->audio != l->audio ||
        again->metadata != l->metadata)
      std::abort();
  }
  if (generic.ok()) {
    auto again = parse_tensors(serialize_tensors(*generic, {}));
    if (!again.ok() || again->size() != generic->size()) std::abort();
  }
  return 0;
}
