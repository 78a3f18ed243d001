// Conditioning encoder: prompt bytes -> byte tokens -> embedding + text transformer; an optional
// reference image adds 8x8 patch tokens.
#include <algorithm>

#include "common/model/networks.h"

namespace h3pipe::model {

namespace {
constexpr int kBos = 256, kEos = 257, kPad = 258;
}

TextEncoder::TextEncoder(const Weights& ws, const ModelConfig& c)
    : c_(c),
      embed_(ws.at("text.embed")),
      norm_g_(ws.at("text.norm.weight")),
      norm_b_(ws.at("text.norm.bias")),
      image_proj_(linear_w(ws, "image.proj", c.width, 3 * kRefPatch * kRefPatch)) {
  for (int i = 0; i < c.text_layers; ++i)
    blocks_.push_back(
        text_block_w(ws, fmt::format("text.blocks.{}", i), c.width, c.width * c.mlp_ratio));
}

Tensor TextEncoder::encode(Exec& ex, std::string_view prompt, const media::Image* ref) const {
  const int d = c_.width, n = c_.cond_tokens;
  constexpr int kGrid = kRefImageSize / kRefPatch;
  const int n_img = ref ? kGrid * kGrid : 0;
  Tensor out;
  out.shape = {n + n_img, d};
  out.data.assign(static_cast<std::size_t>(n + n_img) * d, 0.0f);
  float* x = out.data.data();

  // Byte tokens: BOS, the prompt's bytes (truncated), EOS, then PAD.
  std::vector<int> ids(static_cast<std::size_t>(n), kPad);
  ids[0] = kBos;
  const int room = std::max(0, n - 2);
  const int used = std::min<int>(room, static_cast<int>(prompt.size()));
  for (int i = 0; i < used; ++i)
    ids[static_cast<std::size_t>(i) + 1] = static_cast<unsigned char>(prompt[i]);
  if (n >= 2) ids[static_cast<std::size_t>(used) + 1] = kEos;
  std::vector<float> pos(static_cast<std::size_t>(d));
  for (int i = 0; i < n; ++i) {
    sinusoid(static_cast<float>(i), d, pos.data());
    const float* e = embed_ + static_cast<std::size_t>(ids[static_cast<std::size_t>(i)]) * d;
    for (int j = 0; j < d; ++j) x[static_cast<std::size_t>(i) * d + j] = e[j] + pos[j];
  }
  const int hidden = d * c_.mlp_ratio;
  for (const auto& b : blocks_) text_block(ex, b, x, n, d, c_.heads, hidden);
  layer_norm_rows(ex, x, x, n, d, norm_g_, norm_b_);

  if (ref) {
    const media::Image img = media::resize_bilinear(*ref, kRefImageSize, kRefImageSize);
    const int feat = 3 * kRefPatch * kRefPatch;
    std::vector<float> patches(static_cast<std::size_t>(n_img) * feat);
    for (int py = 0; py < kGrid; ++py)
      for (int px = 0; px < kGrid; ++px) {
        float* f = patches.data() + static_cast<std::size_t>(py * kGrid + px) * feat;
        for (int y = 0; y < kRefPatch; ++y)
          for (int xx = 0; xx < kRefPatch; ++xx)
            for (int ch = 0; ch < 3; ++ch) {
              const std::size_t src =
                  (static_cast<std::size_t>(py * kRefPatch + y) * kRefImageSize + px * kRefPatch +
                   xx) *
                      3 +
                  ch;
              *f++ = static_cast<float>(img.rgb[src]) / 127.5f - 1.0f;
            }
      }
    float* xi = x + static_cast<std::size_t>(n) * d;
    apply(ex, image_proj_, patches.data(), n_img, xi);
    const int half = (d / 2) & ~1;
    for (int p = 0; p < n_img; ++p) {
      sinusoid(static_cast<float>(p / kGrid), half, pos.data());
      sinusoid(static_cast<float>(p % kGrid), half, pos.data() + half);
      for (int j = 0; j < 2 * half; ++j) xi[static_cast<std::size_t>(p) * d + j] += pos[j];
    }
  }
  return out;
}

}  // namespace h3pipe::model
