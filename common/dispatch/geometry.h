#pragma once
// Latent size and transfer cost, as the planner sees them: the job's latent profile's geometry
// (docs/latent.md), float32.  The builtin profile (video (1, 24, (frames-1)/4+1, H/16, W/16) +
// audio (1, 32, 2, ceil(frames/fps*48000/86))) gives about 4.3 MB at 416x736 x 124 frames @ 24
// fps, about 12 MB at 736x1280; wan2.1 at 832x480 x 81 frames about 2.1 MB.
#include <cstdint>
#include <string>

#include "common/config/config.h"
#include "common/latent/profile.h"

namespace h3pipe::dispatch {

inline constexpr std::uint32_t kDefaultFps = 24;  // config::JobClass has no fps field

std::uint64_t latent_bytes(std::uint32_t width, std::uint32_t height, std::uint32_t frames,
                           std::uint32_t fps = kDefaultFps);  // the builtin profile
std::uint64_t latent_bytes(const latent::LatentProfile& profile, std::uint32_t width,
                           std::uint32_t height, std::uint32_t frames,
                           std::uint32_t fps = kDefaultFps);
// A job class's latent bytes on this cluster (its latent_profile, else the cluster's); 0 when the
// class is not in /classes.
std::uint64_t class_latent_bytes(const config::Cluster& c, const std::string& job_class);

// Seconds to move `bytes` over `link`: bytes*8/(gbps*1e9) + latency_ms/1000.  The latency term
// is the per-transfer fixed cost (handshake, hashing, fsync), not only the wire's round trip.
double transfer_seconds(std::uint64_t bytes, const config::Link& link);

}  // namespace h3pipe::dispatch
