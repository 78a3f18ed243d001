#include "common/model/kernels.h"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace h3pipe::model {

namespace base {
#include "common/model/kernels_simd.inc"
}  // namespace base

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define H3_HAVE_AVX2_CLONE 1
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
#include "common/model/kernels_simd.inc"
}  // namespace avx2
#pragma GCC pop_options
#endif

namespace {
bool use_avx2() {
#ifdef H3_HAVE_AVX2_CLONE
  static const bool v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return v;
#else
  return false;
#endif
}
}  // namespace

#ifdef H3_HAVE_AVX2_CLONE
#define H3_DISPATCH(fn, ...) (use_avx2() ? avx2::fn(__VA_ARGS__) : base::fn(__VA_ARGS__))
#else
#define H3_DISPATCH(fn, ...) base::fn(__VA_ARGS__)
#endif

float fast_exp(float x) {
  return base::exp_core(x);
}

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) c[static_cast<std::size_t>(i) * ldc + j] *= beta;
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void linear(ThreadPool& pool, FlopCounter& fc, int m, int n, int k, const float* a, int lda,
            const float* w, int ldw, const float* bias, float* c, int ldc, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  fc.add(m, n, k);
  const int rb = (m + kGemmRowBlock - 1) / kGemmRowBlock;
  const int cb = (n + kGemmColBlock - 1) / kGemmColBlock;
  pool.run(static_cast<std::size_t>(rb) * cb, [&](std::size_t t, int) {
    const int r0 = static_cast<int>(t / cb) * kGemmRowBlock;
    const int c0 = static_cast<int>(t % cb) * kGemmColBlock;
    const int mr = std::min(kGemmRowBlock, m - r0), nc = std::min(kGemmColBlock, n - c0);
    float* cc = c + static_cast<std::size_t>(r0) * ldc + c0;
    sgemm(false, true, mr, nc, k, 1.0f, a + static_cast<std::size_t>(r0) * lda, lda,
          w + static_cast<std::size_t>(c0) * ldw, ldw, accumulate ? 1.0f : 0.0f, cc, ldc);
    if (bias)
      for (int i = 0; i < mr; ++i)
        for (int j = 0; j < nc; ++j) cc[static_cast<std::size_t>(i) * ldc + j] += bias[c0 + j];
  });
}

void layer_norm_row(const float* x, float* y, int d, float eps) {
  H3_DISPATCH(layer_norm, x, y, d, eps);
}
void layer_norm_affine_row(const float* x, float* y, int d, const float* gamma, const float* beta,
                           float eps) {
  H3_DISPATCH(layer_norm_affine, x, y, d, gamma, beta, eps);
}
void layer_norm_modulate_row(const float* x, float* y, int d, const float* shift,
                             const float* scale, float eps) {
  H3_DISPATCH(layer_norm_modulate, x, y, d, shift, scale, eps);
}
void softmax_row(float* x, int n) {
  H3_DISPATCH(softmax, x, n);
}
void silu_inplace(float* x, std::size_t n) {
  H3_DISPATCH(silu, x, n);
}
void gelu_inplace(float* x, std::size_t n) {
  H3_DISPATCH(gelu, x, n);
}
void gated_add_rows(float* x, const float* y, const float* gate, int rows, int d) {
  H3_DISPATCH(gated_add, x, y, gate, rows, d);
}
void scale_silu(const float* src, float* dst, const float* scale, float g, std::size_t n) {
  H3_DISPATCH(scale_silu, src, dst, scale, g, n);
}
void sum_squares(const float* src, float* acc, std::size_t n) {
  H3_DISPATCH(sum_squares, src, acc, n);
}
void axpy(float* y, const float* x, float a, int n) {
  H3_DISPATCH(axpy, y, x, a, n);
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

float uniform01(std::uint64_t seed, std::uint64_t index) {
  const std::uint64_t r = splitmix64(seed ^ splitmix64(index));
  return static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
}

float normal(std::uint64_t seed, std::uint64_t index) {
  // Box-Muller on the pair (index & ~1): u1 in (0, 1], u2 in [0, 1).
  const std::uint64_t pair = index >> 1;
  const double u1 = (static_cast<double>(splitmix64(seed ^ splitmix64(2 * pair)) >> 11) + 1.0) *
                    (1.0 / 9007199254740992.0);
  const double u2 = static_cast<double>(splitmix64(seed ^ splitmix64(2 * pair + 1)) >> 11) *
                    (1.0 / 9007199254740992.0);
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double a = 6.283185307179586 * u2;
  return static_cast<float>((index & 1) ? r * std::sin(a) : r * std::cos(a));
}

std::uint64_t hash_name(const char* s, std::size_t n) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(s[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace h3pipe::model
