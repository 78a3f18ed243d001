#pragma once
// Transformer building blocks shared by the text encoder and the DiT: multi-head attention
// (scores by query block, never the full N x N matrix), MLP, and row-parallel norms.
#include <vector>

#include "common/model/kernels.h"
#include "common/model/weights.h"

namespace h3pipe::model {

struct LinearW {
  const float* w = nullptr;
  const float* b = nullptr;
  int out = 0, in = 0;
};
LinearW linear_w(const Weights& ws, const std::string& name, int out, int in);

// Reusable buffers of one model (grow only) and per-worker attention score blocks.
struct Scratch {
  static float* get(std::vector<float>& v, std::size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  }
  std::vector<float> h, qkv, att, o, ff, q;
  std::vector<std::vector<float>> per_worker;
};

// Everything a block needs to run (CPU; the device backend has its own, cuda/device.h).
struct Exec {
  ThreadPool& pool;
  FlopCounter& fc;
  Scratch& scratch;
};

inline constexpr int kAttnQueryBlock = 128;

// out (nq x d, ldo) = softmax(q k^T / sqrt(dh)) v per head; q/k/v rows at stride ldq/ldk/ldv,
// head h in columns [h*dh, (h+1)*dh).  Tasks: (head, block of 128 query rows).
void attention(Exec& ex, const float* q, int ldq, const float* k, int ldk, const float* v, int ldv,
               int nq, int nkv, int d, int heads, float* out, int ldo);

// y = x W^T + b for all rows (see kernels.h linear).
void apply(Exec& ex, const LinearW& l, const float* x, int rows, float* y, bool accumulate = false);

// Row-parallel helpers over an (n x d) matrix.
void layer_norm_rows(Exec& ex, const float* x, float* y, int n, int d, const float* gamma,
                     const float* beta);
void modulate_rows(Exec& ex, const float* x, float* y, int n, int d, const float* shift,
                   const float* scale);
void gated_add(Exec& ex, float* x, const float* y, const float* gate, int n, int d);
void gelu_rows(Exec& ex, float* x, int n, int d);

// Sinusoidal embedding of a scalar position into `dim` values (dim even).
void sinusoid(float pos, int dim, float* out, float max_period = 10000.0f);

struct TextBlockW {
  const float *n1_g, *n1_b, *n2_g, *n2_b;
  LinearW qkv, proj, fc1, fc2;
};
TextBlockW text_block_w(const Weights& ws, const std::string& prefix, int d, int hidden);
// Pre-LN transformer block in place on x (n x d).
void text_block(Exec& ex, const TextBlockW& w, float* x, int n, int d, int heads, int hidden);

}  // namespace h3pipe::model
