#include "common/model/transformer.h"

#include <algorithm>
#include <cmath>

namespace h3pipe::model {

namespace {
constexpr int kRowTask = 64;  // rows per elementwise task

template <typename F>
void for_row_blocks(Exec& ex, int n, F&& f) {
  const int tasks = (n + kRowTask - 1) / kRowTask;
  ex.pool.run(static_cast<std::size_t>(tasks), [&](std::size_t t, int) {
    const int r0 = static_cast<int>(t) * kRowTask;
    f(r0, std::min(n, r0 + kRowTask));
  });
}
}  // namespace

LinearW linear_w(const Weights& ws, const std::string& name, int out, int in) {
  return {ws.at(name + ".weight"), ws.at(name + ".bias"), out, in};
}

void apply(Exec& ex, const LinearW& l, const float* x, int rows, float* y, bool accumulate) {
  linear(ex.pool, ex.fc, rows, l.out, l.in, x, l.in, l.w, l.in, l.b, y, l.out, accumulate);
}

void attention(Exec& ex, const float* q, int ldq, const float* k, int ldk, const float* v, int ldv,
               int nq, int nkv, int d, int heads, float* out, int ldo) {
  const int dh = d / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const int qblocks = (nq + kAttnQueryBlock - 1) / kAttnQueryBlock;
  ex.fc.add(nq, nkv, dh * heads);  // q k^T
  ex.fc.add(nq, dh * heads, nkv);  // p v
  auto& pw = ex.scratch.per_worker;
  if (pw.size() < static_cast<std::size_t>(ex.pool.size()))
    pw.resize(static_cast<std::size_t>(ex.pool.size()));
  ex.pool.run(static_cast<std::size_t>(qblocks) * heads, [&](std::size_t t, int worker) {
    const int h = static_cast<int>(t % heads);
    const int r0 = static_cast<int>(t / heads) * kAttnQueryBlock;
    const int rows = std::min(kAttnQueryBlock, nq - r0);
    auto& sbuf = pw[static_cast<std::size_t>(worker)];
    const std::size_t need = static_cast<std::size_t>(kAttnQueryBlock) * nkv;
    if (sbuf.size() < need) sbuf.resize(need);
    float* s = sbuf.data();
    sgemm(false, true, rows, nkv, dh, scale, q + static_cast<std::size_t>(r0) * ldq + h * dh, ldq,
          k + h * dh, ldk, 0.0f, s, nkv);
    for (int r = 0; r < rows; ++r) softmax_row(s + static_cast<std::size_t>(r) * nkv, nkv);
    sgemm(false, false, rows, dh, nkv, 1.0f, s, nkv, v + h * dh, ldv, 0.0f,
          out + static_cast<std::size_t>(r0) * ldo + h * dh, ldo);
  });
}

void layer_norm_rows(Exec& ex, const float* x, float* y, int n, int d, const float* gamma,
                     const float* beta) {
  for_row_blocks(ex, n, [&](int r0, int r1) {
    for (int r = r0; r < r1; ++r) {
      const std::size_t o = static_cast<std::size_t>(r) * d;
      if (gamma)
        layer_norm_affine_row(x + o, y + o, d, gamma, beta);
      else
        layer_norm_row(x + o, y + o, d);
    }
  });
}

void modulate_rows(Exec& ex, const float* x, float* y, int n, int d, const float* shift,
                   const float* scale) {
  for_row_blocks(ex, n, [&](int r0, int r1) {
    for (int r = r0; r < r1; ++r) {
      const std::size_t o = static_cast<std::size_t>(r) * d;
      layer_norm_modulate_row(x + o, y + o, d, shift, scale);
    }
  });
}

void gated_add(Exec& ex, float* x, const float* y, const float* gate, int n, int d) {
  for_row_blocks(ex, n, [&](int r0, int r1) {
    const std::size_t o = static_cast<std::size_t>(r0) * d;
    gated_add_rows(x + o, y + o, gate, r1 - r0, d);
  });
}

void gelu_rows(Exec& ex, float* x, int n, int d) {
  for_row_blocks(ex, n, [&](int r0, int r1) {
    gelu_inplace(x + static_cast<std::size_t>(r0) * d, static_cast<std::size_t>(r1 - r0) * d);
  });
}

void sinusoid(float pos, int dim, float* out, float max_period) {
  const int half = dim / 2;
  for (int i = 0; i < half; ++i) {
    const double freq = std::exp(-std::log(static_cast<double>(max_period)) * i / half);
    out[i] = static_cast<float>(std::cos(pos * freq));
    out[half + i] = static_cast<float>(std::sin(pos * freq));
  }
  if (dim % 2) out[dim - 1] = 0.0f;
}

TextBlockW text_block_w(const Weights& ws, const std::string& p, int d, int hidden) {
  return {ws.at(p + ".norm1.weight"),
          ws.at(p + ".norm1.bias"),
          ws.at(p + ".norm2.weight"),
          ws.at(p + ".norm2.bias"),
          linear_w(ws, p + ".attn.qkv", 3 * d, d),
          linear_w(ws, p + ".attn.proj", d, d),
          linear_w(ws, p + ".mlp.fc1", hidden, d),
          linear_w(ws, p + ".mlp.fc2", d, hidden)};
}

void text_block(Exec& ex, const TextBlockW& w, float* x, int n, int d, int heads, int hidden) {
  Scratch& s = ex.scratch;
  float* h = Scratch::get(s.h, static_cast<std::size_t>(n) * d);
  float* q = Scratch::get(s.qkv, static_cast<std::size_t>(n) * 3 * d);
  float* a = Scratch::get(s.att, static_cast<std::size_t>(n) * d);
  float* ff = Scratch::get(s.ff, static_cast<std::size_t>(n) * hidden);
  layer_norm_rows(ex, x, h, n, d, w.n1_g, w.n1_b);
  apply(ex, w.qkv, h, n, q);
  attention(ex, q, 3 * d, q + d, 3 * d, q + 2 * d, 3 * d, n, n, d, heads, a, d);
  apply(ex, w.proj, a, n, x, /*accumulate=*/true);
  layer_norm_rows(ex, x, h, n, d, w.n2_g, w.n2_b);
  apply(ex, w.fc1, h, n, ff);
  gelu_rows(ex, ff, n, hidden);
  apply(ex, w.fc2, ff, n, x, /*accumulate=*/true);
}

}  // namespace h3pipe::model
