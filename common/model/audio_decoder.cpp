// Audio decoder: the audio latent (32 ch x 2 sides, L steps) read as 64 features per step ->
// conv + residual block at latent rate -> transposed conv x2 -> conv -> transposed conv x43
// (hop 86 = 2 * 43 samples per latent step) -> conv -> tanh -> 48 kHz stereo.
#include <algorithm>

#include "common/model/conv_ops.h"
#include "common/model/networks.h"

namespace h3pipe::model {

AudioDecoder::AudioDecoder(const Weights& ws, const ModelConfig& c) : c_(c), ws_(ws) {}

void AudioDecoder::decode(Exec& ex, const float* audio, int len, std::int64_t samples,
                          std::vector<float>& pcm) const {
  const int a0 = c_.audio_channels[0], a1 = c_.audio_channels[1], a2 = c_.audio_channels[2];
  const auto w = [&](const std::string& n, int out, int in) {
    return ConvW{ws_.at(n + ".weight"), ws_.at(n + ".bias"), out, in};
  };
  const int n1 = len, n2 = 2 * len, n3 = kAudioHop * len;
  std::vector<float> x(static_cast<std::size_t>(a0) * n1), t(x.size()), t2(x.size());
  conv1d(ex, w("audio.conv_in", a0, 2 * kAudioChannels), 3, audio, n1, x.data(), false);
  std::copy(x.begin(), x.end(), t.begin());
  silu_all(ex, t.data(), t.size());
  conv1d(ex, w("audio.res.conv1", a0, a0), 3, t.data(), n1, t2.data(), false);
  silu_all(ex, t2.data(), t2.size());
  conv1d(ex, w("audio.res.conv2", a0, a0), 3, t2.data(), n1, x.data(), true);
  silu_all(ex, x.data(), x.size());
  t = {};
  t2 = {};

  std::vector<float> y(static_cast<std::size_t>(a1) * n2), z(y.size());
  conv_transpose1d(ex, w("audio.up1", a1, a0), 4, 2, 1, x.data(), n1, y.data());
  x = {};
  silu_all(ex, y.data(), y.size());
  conv1d(ex, w("audio.conv1", a1, a1), 3, y.data(), n2, z.data(), false);
  silu_all(ex, z.data(), z.size());
  y = {};

  std::vector<float> u(static_cast<std::size_t>(a2) * n3);
  conv_transpose1d(ex, w("audio.up2", a2, a1), 2 * (kAudioHop / 2), kAudioHop / 2, kAudioHop / 4,
                   z.data(), n2, u.data());
  z = {};
  silu_all(ex, u.data(), u.size());
  std::vector<float> o(2 * static_cast<std::size_t>(n3));
  conv1d(ex, w("audio.conv_out", 2, a2), 7, u.data(), n3, o.data(), false);

  const std::int64_t n = std::min<std::int64_t>(samples, n3);
  pcm.assign(static_cast<std::size_t>(2 * samples), 0.0f);
  for (std::int64_t i = 0; i < n; ++i)
    for (int ch = 0; ch < 2; ++ch) {
      const float v = o[static_cast<std::size_t>(ch) * n3 + static_cast<std::size_t>(i)];
      pcm[static_cast<std::size_t>(2 * i + ch)] =
          0.25f * (1.0f - 2.0f / (fast_exp(2.0f * v) + 1.0f));
    }
}

}  // namespace h3pipe::model
