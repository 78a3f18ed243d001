#pragma once
// Latent geometry and transfer cost, as the planner sees them (DESIGN.md "Data"):
//   video (1, 24, (frames-1)/4+1, H/16, W/16) + audio (1, 32, 2, ceil(frames/fps*48000/86)),
//   float32 -> about 4.4 MB at 416x736 x 124 frames @ 24 fps, about 12 MB at 736x1280.
#include <cstdint>

#include "common/config/config.h"

namespace h3pipe::schedule {

inline constexpr std::uint32_t kDefaultFps = 24;  // config::JobClass has no fps field

std::uint64_t latent_bytes(std::uint32_t width, std::uint32_t height, std::uint32_t frames,
                           std::uint32_t fps = kDefaultFps);

// Seconds to move `bytes` over `link`: bytes*8/(gbps*1e9) + latency_ms/1000.  The latency term
// is the per-transfer fixed cost (handshake, hashing, fsync), not only the wire's round trip.
double transfer_seconds(std::uint64_t bytes, const config::Link& link);

}  // namespace h3pipe::schedule
