// The device backend's own kernels (ops.h).  Elementwise kernels use one thread per element in a
// grid-stride loop; row reductions use one block per row.  UNRUN on a GPU (backend.h).
#include <cuda_bf16.h>

#include <cmath>

#include "common/model/cuda/ops.h"
#include "common/model/cuda/ops_index.h"

namespace h3pipe::model::cuda {

namespace {

constexpr int kThreads = 256;

unsigned grid_for(std::size_t n) {
  const std::size_t g = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(g < 1 ? 1 : (g > 65535u * 8 ? 65535u * 8 : g));
}

#define H3_GRID_STRIDE(i, n)                                                                     \
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)

__host__ __device__ __forceinline__ __nv_bfloat16* as_bf(bf16* p) {
  return reinterpret_cast<__nv_bfloat16*>(p);
}

// kernels_simd.inc exp_core, operation for operation (no contraction into FMAs).
__device__ __forceinline__ float exp_core(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.3f ? 88.3f : x;
  const float n = __fsub_rn(__fmaf_rn(x, 1.44269504088896341f, 12582912.0f), 12582912.0f);
  float r = __fsub_rn(x, __fmul_rn(n, 0.693359375f));
  r = __fsub_rn(r, __fmul_rn(n, -2.12194440e-4f));
  float p = 1.9875691500e-4f;
  p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
  p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
  p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
  p = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.0f);
  const int e = (static_cast<int>(n) + 127) << 23;
  return p * __int_as_float(e);
}
__device__ __forceinline__ float tanh_fast(float v) {
  return 1.0f - 2.0f / (exp_core(2.0f * v) + 1.0f);
}
__device__ __forceinline__ float silu1(float v) {
  return v / (1.0f + exp_core(-v));
}
__device__ __forceinline__ float gelu1(float v) {
  const float u = 0.7978845608f * (v + 0.044715f * v * v * v);
  return 0.5f * v * (1.0f + tanh_fast(u));
}
__device__ __forceinline__ std::uint8_t to_u8(float t) {
  const float v = fminf(fmaxf((t + 1.0f) * 127.5f, 0.0f), 255.0f);
  return static_cast<std::uint8_t>(lroundf(v));
}

// Block-wide sum of one value per thread (blockDim.x == kThreads).
__device__ float block_sum(float v, float* sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  float t = 0;
  if (threadIdx.x < 32) {
    t = threadIdx.x < kThreads / 32 ? sh[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (threadIdx.x == 0) sh[0] = t;
  }
  __syncthreads();
  return sh[0];
}
__device__ float block_max(float v, float* sh) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float t = threadIdx.x < kThreads / 32 ? sh[threadIdx.x] : -3.0e38f;
    for (int o = 16; o > 0; o >>= 1) t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, o));
    if (threadIdx.x == 0) sh[0] = t;
  }
  __syncthreads();
  return sh[0];
}

// mode 0: (x - mean) * inv * (1 + scale) + shift; mode 1: (x - mean) * inv * gamma + beta.
__global__ void k_layer_norm(const float* x, __nv_bfloat16* y, int d, const float* a,
                             const float* b, int mode) {
  __shared__ float sh[32];
  const float* xr = x + static_cast<std::size_t>(blockIdx.x) * d;
  __nv_bfloat16* yr = y + static_cast<std::size_t>(blockIdx.x) * d;
  float s = 0;
  for (int i = threadIdx.x; i < d; i += blockDim.x) s += xr[i];
  const float mean = block_sum(s, sh) / static_cast<float>(d);
  float q = 0;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float t = xr[i] - mean;
    q += t * t;
  }
  const float inv = 1.0f / sqrtf(block_sum(q, sh) / static_cast<float>(d) + 1e-6f);
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = mode == 0 ? (xr[i] - mean) * inv * (1.0f + b[i]) + a[i]
                              : (xr[i] - mean) * inv * a[i] + b[i];
    yr[i] = __float2bfloat16_rn(v);
  }
}

__global__ void k_softmax(float* s, __nv_bfloat16* p, int n) {
  __shared__ float sh[32];
  float* r = s + static_cast<std::size_t>(blockIdx.x) * n;
  __nv_bfloat16* pr = p + static_cast<std::size_t>(blockIdx.x) * n;
  float m = -3.0e38f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, r[i]);
  m = block_max(m, sh);
  float sum = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float e = exp_core(r[i] - m);
    r[i] = e;
    sum += e;
  }
  const float inv = 1.0f / block_sum(sum, sh);
  for (int i = threadIdx.x; i < n; i += blockDim.x) pr[i] = __float2bfloat16_rn(r[i] * inv);
}

// The same softmax with the row staged in shared memory: the scores are read from global memory
// once (the attention's dominant memory traffic at long sequences).
__global__ void k_softmax_smem(const float* s, __nv_bfloat16* p, int n) {
  extern __shared__ float row[];
  __shared__ float sh[32];
  const float* r = s + static_cast<std::size_t>(blockIdx.x) * n;
  __nv_bfloat16* pr = p + static_cast<std::size_t>(blockIdx.x) * n;
  float m = -3.0e38f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = r[i];
    row[i] = v;
    m = fmaxf(m, v);
  }
  m = block_max(m, sh);
  float sum = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float e = exp_core(row[i] - m);
    row[i] = e;
    sum += e;
  }
  const float inv = 1.0f / block_sum(sum, sh);
  for (int i = threadIdx.x; i < n; i += blockDim.x) pr[i] = __float2bfloat16_rn(row[i] * inv);
}

__global__ void k_to_bf16(const float* x, __nv_bfloat16* y, std::size_t n) {
  H3_GRID_STRIDE(i, n) y[i] = __float2bfloat16_rn(x[i]);
}
__global__ void k_bias_rows(float* y, const float* b, std::size_t total, int n) {
  H3_GRID_STRIDE(i, total) y[i] += b[i % n];
}
__global__ void k_bias_rows_bf16(const float* y, const float* b, __nv_bfloat16* o,
                                 std::size_t total, int n) {
  H3_GRID_STRIDE(i, total) o[i] = __float2bfloat16_rn(y[i] + (b ? b[i % n] : 0.0f));
}
__global__ void k_bias_gelu_bf16(const float* y, const float* b, __nv_bfloat16* o,
                                 std::size_t total, int n) {
  H3_GRID_STRIDE(i, total) o[i] = __float2bfloat16_rn(gelu1(y[i] + (b ? b[i % n] : 0.0f)));
}
__global__ void k_bias_pos(float* x, const float* b, const float* pos, std::size_t total, int d) {
  H3_GRID_STRIDE(i, total) x[i] = (x[i] + (b ? b[i % d] : 0.0f)) + pos[i];
}
__global__ void k_gated_add(float* x, const float* y, const float* g, std::size_t total, int d) {
  H3_GRID_STRIDE(i, total) x[i] += g[i % d] * y[i];
}
__global__ void k_silu(float* x, std::size_t n) {
  H3_GRID_STRIDE(i, n) x[i] = silu1(x[i]);
}

// transformer.cpp sinusoid(pos, dim, out): element i of `dim` (dim even).
__device__ float sinusoid1(float pos, int dim, int i) {
  const int half = dim / 2;
  const int k = i < half ? i : i - half;
  const double freq = exp(-log(10000.0) * k / half);
  return static_cast<float>(i < half ? cos(pos * freq) : sin(pos * freq));
}
__global__ void k_pos_embed(float* pos, int n, int nv, int hp, int wp, int d, int third,
                            const float* te) {
  H3_GRID_STRIDE(i, static_cast<std::size_t>(n) * d) {
    const int tok = static_cast<int>(i / d), j = static_cast<int>(i % d);
    const int seg = third > 0 ? j / third : 3, k = third > 0 ? j % third : 0;
    float v = 0.0f;
    if (tok < nv) {
      const int t = tok / (hp * wp), y = (tok / wp) % hp, x = tok % wp;
      if (seg < 3) v = sinusoid1(static_cast<float>(seg == 0 ? t : seg == 1 ? y : x), third, k);
    } else if (seg == 0) {
      v = sinusoid1(static_cast<float>(tok - nv), third, k);
    }
    pos[i] = v + te[(tok < nv ? 0 : d) + j];
  }
}

__global__ void k_patchify_video(const float* video, __nv_bfloat16* vp, int T, int H, int W,
                                 int p) {
  const std::size_t n =
      static_cast<std::size_t>(T) * ((H + p - 1) / p) * ((W + p - 1) / p) * 24 * p * p;
  H3_GRID_STRIDE(i, n) {
    const long long src = patchify_video_src(T, H, W, p, i);
    vp[i] = __float2bfloat16_rn(src >= 0 ? video[src] : 0.0f);
  }
}
__global__ void k_patchify_audio(const float* audio, __nv_bfloat16* apatch, int L, int ap, int na) {
  H3_GRID_STRIDE(i, static_cast<std::size_t>(na) * 64 * ap) {
    const long long src = patchify_audio_src(L, ap, i);
    apatch[i] = __float2bfloat16_rn(src >= 0 ? audio[src] : 0.0f);
  }
}
__global__ void k_euler_video(float* video, const float* vout, float dt, int T, int H, int W,
                              int p) {
  H3_GRID_STRIDE(i, static_cast<std::size_t>(24) * T * H * W)
  video[i] += dt * vout[euler_video_src(T, H, W, p, i)];
}
__global__ void k_euler_audio(float* audio, const float* aout, float dt, int L, int ap) {
  H3_GRID_STRIDE(i, static_cast<std::size_t>(64) * L)
  audio[i] += dt * aout[euler_audio_src(L, ap, i)];
}

__global__ void k_im2col3x3(Taps3 taps, int ntap, std::size_t plane, int nch, int ih, int iw,
                            bool up, int r0, int r1, __nv_bfloat16* col) {
  const int ow = up ? 2 * iw : iw;
  const std::size_t npx = static_cast<std::size_t>(r1 - r0) * ow;
  H3_GRID_STRIDE(i, static_cast<std::size_t>(nch) * 9 * npx)
  col[i] = __float2bfloat16_rn(im2col3x3_at(taps.p, ntap, plane, ih, iw, up, r0, npx, i));
}
__global__ void k_im2col_phase(const float* src, int cin, int h, int w, int r0, int r1, int py,
                               int px, __nv_bfloat16* col) {
  const std::size_t npx = static_cast<std::size_t>(r1 - r0) * w;
  H3_GRID_STRIDE(i, static_cast<std::size_t>(cin) * 4 * npx)
  col[i] = __float2bfloat16_rn(im2col_phase_at(src, h, w, r0, py, px, npx, i));
}
__global__ void k_phase_scatter(const float* tmp, const float* bias, float* dst, int cout, int r0,
                                int r1, int h, int w, int py, int px, bool acc) {
  const std::size_t npx = static_cast<std::size_t>(r1 - r0) * w;
  H3_GRID_STRIDE(i, static_cast<std::size_t>(cout) * npx) {
    int co = 0;
    float* o = dst + phase_scatter_at(h, w, r0, py, px, npx, i, &co);
    const float v = tmp[i] + (bias ? bias[co] : 0.0f);
    *o = acc ? *o + v : v;
  }
}
__global__ void k_bias_planes(float* out, const float* b, std::size_t plane, std::size_t off,
                              std::size_t n, int cout) {
  H3_GRID_STRIDE(i, static_cast<std::size_t>(cout) * n) {
    const std::size_t co = i / n;
    out[co * plane + off + i % n] += b[co];
  }
}
__global__ void k_im2col_time(Taps3 taps, int cin, std::size_t px, std::size_t p0, std::size_t n,
                              __nv_bfloat16* col) {
  H3_GRID_STRIDE(i, static_cast<std::size_t>(cin) * 3 * n)
  col[i] = __float2bfloat16_rn(im2col_time_at(taps.p, px, p0, n, i));
}
__global__ void k_rms_norm_silu(const float* in, float* out, int frames, int c, std::size_t px,
                                const float* gain) {
  H3_GRID_STRIDE(i, static_cast<std::size_t>(frames) * px) {
    const std::size_t f = i / px, q = i % px;
    const float* src = in + f * c * px + q;
    float* dst = out + f * c * px + q;
    float ss = 0.0f;
    for (int ch = 0; ch < c; ++ch) ss += src[ch * px] * src[ch * px];
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(c) + 1e-6f);
    for (int ch = 0; ch < c; ++ch) dst[ch * px] = silu1(src[ch * px] * inv * gain[ch]);
  }
}
__global__ void k_conv3x3_direct(const float* in, const float* w, const float* b, int cin, int cout,
                                 int h, int wd, float* out, bool acc) {
  const std::size_t plane = static_cast<std::size_t>(h) * wd;
  H3_GRID_STRIDE(i, static_cast<std::size_t>(cout) * plane) {
    const int co = static_cast<int>(i / plane);
    const int y = static_cast<int>((i % plane) / wd), x = static_cast<int>(i % wd);
    float v = (acc ? out[i] : 0.0f) + (b ? b[co] : 0.0f);
    for (int ci = 0; ci < cin; ++ci)
      for (int ky = 0; ky < 3; ++ky) {
        const int iy = y + ky - 1;
        if (iy < 0 || iy >= h) continue;
        const float* srow = in + ci * plane + static_cast<std::size_t>(iy) * wd;
        const float* wk = w + ((static_cast<std::size_t>(co) * cin + ci) * 3 + ky) * 3;
        if (x >= 1) v += wk[0] * srow[x - 1];
        v += wk[1] * srow[x];
        if (x + 1 < wd) v += wk[2] * srow[x + 1];
      }
    out[i] = v;
  }
}
__global__ void k_rgb_out(const float* b, int rows, int cols, int w4, std::size_t p4,
                          std::uint8_t* rgb, int oy0, int ox0, int out_w) {
  H3_GRID_STRIDE(i, static_cast<std::size_t>(rows) * cols) {
    const int y = static_cast<int>(i / cols), x = static_cast<int>(i % cols);
    for (int ch = 0; ch < 3; ++ch)
      rgb[(static_cast<std::size_t>(oy0 + y) * out_w + ox0 + x) * 3 + ch] =
          to_u8(tanh_fast(b[ch * p4 + static_cast<std::size_t>(y) * w4 + x]));
  }
}
// vae_decoder.cpp ramp().
__device__ float ramp(int v, int a, int b, int n, int bw) {
  constexpr int S = 16;
  if (bw == 0) return (v >= a * S && v < b * S) ? 1.0f : 0.0f;
  const float span = static_cast<float>(2 * bw * S);
  float w = 1.0f;
  if (a > 0) w = fminf(w, (static_cast<float>(v - (a - bw) * S) + 0.5f) / span);
  if (b < n) w = fminf(w, (static_cast<float>((b + bw) * S - v) - 0.5f) / span);
  return fminf(fmaxf(w, 0.0f), 1.0f);
}
__global__ void k_blend_acc(const float* b, int rows, int cols, int w4, std::size_t p4, float* fa,
                            std::size_t frame_px, int oy0, int ox0, int out_w, int ty0, int ty1,
                            int tx0, int tx1, int H, int W, int bw) {
  H3_GRID_STRIDE(i, static_cast<std::size_t>(rows) * cols) {
    const int y = static_cast<int>(i / cols), x = static_cast<int>(i % cols);
    const float wgt = ramp(oy0 + y, ty0, ty1, H, bw) * ramp(ox0 + x, tx0, tx1, W, bw);
    if (wgt <= 0.0f) continue;
    const std::size_t o = static_cast<std::size_t>(oy0 + y) * out_w + ox0 + x;
    for (int ch = 0; ch < 3; ++ch)
      fa[ch * frame_px + o] += wgt * tanh_fast(b[ch * p4 + static_cast<std::size_t>(y) * w4 + x]);
    fa[3 * frame_px + o] += wgt;
  }
}
__global__ void k_acc_rgb(const float* fa, std::size_t frame_px, std::uint8_t* rgb) {
  H3_GRID_STRIDE(o, frame_px) {
    const float wsum = fa[3 * frame_px + o];
    for (int ch = 0; ch < 3; ++ch)
      rgb[o * 3 + ch] = to_u8(wsum > 0 ? fa[ch * frame_px + o] / wsum : 0.0f);
  }
}
__global__ void k_im2col1d(const float* in, int cin, int n, int k, std::size_t p0, std::size_t m,
                           __nv_bfloat16* col) {
  H3_GRID_STRIDE(i, static_cast<std::size_t>(cin) * k * m)
  col[i] = __float2bfloat16_rn(im2col1d_at(in, n, k, p0, m, i));
}
__global__ void k_overlap_add(const float* z, const float* bias, float* out, int cout, int k,
                              int stride, int pad, int n) {
  H3_GRID_STRIDE(i, static_cast<std::size_t>(cout) * n * stride)
  out[i] = overlap_add_at(z, bias, k, stride, pad, n, i);
}
__global__ void k_pcm_out(const float* o, long long n3, long long n, float* pcm) {
  H3_GRID_STRIDE(i, static_cast<std::size_t>(2 * n)) {
    const long long s = static_cast<long long>(i / 2);
    const int ch = static_cast<int>(i % 2);
    pcm[i] = 0.25f * tanh_fast(o[ch * n3 + s]);
  }
}

}  // namespace

void to_bf16(cudaStream_t s, const float* x, bf16* y, std::size_t n) {
  k_to_bf16<<<grid_for(n), kThreads, 0, s>>>(x, as_bf(y), n);
}
void ln_modulate_bf16(cudaStream_t s, const float* x, bf16* y, int n, int d, const float* shift,
                      const float* scale) {
  if (n > 0) k_layer_norm<<<n, kThreads, 0, s>>>(x, as_bf(y), d, shift, scale, 0);
}
void ln_affine_bf16(cudaStream_t s, const float* x, bf16* y, int n, int d, const float* gamma,
                    const float* beta) {
  if (n > 0) k_layer_norm<<<n, kThreads, 0, s>>>(x, as_bf(y), d, gamma, beta, 1);
}
void bias_rows(cudaStream_t s, float* y, const float* b, int rows, int n) {
  const std::size_t t = static_cast<std::size_t>(rows) * n;
  if (b && t) k_bias_rows<<<grid_for(t), kThreads, 0, s>>>(y, b, t, n);
}
void bias_rows_bf16(cudaStream_t s, const float* y, const float* b, bf16* out, int rows, int n) {
  const std::size_t t = static_cast<std::size_t>(rows) * n;
  if (t) k_bias_rows_bf16<<<grid_for(t), kThreads, 0, s>>>(y, b, as_bf(out), t, n);
}
void bias_gelu_bf16(cudaStream_t s, const float* y, const float* b, bf16* out, int rows, int n) {
  const std::size_t t = static_cast<std::size_t>(rows) * n;
  if (t) k_bias_gelu_bf16<<<grid_for(t), kThreads, 0, s>>>(y, b, as_bf(out), t, n);
}
void bias_pos(cudaStream_t s, float* x, const float* b, const float* pos, int rows, int d) {
  const std::size_t t = static_cast<std::size_t>(rows) * d;
  if (t) k_bias_pos<<<grid_for(t), kThreads, 0, s>>>(x, b, pos, t, d);
}
void gated_add(cudaStream_t s, float* x, const float* y, const float* gate, int n, int d) {
  const std::size_t t = static_cast<std::size_t>(n) * d;
  if (t) k_gated_add<<<grid_for(t), kThreads, 0, s>>>(x, y, gate, t, d);
}
void softmax_bf16(cudaStream_t st, float* s, bf16* p, long long rows, int n) {
  // One block per row; the grid's x dimension takes 2^31 - 1 rows.
  if (rows <= 0) return;
  constexpr std::size_t kSmemMax = 96 * 1024;  // opted in below (default limit 48 KiB)
  const std::size_t smem = static_cast<std::size_t>(n) * sizeof(float);
  static const bool opted =
      cudaFuncSetAttribute(k_softmax_smem, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kSmemMax)) == cudaSuccess;
  if (opted && smem <= kSmemMax)
    k_softmax_smem<<<static_cast<unsigned>(rows), kThreads, smem, st>>>(s, as_bf(p), n);
  else
    k_softmax<<<static_cast<unsigned>(rows), kThreads, 0, st>>>(s, as_bf(p), n);
}
void silu(cudaStream_t s, float* x, std::size_t n) {
  if (n) k_silu<<<grid_for(n), kThreads, 0, s>>>(x, n);
}
void pos_embed(cudaStream_t s, float* pos, int n, int nv, int hp, int wp, int d, int third,
               const float* type_embed) {
  const std::size_t t = static_cast<std::size_t>(n) * d;
  k_pos_embed<<<grid_for(t), kThreads, 0, s>>>(pos, n, nv, hp, wp, d, third, type_embed);
}
void patchify_bf16(cudaStream_t s, const float* video, const float* audio, bf16* vpatch,
                   bf16* apatch, int T, int H, int W, int p, int L, int ap) {
  const std::size_t nvf =
      static_cast<std::size_t>(T) * ((H + p - 1) / p) * ((W + p - 1) / p) * 24 * p * p;
  const int na = (L + ap - 1) / ap;
  k_patchify_video<<<grid_for(nvf), kThreads, 0, s>>>(video, as_bf(vpatch), T, H, W, p);
  k_patchify_audio<<<grid_for(static_cast<std::size_t>(na) * 64 * ap), kThreads, 0, s>>>(
      audio, as_bf(apatch), L, ap, na);
}
void euler(cudaStream_t s, float* video, float* audio, const float* vout, const float* aout,
           float dt, int T, int H, int W, int p, int L, int ap) {
  k_euler_video<<<grid_for(static_cast<std::size_t>(24) * T * H * W), kThreads, 0, s>>>(
      video, vout, dt, T, H, W, p);
  k_euler_audio<<<grid_for(static_cast<std::size_t>(64) * L), kThreads, 0, s>>>(audio, aout, dt, L,
                                                                                ap);
}
void im2col3x3_bf16(cudaStream_t s, Taps3 taps, int ntap, std::size_t plane, int nch, int ih,
                    int iw, bool upsample, int r0, int r1, bf16* col) {
  const std::size_t t = static_cast<std::size_t>(nch) * 9 * (r1 - r0) * (upsample ? 2 * iw : iw);
  k_im2col3x3<<<grid_for(t), kThreads, 0, s>>>(taps, ntap, plane, nch, ih, iw, upsample, r0, r1,
                                               as_bf(col));
}
void im2col_phase_bf16(cudaStream_t s, const float* src, int cin, int h, int w, int r0, int r1,
                       int py, int px, bf16* col) {
  const std::size_t t = static_cast<std::size_t>(cin) * 4 * (r1 - r0) * w;
  k_im2col_phase<<<grid_for(t), kThreads, 0, s>>>(src, cin, h, w, r0, r1, py, px, as_bf(col));
}
void phase_scatter(cudaStream_t s, const float* tmp, const float* bias, float* dst, int cout,
                   int r0, int r1, int h, int w, int py, int px, bool accumulate) {
  const std::size_t t = static_cast<std::size_t>(cout) * (r1 - r0) * w;
  k_phase_scatter<<<grid_for(t), kThreads, 0, s>>>(tmp, bias, dst, cout, r0, r1, h, w, py, px,
                                                   accumulate);
}
void bias_planes(cudaStream_t s, float* out, const float* b, int cout, std::size_t plane,
                 std::size_t off, std::size_t n) {
  if (b && n) k_bias_planes<<<grid_for(n * cout), kThreads, 0, s>>>(out, b, plane, off, n, cout);
}
void im2col_time_bf16(cudaStream_t s, Taps3 taps, int cin, std::size_t px, std::size_t p0,
                      std::size_t n, bf16* col) {
  k_im2col_time<<<grid_for(n * 3 * cin), kThreads, 0, s>>>(taps, cin, px, p0, n, as_bf(col));
}
void rms_norm_silu(cudaStream_t s, const float* in, float* out, int frames, int c, std::size_t px,
                   const float* gain) {
  k_rms_norm_silu<<<grid_for(px * frames), kThreads, 0, s>>>(in, out, frames, c, px, gain);
}
void conv3x3_direct(cudaStream_t s, const float* in, const float* w, const float* b, int cin,
                    int cout, int h, int wd, float* out, bool accumulate) {
  const std::size_t t = static_cast<std::size_t>(cout) * h * wd;
  k_conv3x3_direct<<<grid_for(t), kThreads, 0, s>>>(in, w, b, cin, cout, h, wd, out, accumulate);
}
void rgb_out(cudaStream_t s, const float* b, int rows, int cols, int w4, std::size_t p4,
             std::uint8_t* rgb, int oy0, int ox0, int out_w) {
  if (rows > 0 && cols > 0)
    k_rgb_out<<<grid_for(static_cast<std::size_t>(rows) * cols), kThreads, 0, s>>>(
        b, rows, cols, w4, p4, rgb, oy0, ox0, out_w);
}
void blend_acc(cudaStream_t s, const float* b, int rows, int cols, int w4, std::size_t p4,
               float* fa, std::size_t frame_px, int oy0, int ox0, int out_w, int ty0, int ty1,
               int tx0, int tx1, int H, int W, int bw) {
  if (rows > 0 && cols > 0)
    k_blend_acc<<<grid_for(static_cast<std::size_t>(rows) * cols), kThreads, 0, s>>>(
        b, rows, cols, w4, p4, fa, frame_px, oy0, ox0, out_w, ty0, ty1, tx0, tx1, H, W, bw);
}
void acc_rgb(cudaStream_t s, const float* fa, std::size_t frame_px, std::uint8_t* rgb) {
  k_acc_rgb<<<grid_for(frame_px), kThreads, 0, s>>>(fa, frame_px, rgb);
}
void im2col1d_bf16(cudaStream_t s, const float* in, int cin, int n, int k, std::size_t p0,
                   std::size_t m, bf16* col) {
  k_im2col1d<<<grid_for(m * cin * k), kThreads, 0, s>>>(in, cin, n, k, p0, m, as_bf(col));
}
void overlap_add(cudaStream_t s, const float* z, const float* bias, float* out, int cout, int k,
                 int stride, int pad, int n) {
  const std::size_t t = static_cast<std::size_t>(cout) * n * stride;
  k_overlap_add<<<grid_for(t), kThreads, 0, s>>>(z, bias, out, cout, k, stride, pad, n);
}
void pcm_out(cudaStream_t s, const float* o, long long n3, long long n, float* pcm) {
  if (n > 0)
    k_pcm_out<<<grid_for(static_cast<std::size_t>(2 * n)), kThreads, 0, s>>>(o, n3, n, pcm);
}

}  // namespace h3pipe::model::cuda
