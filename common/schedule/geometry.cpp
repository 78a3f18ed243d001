#include "common/schedule/geometry.h"

#include <cmath>

namespace h3pipe::schedule {

std::uint64_t latent_bytes(std::uint32_t width, std::uint32_t height, std::uint32_t frames,
                           std::uint32_t fps) {
  constexpr std::uint64_t kVideoChannels = 24, kAudioChannels = 32, kFloat = 4;
  const std::uint64_t t = frames == 0 ? 0 : (frames - 1) / 4 + 1;
  const std::uint64_t video = kVideoChannels * t * (height / 16) * (width / 16);
  const double seconds = fps == 0 ? 0 : static_cast<double>(frames) / fps;
  const auto audio_len = static_cast<std::uint64_t>(std::ceil(seconds * 48000.0 / 86.0 - 1e-9));
  const std::uint64_t audio = kAudioChannels * 2 * audio_len;
  return (video + audio) * kFloat;
}

double transfer_seconds(std::uint64_t bytes, const config::Link& link) {
  const double wire = link.gbps > 0 ? static_cast<double>(bytes) * 8.0 / (link.gbps * 1e9) : 0;
  return wire + link.latency_ms / 1000.0;
}

}  // namespace h3pipe::schedule
