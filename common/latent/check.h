#pragma once
// What a validated safetensors layout means as a latent (internal to common/latent): its form
// (v1, v2, ComfyUI), its metadata, and its shapes against the job's profile.  Pure: no I/O, no
// tensor data; read_latent/parse_latent decode the tensors it names afterwards.
#include "common/latent/latent.h"
#include "common/latent/safetensors.h"

namespace h3pipe::latent::detail {

struct Classified {
  Container container = Container::kV2;
  std::string profile;  // "" when unknown (ComfyUI without an expectation)
  JobSize job;
  std::string layout;
  Geometry geometry;
  const st::TensorInfo* video = nullptr;  // points into the layout
  const st::TensorInfo* audio = nullptr;  // null without audio
};

// Errors: latent.version, latent.metadata, latent.legacy, latent.missing_tensor,
// latent.unexpected_tensor, latent.job_geometry, latent.profile, latent.geometry,
// latent.header_schema.
Result<Classified> classify(const st::Layout& layout, const Expected* expected);

std::string shape_str(const std::vector<std::uint64_t>& s);

}  // namespace h3pipe::latent::detail
