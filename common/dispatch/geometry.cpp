#include "common/dispatch/geometry.h"

#include <cmath>

#include "common/latent/latent.h"

namespace h3pipe::dispatch {

std::uint64_t latent_bytes(std::uint32_t width, std::uint32_t height, std::uint32_t frames,
                           std::uint32_t fps) {
  return latent_bytes(latent::builtin_profile(), width, height, frames, fps);
}

std::uint64_t latent_bytes(const latent::LatentProfile& profile, std::uint32_t width,
                           std::uint32_t height, std::uint32_t frames, std::uint32_t fps) {
  // The one geometry rule (docs/latent.md), shared with the samplers and the latent readers.
  return latent::latent_bytes(profile, {width, height, frames, fps});
}

std::uint64_t class_latent_bytes(const config::Cluster& c, const std::string& job_class) {
  for (const auto& k : c.classes) {
    if (k.name != job_class) continue;
    auto p = c.latent_profile_for(k.name);
    return latent_bytes(p.ok() ? *p : latent::builtin_profile(), k.width, k.height, k.frames);
  }
  return 0;
}

double transfer_seconds(std::uint64_t bytes, const config::Link& link) {
  const double wire = link.gbps > 0 ? static_cast<double>(bytes) * 8.0 / (link.gbps * 1e9) : 0;
  return wire + link.latency_ms / 1000.0;
}

}  // namespace h3pipe::dispatch
