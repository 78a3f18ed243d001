#pragma once
// What the DiT sampler on the CPU (dit.cpp) and the one on the device (cuda/dit.cpp) share
// beside their kernels, so that both sample the same thing: the noise streams, the width of the
// time embedding, the token layout of a clip and the flow-matching time grid.  Internal to
// common/model.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/model/model.h"

namespace h3pipe::model {

inline constexpr std::uint64_t kVideoNoise = 0x766964656f6e6f69ull;  // distinct noise streams
inline constexpr std::uint64_t kAudioNoise = 0x617564696f6e6f69ull;
inline constexpr int kTimeEmbed = 256;

// The clip as DiT tokens: T x hp x wp video patches of p x p, then na audio patches of ap.
struct DitTokens {
  int hp, wp;     // video patches per row / column
  int nv, na, n;  // video, audio, all tokens
  int vf, af;     // features of one video / audio patch
};
inline DitTokens dit_tokens(const ModelConfig& c, const LatentDims& dims) {
  const int p = c.patch[1], ap = c.audio_patch;
  DitTokens t{};
  t.hp = (dims.h + p - 1) / p, t.wp = (dims.w + p - 1) / p;
  t.nv = dims.t * t.hp * t.wp, t.na = (dims.audio_len + ap - 1) / ap, t.n = t.nv + t.na;
  t.vf = kVideoChannels * p * p, t.af = kAudioChannels * 2 * ap;
  return t;
}

// Flow-matching time grid t_0 = 1 > ... > t_steps = 0 with the configured shift.
inline std::vector<float> flow_schedule(double shift, std::uint32_t steps) {
  std::vector<float> t(steps + 1);
  for (std::uint32_t i = 0; i <= steps; ++i) {
    const double s = 1.0 - static_cast<double>(i) / steps;
    t[i] = static_cast<float>(shift * s / (1.0 + (shift - 1.0) * s));
  }
  return t;
}

}  // namespace h3pipe::model
