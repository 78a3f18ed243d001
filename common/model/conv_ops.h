#pragma once
// Convolution kernels of the decoders as im2col + sgemm over fixed-size bands (task boundaries
// depend only on the layer's geometry, never on the thread count).  Activations are planar:
// one frame is (C, h, w) row-major; a 1-D signal is (C, n).
#include <cstddef>
#include <vector>

#include "common/model/transformer.h"

namespace h3pipe::model {

// im2col bands: rows enough for kMinBandPx output pixels (GEMM efficiency), at most kColBytes.
inline constexpr std::size_t kColBytes = 4u << 20;
inline constexpr int kMinBandPx = 1024;
// Output rows per band of a 3x3 layer with k = 9*Cin and output width ow.
int band_rows(int k, int ow, int oh);
// Pixels per band of a temporal (pointwise) conv with k = 3*Cin.
std::size_t time_band(int k);

struct ConvW {
  const float* w = nullptr;  // PyTorch layout (out, in, k...)
  const float* b = nullptr;
  int out = 0, in = 0;
  const float* phases = nullptr;  // 2x-upsampling 3x3 convs: subpixel_weights(w) (optional)
};

// Nearest 2x upsampling followed by a 3x3 conv equals, for each of the 4 output phases
// (py, px), a 2x2 conv on the low-resolution input with summed taps: 4/9 of the work and no
// upsampled im2col.  Returns (4, out, in, 2, 2).
std::vector<float> subpixel_weights(const float* w, int out, int in);

// One frame: out (Cout, oh, ow) = conv3x3(in) + bias, zero padding 1.  With upsample the input
// (Cin, h, w) is first repeated 2x2 (nearest), so oh = 2h, ow = 2w.  accumulate: out += ...
// `frames` frames are done at once (frame stride = C*h*w on both sides).
void conv3x3(Exec& ex, const ConvW& cw, const float* in, int frames, int h, int w, bool upsample,
             float* out, bool accumulate);

// Causal 3x3x3 convolution of latent frames: output frame i sees input frames i-2, i-1, i, given
// as pointers (nullptr = zeros).  prev[i] for i in [0, frames): {f-2, f-1, f}.
void conv3x3x3_causal(Exec& ex, const ConvW& cw, const std::vector<const float*>& taps, int frames,
                      int h, int w, float* out);

// Temporal causal conv, kernel 3, spatially pointwise: out frame i (Cout, px) from taps
// {f-2, f-1, f} (Cin, px) each; nullptr = zeros.
void time_conv3(Exec& ex, const ConvW& cw, const std::vector<const float*>& taps, int frames,
                std::size_t px, float* out);

// Per-pixel RMS norm over channels with gain, then SiLU: (frames, C, px) -> same shape.
void rms_norm_silu(Exec& ex, const float* in, float* out, int frames, int c, std::size_t px,
                   const float* gain);

// 1-D convolution, odd kernel k, 'same' zero padding: in (Cin, n) -> out (Cout, n).
void conv1d(Exec& ex, const ConvW& cw, int k, const float* in, int n, float* out, bool accumulate);
// 1-D transposed convolution, weight (Cin, Cout, k), stride s, padding p:
// out length n*s, out[co][i*s + j - p] += sum_ci w[ci][co][j] in[ci][i], + bias.
void conv_transpose1d(Exec& ex, const ConvW& cw, int k, int stride, int pad, const float* in, int n,
                      float* out);

void silu_all(Exec& ex, float* x, std::size_t n);

// Causal taps {f-2, f-1, f} over (cache frames ++ current frames): 3 pointers per current frame,
// nullptr before the first frame.  `cache` is any sequence of frame buffers with data() (host
// vectors on the CPU, device buffers in common/model/cuda).
template <class Cache>
std::vector<const float*> causal_taps(const Cache& cache, const float* cur, int frames,
                                      std::size_t frame_elems) {
  std::vector<const float*> all;
  for (const auto& v : cache) all.push_back(v.data());
  const int pre = static_cast<int>(all.size());
  for (int f = 0; f < frames; ++f) all.push_back(cur + f * frame_elems);
  std::vector<const float*> taps;
  for (int f = 0; f < frames; ++f)
    for (int dt = -2; dt <= 0; ++dt) {
      const int idx = pre + f + dt;
      taps.push_back(idx >= 0 ? all[static_cast<std::size_t>(idx)] : nullptr);
    }
  return taps;
}

}  // namespace h3pipe::model
