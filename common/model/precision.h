#pragma once
// Reduced-precision decoder weights for the builtin model ("decoder_precision", docs/model.md):
// the decoder's parameters are rounded once at load the way a reduced-precision VAE stores them,
// while every product still runs in f32.  It reproduces the numerics of an FP16/BF16/INT8 VAE
// (what the seeds measured: FP16 41.95 dB vs INT8 41.50 dB), not its speed.
#include <string_view>

#include "common/model/weights.h"

namespace h3pipe::model {

inline constexpr const char* kPrecisionNames = "f32, bf16, fp16, int8";
bool known_precision(std::string_view name);

// Rounds every decoder tensor (part_of == kDecoder) of `w` in place:
//   bf16  round to nearest even on the top 16 bits of the f32;
//   fp16  IEEE half, round to nearest even (subnormals kept, out of range -> +-inf);
//   int8  tensors of rank >= 2 (conv kernels), per output channel (dim 0): q = round(w / s),
//         s = max|w| / 127, clamped to [-127, 127], stored back as q * s; 1-D tensors (biases,
//         norm gains) stay f32, as INT8 weight-only schemes keep them.
// "f32" (or an unknown name, refused by parse_config) leaves w unchanged.
void round_decoder_weights(Weights& w, std::string_view precision);

// One value through bf16 / fp16 and back (tests).
float round_bf16(float v);
float round_fp16(float v);

}  // namespace h3pipe::model
