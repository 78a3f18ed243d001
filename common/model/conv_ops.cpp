#include "common/model/conv_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace h3pipe::model {

namespace {

// Per-worker scratch; Model sizes per_worker to the pool before any task runs (a resize here
// would race with the other workers).
float* worker_buf(Exec& ex, int worker, std::size_t n) {
  return Scratch::get(ex.scratch.per_worker[static_cast<std::size_t>(worker)], n);
}

void add_bias_planes(const float* b, int cout, float* out, std::size_t plane, std::size_t off,
                     std::size_t n) {
  if (!b) return;
  for (int co = 0; co < cout; ++co) {
    float* o = out + co * plane + off;
    const float v = b[co];
    for (std::size_t j = 0; j < n; ++j) o[j] += v;
  }
}

}  // namespace

namespace {

// Writes the three horizontally shifted copies (kx = 0, 1, 2) of one source row into col rows
// dst[kx] (ow values each), zero outside the row; with upsample the source row has ow/2 values
// repeated 2x.  pad: scratch of ow + 2.
inline void shifted_rows(const float* src, int ow, bool upsample, float* pad, float* dst0,
                         std::size_t kx_stride) {
  pad[0] = 0.0f;
  pad[ow + 1] = 0.0f;
  if (upsample)
    for (int j = 0; j < ow / 2; ++j) pad[1 + 2 * j] = pad[2 + 2 * j] = src[j];
  else
    std::memcpy(pad + 1, src, sizeof(float) * static_cast<std::size_t>(ow));
  for (int kx = 0; kx < 3; ++kx)
    std::memcpy(dst0 + kx * kx_stride, pad + kx, sizeof(float) * static_cast<std::size_t>(ow));
}

// im2col of rows [r0, r1) of one 3x3 layer: col rows (ci, ky, kx), npx columns.  src(ci) gives
// the input plane of channel ci (nullptr = zeros) and ih its height in source rows.
template <typename Src>
void im2col3x3(const Src& src, int cin, int ih, int iw, bool upsample, int r0, int r1, float* col,
               float* pad) {
  const int oh = upsample ? 2 * ih : ih, ow = upsample ? 2 * iw : iw;
  const std::size_t npx = static_cast<std::size_t>(r1 - r0) * ow;
  for (int ci = 0; ci < cin; ++ci) {
    const float* plane = src(ci);
    for (int ky = 0; ky < 3; ++ky) {
      float* c = col + (static_cast<std::size_t>(ci) * 9 + ky * 3) * npx;
      for (int oy = r0; oy < r1; ++oy) {
        float* crow = c + static_cast<std::size_t>(oy - r0) * ow;
        const int iy = oy + ky - 1;
        if (!plane || iy < 0 || iy >= oh) {
          for (int kx = 0; kx < 3; ++kx) std::fill_n(crow + kx * npx, ow, 0.0f);
          continue;
        }
        shifted_rows(plane + static_cast<std::size_t>(upsample ? iy / 2 : iy) * iw, ow, upsample,
                     pad, crow, npx);
      }
    }
  }
}

}  // namespace

std::size_t time_band(int k) {
  return std::clamp<std::size_t>(kColBytes / (sizeof(float) * k), 64, kMinBandPx);
}

int band_rows(int k, int ow, int oh) {
  const int want = (kMinBandPx + ow - 1) / ow;
  const int cap = static_cast<int>(kColBytes / (sizeof(float) * static_cast<std::size_t>(k) * ow));
  return std::clamp(std::min(want, cap), 1, std::max(1, oh));
}

std::vector<float> subpixel_weights(const float* w, int out, int in) {
  // Tap t of phase p gathers kernel taps: p = 0: t0 <- {0}, t1 <- {1, 2}; p = 1: t0 <- {0, 1}, t1
  // <- {2}.
  static constexpr int kFrom[2][2][2] = {{{0, 0}, {1, 2}}, {{0, 1}, {2, 2}}};
  static constexpr int kCount[2][2] = {{1, 2}, {2, 1}};
  std::vector<float> p(static_cast<std::size_t>(4) * out * in * 4, 0.0f);
  for (int py = 0; py < 2; ++py)
    for (int px = 0; px < 2; ++px)
      for (int co = 0; co < out; ++co)
        for (int ci = 0; ci < in; ++ci)
          for (int ty = 0; ty < 2; ++ty)
            for (int tx = 0; tx < 2; ++tx) {
              float sum = 0;
              for (int a = 0; a < kCount[py][ty]; ++a)
                for (int b = 0; b < kCount[px][tx]; ++b)
                  sum += w[((static_cast<std::size_t>(co) * in + ci) * 3 + kFrom[py][ty][a]) * 3 +
                           kFrom[px][tx][b]];
              p[((((static_cast<std::size_t>(py) * 2 + px) * out + co) * in + ci) * 2 + ty) * 2 +
                tx] = sum;
            }
  return p;
}

namespace {

// Upsampling conv through the 4 sub-pixel phases; bands of low-resolution rows.
void conv3x3_up_phases(Exec& ex, const ConvW& cw, const float* in, int frames, int h, int w,
                       float* out, bool accumulate) {
  const int oh = 2 * h, ow = 2 * w, k = cw.in * 4;
  const std::size_t in_plane = static_cast<std::size_t>(h) * w,
                    out_plane = static_cast<std::size_t>(oh) * ow;
  const int rows = band_rows(k, w, h);
  const int bands = (h + rows - 1) / rows;
  ex.fc.add(static_cast<double>(cw.out) * frames, static_cast<double>(out_plane), k);
  ex.pool.run(static_cast<std::size_t>(frames) * bands, [&](std::size_t t, int worker) {
    const int f = static_cast<int>(t / bands);
    const int r0 = static_cast<int>(t % bands) * rows, r1 = std::min(h, r0 + rows);
    const std::size_t npx = static_cast<std::size_t>(r1 - r0) * w;
    float* col = worker_buf(ex, worker, (static_cast<std::size_t>(k) + cw.out) * npx + w + 2);
    float* tmp = col + static_cast<std::size_t>(k) * npx;
    float* pad = tmp + static_cast<std::size_t>(cw.out) * npx;
    const float* src = in + f * static_cast<std::size_t>(cw.in) * in_plane;
    float* dst = out + f * static_cast<std::size_t>(cw.out) * out_plane;
    pad[0] = 0.0f;
    pad[w + 1] = 0.0f;
    for (int py = 0; py < 2; ++py)
      for (int px = 0; px < 2; ++px) {
        for (int ci = 0; ci < cw.in; ++ci)
          for (int ty = 0; ty < 2; ++ty)
            for (int i = r0; i < r1; ++i) {
              const int si = i + (py ? ty : ty - 1);
              float* c0 = col + ((static_cast<std::size_t>(ci) * 2 + ty) * 2) * npx +
                          static_cast<std::size_t>(i - r0) * w;
              if (si < 0 || si >= h) {
                std::fill_n(c0, w, 0.0f);
                std::fill_n(c0 + npx, w, 0.0f);
                continue;
              }
              std::memcpy(pad + 1, src + ci * in_plane + static_cast<std::size_t>(si) * w,
                          sizeof(float) * w);
              for (int tx = 0; tx < 2; ++tx)
                std::memcpy(c0 + tx * npx, pad + (px ? tx + 1 : tx), sizeof(float) * w);
            }
        const float* pw = cw.phases + static_cast<std::size_t>(py * 2 + px) * cw.out * k;
        sgemm(false, false, cw.out, static_cast<int>(npx), k, 1.0f, pw, k, col,
              static_cast<int>(npx), 0.0f, tmp, static_cast<int>(npx));
        for (int co = 0; co < cw.out; ++co) {
          const float b = cw.b ? cw.b[co] : 0.0f;
          for (int i = r0; i < r1; ++i) {
            const float* trow =
                tmp + static_cast<std::size_t>(co) * npx + static_cast<std::size_t>(i - r0) * w;
            float* orow = dst + co * out_plane + static_cast<std::size_t>(2 * i + py) * ow + px;
            if (accumulate)
              for (int j = 0; j < w; ++j) orow[2 * j] += trow[j] + b;
            else
              for (int j = 0; j < w; ++j) orow[2 * j] = trow[j] + b;
          }
        }
      }
  });
}

// Few output channels (the RGB head): shifted AXPYs, no im2col (a GEMM with M = 3 runs far
// below peak, and the im2col of a full-resolution layer costs more than its arithmetic).
void conv3x3_direct(Exec& ex, const ConvW& cw, const float* in, int frames, int h, int w,
                    float* out, bool accumulate) {
  constexpr int kRows = 8;
  const std::size_t plane = static_cast<std::size_t>(h) * w;
  const int bands = (h + kRows - 1) / kRows;
  ex.fc.add(static_cast<double>(cw.out) * frames, static_cast<double>(plane), cw.in * 9);
  ex.pool.run(static_cast<std::size_t>(frames) * bands, [&](std::size_t t, int) {
    const int f = static_cast<int>(t / bands);
    const int r0 = static_cast<int>(t % bands) * kRows, r1 = std::min(h, r0 + kRows);
    const float* src = in + f * static_cast<std::size_t>(cw.in) * plane;
    float* dst = out + f * static_cast<std::size_t>(cw.out) * plane;
    for (int co = 0; co < cw.out; ++co)
      for (int y = r0; y < r1; ++y) {
        float* orow = dst + co * plane + static_cast<std::size_t>(y) * w;
        const float b = cw.b ? cw.b[co] : 0.0f;
        if (accumulate)
          for (int x = 0; x < w; ++x) orow[x] += b;
        else
          std::fill_n(orow, w, b);
        for (int ci = 0; ci < cw.in; ++ci)
          for (int ky = 0; ky < 3; ++ky) {
            const int iy = y + ky - 1;
            if (iy < 0 || iy >= h) continue;
            const float* srow = src + ci * plane + static_cast<std::size_t>(iy) * w;
            const float* wk = cw.w + ((static_cast<std::size_t>(co) * cw.in + ci) * 3 + ky) * 3;
            axpy(orow + 1, srow, wk[0], w - 1);  // kx = 0 reads x - 1
            axpy(orow, srow, wk[1], w);
            axpy(orow, srow + 1, wk[2], w - 1);  // kx = 2 reads x + 1
          }
      }
  });
}

}  // namespace

void conv3x3(Exec& ex, const ConvW& cw, const float* in, int frames, int h, int w, bool upsample,
             float* out, bool accumulate) {
  if (upsample && cw.phases) return conv3x3_up_phases(ex, cw, in, frames, h, w, out, accumulate);
  if (!upsample && cw.out <= 4) return conv3x3_direct(ex, cw, in, frames, h, w, out, accumulate);
  const int oh = upsample ? 2 * h : h, ow = upsample ? 2 * w : w;
  const int k = cw.in * 9;
  const std::size_t in_plane = static_cast<std::size_t>(h) * w,
                    out_plane = static_cast<std::size_t>(oh) * ow;
  const int rows = band_rows(k, ow, oh);
  const int bands = (oh + rows - 1) / rows;
  ex.fc.add(static_cast<double>(cw.out) * frames, static_cast<double>(out_plane), k);
  ex.pool.run(static_cast<std::size_t>(frames) * bands, [&](std::size_t t, int worker) {
    const int f = static_cast<int>(t / bands);
    const int r0 = static_cast<int>(t % bands) * rows, r1 = std::min(oh, r0 + rows);
    const std::size_t npx = static_cast<std::size_t>(r1 - r0) * ow;
    float* col = worker_buf(ex, worker, static_cast<std::size_t>(k) * npx + ow + 2);
    float* pad = col + static_cast<std::size_t>(k) * npx;
    const float* src = in + f * static_cast<std::size_t>(cw.in) * in_plane;
    im2col3x3([&](int ci) { return src + ci * in_plane; }, cw.in, h, w, upsample, r0, r1, col, pad);
    float* dst = out + f * static_cast<std::size_t>(cw.out) * out_plane;
    const std::size_t off = static_cast<std::size_t>(r0) * ow;
    sgemm(false, false, cw.out, static_cast<int>(npx), k, 1.0f, cw.w, k, col, static_cast<int>(npx),
          accumulate ? 1.0f : 0.0f, dst + off, static_cast<int>(out_plane));
    add_bias_planes(cw.b, cw.out, dst, out_plane, off, npx);
  });
}

void conv3x3x3_causal(Exec& ex, const ConvW& cw, const std::vector<const float*>& taps, int frames,
                      int h, int w, float* out) {
  const int k = cw.in * 27;
  const std::size_t plane = static_cast<std::size_t>(h) * w;
  const int rows = band_rows(k, w, h);
  const int bands = (h + rows - 1) / rows;
  ex.fc.add(static_cast<double>(cw.out) * frames, static_cast<double>(plane), k);
  ex.pool.run(static_cast<std::size_t>(frames) * bands, [&](std::size_t t, int worker) {
    const int f = static_cast<int>(t / bands);
    const int r0 = static_cast<int>(t % bands) * rows, r1 = std::min(h, r0 + rows);
    const std::size_t npx = static_cast<std::size_t>(r1 - r0) * w;
    float* col = worker_buf(ex, worker, static_cast<std::size_t>(k) * npx + w + 2);
    float* pad = col + static_cast<std::size_t>(k) * npx;
    // K order (ci, dt, ky, kx) = Conv3d weight (out, in, kt, kh, kw): channel ci of tap dt is
    // "channel" 3*ci + dt of a 3x3 im2col.
    im2col3x3(
        [&](int cd) -> const float* {
          const float* frame = taps[static_cast<std::size_t>(f) * 3 + cd % 3];
          return frame ? frame + (cd / 3) * plane : nullptr;
        },
        cw.in * 3, h, w, false, r0, r1, col, pad);
    float* dst = out + f * static_cast<std::size_t>(cw.out) * plane;
    const std::size_t off = static_cast<std::size_t>(r0) * w;
    sgemm(false, false, cw.out, static_cast<int>(npx), k, 1.0f, cw.w, k, col, static_cast<int>(npx),
          0.0f, dst + off, static_cast<int>(plane));
    add_bias_planes(cw.b, cw.out, dst, plane, off, npx);
  });
}

void time_conv3(Exec& ex, const ConvW& cw, const std::vector<const float*>& taps, int frames,
                std::size_t px, float* out) {
  const int k = cw.in * 3;
  const std::size_t band = time_band(k);
  const std::size_t bands = (px + band - 1) / band;
  ex.fc.add(static_cast<double>(cw.out) * frames, static_cast<double>(px), k);
  ex.pool.run(static_cast<std::size_t>(frames) * bands, [&](std::size_t t, int worker) {
    const int f = static_cast<int>(t / bands);
    const std::size_t p0 = (t % bands) * band, p1 = std::min(px, p0 + band), n = p1 - p0;
    float* col = worker_buf(ex, worker, static_cast<std::size_t>(k) * n);
    for (int ci = 0; ci < cw.in; ++ci)
      for (int dt = 0; dt < 3; ++dt) {
        const float* frame = taps[static_cast<std::size_t>(f) * 3 + dt];
        float* c = col + (static_cast<std::size_t>(ci) * 3 + dt) * n;
        if (!frame)
          std::fill(c, c + n, 0.0f);
        else
          std::copy_n(frame + ci * px + p0, n, c);
      }
    float* dst = out + f * static_cast<std::size_t>(cw.out) * px;
    sgemm(false, false, cw.out, static_cast<int>(n), k, 1.0f, cw.w, k, col, static_cast<int>(n),
          0.0f, dst + p0, static_cast<int>(px));
    add_bias_planes(cw.b, cw.out, dst, px, p0, n);
  });
}

void rms_norm_silu(Exec& ex, const float* in, float* out, int frames, int c, std::size_t px,
                   const float* gain) {
  constexpr std::size_t kChunk = 1024;
  const std::size_t chunks = (px + kChunk - 1) / kChunk;
  ex.pool.run(static_cast<std::size_t>(frames) * chunks, [&](std::size_t t, int) {
    const std::size_t f = t / chunks, p0 = (t % chunks) * kChunk,
                      n = std::min(px, p0 + kChunk) - p0;
    const float* src = in + f * c * px + p0;
    float* dst = out + f * c * px + p0;
    float ss[kChunk];
    std::fill(ss, ss + n, 0.0f);
    for (int ch = 0; ch < c; ++ch) sum_squares(src + ch * px, ss, n);
    for (std::size_t j = 0; j < n; ++j)
      ss[j] = 1.0f / std::sqrt(ss[j] / static_cast<float>(c) + 1e-6f);
    for (int ch = 0; ch < c; ++ch) scale_silu(src + ch * px, dst + ch * px, ss, gain[ch], n);
  });
}

void silu_all(Exec& ex, float* x, std::size_t n) {
  constexpr std::size_t kChunk = 16384;
  ex.pool.run((n + kChunk - 1) / kChunk, [&](std::size_t t, int) {
    const std::size_t b = t * kChunk;
    silu_inplace(x + b, std::min(n, b + kChunk) - b);
  });
}

void conv1d(Exec& ex, const ConvW& cw, int k, const float* in, int n, float* out, bool accumulate) {
  const int kk = cw.in * k, pad = k / 2;
  const std::size_t band = std::max<std::size_t>(64, kColBytes / (sizeof(float) * kk));
  const std::size_t bands = (static_cast<std::size_t>(n) + band - 1) / band;
  ex.fc.add(cw.out, n, kk);
  ex.pool.run(bands, [&](std::size_t t, int worker) {
    const std::size_t p0 = t * band, p1 = std::min<std::size_t>(n, p0 + band), m = p1 - p0;
    float* col = worker_buf(ex, worker, static_cast<std::size_t>(kk) * m);
    for (int ci = 0; ci < cw.in; ++ci)
      for (int j = 0; j < k; ++j) {
        float* c = col + (static_cast<std::size_t>(ci) * k + j) * m;
        const float* s = in + static_cast<std::size_t>(ci) * n;
        for (std::size_t i = 0; i < m; ++i) {
          const long src = static_cast<long>(p0 + i) + j - pad;
          c[i] = (src < 0 || src >= n) ? 0.0f : s[src];
        }
      }
    sgemm(false, false, cw.out, static_cast<int>(m), kk, 1.0f, cw.w, kk, col, static_cast<int>(m),
          accumulate ? 1.0f : 0.0f, out + p0, n);
    add_bias_planes(cw.b, cw.out, out, static_cast<std::size_t>(n), p0, m);
  });
}

void conv_transpose1d(Exec& ex, const ConvW& cw, int k, int stride, int pad, const float* in, int n,
                      float* out) {
  const std::size_t nout = static_cast<std::size_t>(n) * stride;
  const int rows = cw.out * k;
  // Columns of the input per chunk; chunks run one after another (their overlap-adds touch
  // neighbouring outputs), each chunk's product split by rows across the pool.
  const int chunk = std::max(1, static_cast<int>(kColBytes * 4 / (sizeof(float) * rows)));
  std::vector<float> z(static_cast<std::size_t>(rows) * chunk);
  std::fill(out, out + static_cast<std::size_t>(cw.out) * nout, 0.0f);
  for (int c0 = 0; c0 < n; c0 += chunk) {
    const int m = std::min(chunk, n - c0);
    constexpr int kRows = 128;
    ex.fc.add(rows, m, cw.in);
    ex.pool.run(static_cast<std::size_t>((rows + kRows - 1) / kRows), [&](std::size_t t, int) {
      const int r0 = static_cast<int>(t) * kRows, nr = std::min(kRows, rows - r0);
      // z (rows x m) = W^T (rows x Cin) * in (Cin x m); W is (Cin, Cout*k) row-major.
      sgemm(true, false, nr, m, cw.in, 1.0f, cw.w + r0, rows, in + c0, n, 0.0f,
            z.data() + static_cast<std::size_t>(r0) * m, m);
    });
    ex.pool.run(static_cast<std::size_t>(cw.out), [&](std::size_t co, int) {
      float* o = out + co * nout;
      for (int j = 0; j < k; ++j) {
        const float* zr = z.data() + (co * k + j) * static_cast<std::size_t>(m);
        for (int i = 0; i < m; ++i) {
          const long dst = static_cast<long>(c0 + i) * stride + j - pad;
          if (dst >= 0 && dst < static_cast<long>(nout)) o[dst] += zr[i];
        }
      }
    });
  }
  add_bias_planes(cw.b, cw.out, out, nout, 0, nout);
}

}  // namespace h3pipe::model
