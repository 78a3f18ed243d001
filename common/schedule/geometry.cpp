#include "common/schedule/geometry.h"

#include <cmath>

#include "common/latent/latent.h"

namespace h3pipe::schedule {

std::uint64_t latent_bytes(std::uint32_t width, std::uint32_t height, std::uint32_t frames,
                           std::uint32_t fps) {
  // The one geometry rule (DESIGN.md), shared with the samplers and the latent reader.
  return latent::Geometry::for_job(width, height, frames, fps).data_bytes();
}

double transfer_seconds(std::uint64_t bytes, const config::Link& link) {
  const double wire = link.gbps > 0 ? static_cast<double>(bytes) * 8.0 / (link.gbps * 1e9) : 0;
  return wire + link.latency_ms / 1000.0;
}

}  // namespace h3pipe::schedule
