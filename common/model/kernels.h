#pragma once
// Numeric kernels of the builtin model: GEMM wrappers over OpenBLAS (single-threaded calls cut
// into fixed-size tasks on the model's pool), row norms, activations, softmax, and the PRNG.
// Task boundaries never depend on the thread count (see parallel.h), so results do not either.
#include <cstddef>
#include <cstdint>

#include "common/model/parallel.h"

namespace h3pipe::model {

// Counts GEMM work (2*M*N*K per product) for GFLOP/s reporting.  Updated by the calling thread
// only (wrappers add before dispatching).
struct FlopCounter {
  double flops = 0;
  void add(double m, double n, double k) { flops += 2.0 * m * n * k; }
};

// Fixed task granularity of the row-split GEMM (rows, columns).
inline constexpr int kGemmRowBlock = 256;
inline constexpr int kGemmColBlock = 1536;

// C (M x N, ldc) = A (M x K, lda) * W^T (+ bias), W is (N x K, ldw) as a PyTorch Linear stores
// it.  accumulate: C += instead of =.
void linear(ThreadPool& pool, FlopCounter& fc, int m, int n, int k, const float* a, int lda,
            const float* w, int ldw, const float* bias, float* c, int ldc, bool accumulate = false);

// Single-threaded primitives (call from inside a task).
// C (M x N) = alpha * op(A) * op(B) + beta * C, row-major (thin cblas_sgemm wrapper).
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);

// Row-wise LayerNorm (no affine) of x (rows x d) into y (may alias).  y = (x-mean)/sqrt(var+eps).
void layer_norm_row(const float* x, float* y, int d, float eps = 1e-6f);
// y = LN(x) * gamma + beta.
void layer_norm_affine_row(const float* x, float* y, int d, const float* gamma, const float* beta,
                           float eps = 1e-6f);
// y = LN(x) * (1 + scale) + shift.
void layer_norm_modulate_row(const float* x, float* y, int d, const float* shift,
                             const float* scale, float eps = 1e-6f);
// In-place numerically stable softmax of one row.
void softmax_row(float* x, int n);
void silu_inplace(float* x, std::size_t n);
void gelu_inplace(float* x, std::size_t n);  // tanh approximation
// dst[i] = silu(src[i] * scale[i] * g) (dst may alias src).
void scale_silu(const float* src, float* dst, const float* scale, float g, std::size_t n);
// y[i] += a * x[i].
void axpy(float* y, const float* x, float a, int n);
// acc[i] += src[i]^2.
void sum_squares(const float* src, float* acc, std::size_t n);
// x[i] += g[i % d] * y[i] for a (rows x d) block: gated residual.
void gated_add_rows(float* x, const float* y, const float* gate, int rows, int d);
// Branch-free exp accurate to ~2 ulp over [-87, 88]; vectorizes.
float fast_exp(float x);

// Deterministic counter-based PRNG (splitmix64): same (seed, index) -> same value everywhere.
std::uint64_t splitmix64(std::uint64_t x);
// Uniform in [0, 1) with 24 random bits.
float uniform01(std::uint64_t seed, std::uint64_t index);
// Standard normal; element i of a stream is a function of (seed, i) only (Box-Muller on pairs).
float normal(std::uint64_t seed, std::uint64_t index);
// 64-bit FNV-1a of a string (stream ids from tensor names).
std::uint64_t hash_name(const char* s, std::size_t n);

}  // namespace h3pipe::model
