#pragma once
// Index arithmetic of the decoder kernels (ops.cu), one element at a time, as functions that
// compile for the device and for the host: the kernels call them, and
// tests/model/model_device_test.cpp runs them on the CPU against conv_ops.cpp (same convolutions
// through the CPU im2col), so the kernels' indexing is tested on machines without a GPU.  Free of
// CUDA headers.
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define H3_HD __host__ __device__ __forceinline__
#else
#define H3_HD inline
#endif

namespace h3pipe::model::cuda {

// conv_ops.cpp im2col3x3: element i of the (nch*9) x npx col of output rows [r0, r1) (npx =
// (r1 - r0) * ow); plane(cc) is frames[cc % ntap] + (cc / ntap) * plane (nullptr = zeros).
H3_HD float im2col3x3_at(const float* const* frames, int ntap, std::size_t plane, int ih, int iw,
                         bool up, int r0, std::size_t npx, std::size_t i) {
  const int oh = up ? 2 * ih : ih, ow = up ? 2 * iw : iw;
  const std::size_t row = i / npx, q = i % npx;
  const int cc = static_cast<int>(row / 9), ky = static_cast<int>(row % 9) / 3,
            kx = static_cast<int>(row % 3);
  const int oy = r0 + static_cast<int>(q / ow), ox = static_cast<int>(q % ow);
  const int iy = oy + ky - 1, ix = ox + kx - 1;
  const float* fr = frames[cc % ntap];
  if (!fr || iy < 0 || iy >= oh || ix < 0 || ix >= ow) return 0.0f;
  const float* pl = fr + static_cast<std::size_t>(cc / ntap) * plane;
  return up ? pl[static_cast<std::size_t>(iy / 2) * iw + ix / 2]
            : pl[static_cast<std::size_t>(iy) * iw + ix];
}

// conv3x3_up_phases: element i of phase (py, px)'s (cin*4) x npx col, low-resolution rows from r0.
H3_HD float im2col_phase_at(const float* src, int h, int w, int r0, int py, int px, std::size_t npx,
                            std::size_t i) {
  const std::size_t row = i / npx, q = i % npx;
  const int ci = static_cast<int>(row / 4), ty = static_cast<int>(row / 2) % 2,
            tx = static_cast<int>(row % 2);
  const int ii = r0 + static_cast<int>(q / w), j = static_cast<int>(q % w);
  const int si = ii + (py ? ty : ty - 1), sj = j + (px ? tx : tx - 1);
  if (si < 0 || si >= h || sj < 0 || sj >= w) return 0.0f;
  return src[ci * static_cast<std::size_t>(h) * w + static_cast<std::size_t>(si) * w + sj];
}

// conv3x3_up_phases' scatter: where element i of the phase product (cout x npx) lands in dst.
H3_HD std::size_t phase_scatter_at(int h, int w, int r0, int py, int px, std::size_t npx,
                                   std::size_t i, int* co_out) {
  const int co = static_cast<int>(i / npx);
  const std::size_t q = i % npx;
  const int ii = r0 + static_cast<int>(q / w), j = static_cast<int>(q % w);
  const int ow = 2 * w;
  *co_out = co;
  return co * (static_cast<std::size_t>(2 * h) * ow) + static_cast<std::size_t>(2 * ii + py) * ow +
         px + 2 * j;
}

// time_conv3's col: element i of (cin*3) x n for pixels [p0, p0 + n); frames = {f-2, f-1, f}.
H3_HD float im2col_time_at(const float* const* frames, std::size_t px, std::size_t p0,
                           std::size_t n, std::size_t i) {
  const std::size_t row = i / n, q = i % n;
  const float* fr = frames[row % 3];
  return fr ? fr[(row / 3) * px + p0 + q] : 0.0f;
}

// conv1d's col: element i of (cin*k) x m for positions [p0, p0 + m) of a (cin, n) signal.
H3_HD float im2col1d_at(const float* in, int n, int k, std::size_t p0, std::size_t m,
                        std::size_t i) {
  const int pad = k / 2;
  const std::size_t row = i / m, q = i % m;
  const int ci = static_cast<int>(row / k), j = static_cast<int>(row % k);
  const long src = static_cast<long>(p0 + q) + j - pad;
  return (src < 0 || src >= n) ? 0.0f : in[static_cast<std::size_t>(ci) * n + src];
}

// conv_transpose1d's overlap-add: output element i of (cout, n*stride) from z (cout*k x n).
H3_HD float overlap_add_at(const float* z, const float* bias, int k, int stride, int pad, int n,
                           std::size_t i) {
  const std::size_t nout = static_cast<std::size_t>(n) * stride;
  const int co = static_cast<int>(i / nout);
  const long o = static_cast<long>(i % nout);
  float acc = 0.0f;
  for (int j = 0; j < k; ++j) {
    const long num = o + pad - j;
    if (num < 0 || num % stride) continue;
    const long src = num / stride;
    if (src < n) acc += z[(static_cast<std::size_t>(co) * k + j) * n + src];
  }
  return acc + (bias ? bias[co] : 0.0f);
}

// Dit::sample's patchify: element i of the (nv x 24*p*p) video token features; returns the
// latent index it reads, or -1 for the zero padding past H or W.
H3_HD long long patchify_video_src(int T, int H, int W, int p, std::size_t i) {
  const int hp = (H + p - 1) / p, wp = (W + p - 1) / p, vf = 24 * p * p;
  const std::size_t hw = static_cast<std::size_t>(H) * W, thw = hw * T;
  const std::size_t tok = i / vf;
  const int f = static_cast<int>(i % vf);
  const int c = f / (p * p), py = (f / p) % p, px = f % p;
  const int t = static_cast<int>(tok / (static_cast<std::size_t>(hp) * wp)),
            y = static_cast<int>((tok / wp) % hp), xx = static_cast<int>(tok % wp);
  const int yy = y * p + py, xs = xx * p + px;
  if (yy >= H || xs >= W) return -1;
  return static_cast<long long>(c * thw + t * hw + static_cast<std::size_t>(yy) * W + xs);
}
// ... and its inverse for the Euler update: the feature index holding latent element i.
H3_HD std::size_t euler_video_src(int T, int H, int W, int p, std::size_t i) {
  const int hp = (H + p - 1) / p, wp = (W + p - 1) / p, vf = 24 * p * p;
  const std::size_t hw = static_cast<std::size_t>(H) * W, thw = hw * T;
  const int c = static_cast<int>(i / thw);
  const std::size_t r = i % thw;
  const int t = static_cast<int>(r / hw), yy = static_cast<int>((r % hw) / W),
            xs = static_cast<int>(r % W);
  const std::size_t tok =
      (static_cast<std::size_t>(t) * hp + yy / p) * wp + static_cast<std::size_t>(xs / p);
  return tok * vf + (c * p + yy % p) * p + xs % p;
}
// Audio: feature element i of (na x 64*ap) reads audio[cs][l], -1 past L; and the inverse.
H3_HD long long patchify_audio_src(int L, int ap, std::size_t i) {
  const int af = 64 * ap;
  const int tok = static_cast<int>(i / af), f = static_cast<int>(i % af);
  const int cs = f / ap, j = f % ap, l = tok * ap + j;
  return l < L ? static_cast<long long>(cs) * L + l : -1;
}
H3_HD std::size_t euler_audio_src(int L, int ap, std::size_t i) {
  const int cs = static_cast<int>(i / L), l = static_cast<int>(i % L);
  return static_cast<std::size_t>(l / ap) * (64 * ap) + cs * ap + l % ap;
}

}  // namespace h3pipe::model::cuda
