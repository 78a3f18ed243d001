// Reduced-precision rounding of the decoder's weights (precision.h).
#include "common/model/precision.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace h3pipe::model {

bool known_precision(std::string_view name) {
  return name == "f32" || name == "bf16" || name == "fp16" || name == "int8";
}

float round_bf16(float v) {
  if (std::isnan(v)) return v;
  std::uint32_t b = std::bit_cast<std::uint32_t>(v);
  b += 0x7fffu + ((b >> 16) & 1u);  // round to nearest, ties to even
  return std::bit_cast<float>(b & 0xffff0000u);
}

float round_fp16(float v) {
  if (!std::isfinite(v)) return v;
  const float a = std::fabs(v);
  if (a >= 65520.0f) return std::copysign(INFINITY, v);  // above half's max after rounding
  // Half's spacing at |v|: 2^(e-10) for normals (e >= -14), 2^-24 for subnormals.
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int exp2 = std::max(e - 1, -14) - 10;
  const float step = std::ldexp(1.0f, exp2);
  return std::copysign(std::nearbyint(a / step) * step, v);  // default mode: ties to even
}

namespace {

void int8_per_channel(Tensor& t) {
  if (t.shape.size() < 2 || t.shape[0] <= 0) return;
  const std::size_t rows = static_cast<std::size_t>(t.shape[0]);
  const std::size_t per = t.data.size() / rows;
  for (std::size_t r = 0; r < rows; ++r) {
    float* row = t.data.data() + r * per;
    float amax = 0;
    for (std::size_t i = 0; i < per; ++i) amax = std::max(amax, std::fabs(row[i]));
    if (amax == 0) continue;
    const float s = amax / 127.0f;
    for (std::size_t i = 0; i < per; ++i)
      row[i] = std::clamp(std::nearbyint(row[i] / s), -127.0f, 127.0f) * s;
  }
}

}  // namespace

void round_decoder_weights(Weights& w, std::string_view precision) {
  if (precision != "bf16" && precision != "fp16" && precision != "int8") return;
  std::vector<std::pair<std::string, Tensor>> changed;
  for (const auto& [name, t] : w.all()) {
    if (part_of(name) != kDecoder) continue;
    Tensor r = t;
    if (precision == "int8") {
      int8_per_channel(r);
    } else {
      for (float& v : r.data) v = precision == "bf16" ? round_bf16(v) : round_fp16(v);
    }
    changed.emplace_back(name, std::move(r));
  }
  for (auto& [name, t] : changed) w.put(name, std::move(t));
}

}  // namespace h3pipe::model
