#pragma once
// Launchers of the device backend's own kernels (ops.cu).  Each mirrors a CPU routine of
// common/model (named in its comment) in the same operation order, so that CPU/GPU differences
// come from bf16 GEMM operands and reduction order only.  Layouts are the CPU code's: row-major
// (rows x d) token matrices, planar (C, h, w) frames.  All launches go to `s`; none
// synchronises.  UNRUN on a GPU (backend.h).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace h3pipe::model::cuda {

using bf16 = std::uint16_t;  // storage of __nv_bfloat16 (host code never does arithmetic on it)

// Up to three frame pointers (nullptr = zeros): the causal taps {f-2, f-1, f}.
struct Taps3 {
  const float* p[3] = {nullptr, nullptr, nullptr};
};

// --- transformer (transformer.cpp / kernels_simd.inc) ---
void to_bf16(cudaStream_t s, const float* x, bf16* y, std::size_t n);
// layer_norm_modulate_row per row, output bf16 (the next GEMM's operand).
void ln_modulate_bf16(cudaStream_t s, const float* x, bf16* y, int n, int d, const float* shift,
                      const float* scale);
// layer_norm_affine_row per row, output bf16.
void ln_affine_bf16(cudaStream_t s, const float* x, bf16* y, int n, int d, const float* gamma,
                    const float* beta);
// y[r, j] += b[j] (linear's bias, after the product).
void bias_rows(cudaStream_t s, float* y, const float* b, int rows, int n);
// out = bf16(y + b).
void bias_rows_bf16(cudaStream_t s, const float* y, const float* b, bf16* out, int rows, int n);
// out = bf16(gelu(y + b)) (fc1 -> gelu_rows).
void bias_gelu_bf16(cudaStream_t s, const float* y, const float* b, bf16* out, int rows, int n);
// x = (x + b) + pos (video_in/audio_in bias, then the position embedding).
void bias_pos(cudaStream_t s, float* x, const float* b, const float* pos, int rows, int d);
// x[r, j] += gate[j] * y[r, j] (gated_add_rows).
void gated_add(cudaStream_t s, float* x, const float* y, const float* gate, int n, int d);
// softmax_row of each of `rows` rows of s (n values, overwritten with exp), p = bf16(softmax).
void softmax_bf16(cudaStream_t st, float* s, bf16* p, long long rows, int n);
void silu(cudaStream_t s, float* x, std::size_t n);
// Dit::sample's position table: sinusoids of (t, y, x) per video token, of the step index per
// audio token, plus the modality embedding.
void pos_embed(cudaStream_t s, float* pos, int n, int nv, int hp, int wp, int d, int third,
               const float* type_embed);
// Dit::sample's patchify of video (24, T, H, W) and audio (64, L) into bf16 token features.
void patchify_bf16(cudaStream_t s, const float* video, const float* audio, bf16* vpatch,
                   bf16* apatch, int T, int H, int W, int p, int L, int ap);
// Dit::sample's Euler update x += dt * v on the unpatchified velocity.
void euler(cudaStream_t s, float* video, float* audio, const float* vout, const float* aout,
           float dt, int T, int H, int W, int p, int L, int ap);

// --- video decoder (conv_ops.cpp / vae_decoder.cpp) ---
// im2col3x3 of output rows [r0, r1): channel cc of the K = 9 * nch rows reads plane
// taps.p[cc % ntap] + (cc / ntap) * plane (a null tap reads zeros); nch = cin * ntap.
void im2col3x3_bf16(cudaStream_t s, Taps3 taps, int ntap, std::size_t plane, int nch, int ih,
                    int iw, bool upsample, int r0, int r1, bf16* col);
// conv3x3_up_phases' col of phase (py, px) for low-resolution rows [r0, r1).
void im2col_phase_bf16(cudaStream_t s, const float* src, int cin, int h, int w, int r0, int r1,
                       int py, int px, bf16* col);
// conv3x3_up_phases' scatter of one phase product tmp (cout x npx) into dst (+ bias).
void phase_scatter(cudaStream_t s, const float* tmp, const float* bias, float* dst, int cout,
                   int r0, int r1, int h, int w, int py, int px, bool accumulate);
// add_bias_planes.
void bias_planes(cudaStream_t s, float* out, const float* b, int cout, std::size_t plane,
                 std::size_t off, std::size_t n);
// time_conv3's col for pixels [p0, p0 + n).
void im2col_time_bf16(cudaStream_t s, Taps3 taps, int cin, std::size_t px, std::size_t p0,
                      std::size_t n, bf16* col);
// rms_norm_silu (in may alias out).
void rms_norm_silu(cudaStream_t s, const float* in, float* out, int frames, int c, std::size_t px,
                   const float* gain);
// conv3x3_direct (fp32, the RGB head) on one frame.
void conv3x3_direct(cudaStream_t s, const float* in, const float* w, const float* b, int cin,
                    int cout, int h, int wd, float* out, bool accumulate);
// Untiled frame: tanh of the RGB head -> rgb24 (cropped).
void rgb_out(cudaStream_t s, const float* b, int rows, int cols, int w4, std::size_t p4,
             std::uint8_t* rgb, int oy0, int ox0, int out_w);
// Tiled frame: weighted tanh into the accumulator fa (4 planes of frame_px), decode()'s ramps.
void blend_acc(cudaStream_t s, const float* b, int rows, int cols, int w4, std::size_t p4,
               float* fa, std::size_t frame_px, int oy0, int ox0, int out_w, int ty0, int ty1,
               int tx0, int tx1, int H, int W, int bw);
void acc_rgb(cudaStream_t s, const float* fa, std::size_t frame_px, std::uint8_t* rgb);

// --- audio decoder (conv_ops.cpp / audio_decoder.cpp) ---
// conv1d's col for positions [p0, p0 + m) of a (cin, n) signal, odd kernel k.
void im2col1d_bf16(cudaStream_t s, const float* in, int cin, int n, int k, std::size_t p0,
                   std::size_t m, bf16* col);
// conv_transpose1d's overlap-add of z (cout*k x n) into out (cout, n*stride), + bias.
void overlap_add(cudaStream_t s, const float* z, const float* bias, float* out, int cout, int k,
                 int stride, int pad, int n);
// AudioDecoder's output: pcm[2i + ch] = 0.25 tanh(o[ch][i]) for i < n.
void pcm_out(cudaStream_t s, const float* o, long long n3, long long n, float* pcm);

}  // namespace h3pipe::model::cuda
