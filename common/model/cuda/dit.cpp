// The DiT sampler on the device: Dit::sample (common/model/dit.cpp) step for step, with every
// activation resident; bf16 GEMM operands, fp32 residual stream, norms and softmax.
// UNRUN on a GPU (backend.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/model/cuda/networks.h"
#include "common/model/dit_layout.h"
#include "common/model/kernels.h"
#include "common/model/transformer.h"

namespace h3pipe::model::cuda {

namespace {
// Attention score blocks (fp32 scores + bf16 probabilities of every head) stay under this.
constexpr std::size_t kAttnBytes = std::size_t{2} << 30;
}  // namespace

DLinear linear(const Ctx& ctx, const std::string& name) {
  const DTensor& w = ctx.at(name + ".weight");
  const DTensor& b = ctx.at(name + ".bias");
  return {w.b16, b.f32, static_cast<int>(w.shape[0]), static_cast<int>(w.shape[1])};
}

DitGpu::DitGpu(Ctx& ctx, const ModelConfig& c)
    : ctx_(ctx), c_(c), type_embed_(ctx.at("dit.type_embed").f32) {
  video_in_ = linear(ctx, "dit.video_in");
  audio_in_ = linear(ctx, "dit.audio_in");
  t1_ = linear(ctx, "dit.t_embed.fc1");
  t2_ = linear(ctx, "dit.t_embed.fc2");
  cond_in_ = linear(ctx, "dit.cond_in");
  final_ada_ = linear(ctx, "dit.final.ada");
  video_out_ = linear(ctx, "dit.video_out");
  audio_out_ = linear(ctx, "dit.audio_out");
  for (int i = 0; i < c.depth; ++i) {
    const std::string n = fmt::format("dit.blocks.{}", i);
    blocks_.push_back({linear(ctx, n + ".ada"), linear(ctx, n + ".attn.qkv"),
                       linear(ctx, n + ".attn.proj"), linear(ctx, n + ".cross.q"),
                       linear(ctx, n + ".cross.kv"), linear(ctx, n + ".cross.proj"),
                       linear(ctx, n + ".mlp.fc1"), linear(ctx, n + ".mlp.fc2"),
                       ctx.at(n + ".cross.norm.weight").f32, ctx.at(n + ".cross.norm.bias").f32});
  }
  for (Buf<float>* b :
       {&x_, &big_, &att_, &o_, &mods_, &fmod_, &c1_, &pos_, &video_, &audio_, &vout_, &aout_, &s_})
    *b = ctx.buf<float>();
  for (Buf<bf16>* b : {&hb_, &qkvb_, &attb_, &ffb_, &kvb_, &tinb_, &cb_, &p_}) *b = ctx.buf<bf16>();
}

void DitGpu::apply(const DLinear& l, const bf16* x, int rows, float* y, bool accumulate) {
  ctx_.gemm(false, true, rows, l.out, l.in, 1.0f, x, l.in, l.w, l.in, accumulate ? 1.0f : 0.0f, y,
            l.out);
  bias_rows(ctx_.stream(), y, l.b, rows, l.out);
}

// transformer.cpp attention(): per head softmax(q k^T / sqrt(dh)) v, all heads of a block of
// query rows in two strided-batched GEMMs.
void DitGpu::attention(const bf16* q, int ldq, const bf16* k, int ldk, const bf16* v, int ldv,
                       int nq, int nkv, float* out, int ldo) {
  const int heads = c_.heads, dh = c_.width / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const std::size_t per_row = static_cast<std::size_t>(heads) * nkv * (sizeof(float) + 2);
  const int qr = static_cast<int>(std::clamp<std::size_t>(kAttnBytes / per_row, 1, nq));
  float* s = s_.get(static_cast<std::size_t>(heads) * qr * nkv);
  bf16* p = p_.get(static_cast<std::size_t>(heads) * qr * nkv);
  for (int r0 = 0; r0 < nq; r0 += qr) {
    const int rows = std::min(qr, nq - r0);
    const long long blk = static_cast<long long>(rows) * nkv;
    ctx_.gemm(false, true, rows, nkv, dh, scale, q + static_cast<std::size_t>(r0) * ldq, ldq, k,
              ldk, 0.0f, s, nkv, heads, dh, dh, blk);
    softmax_bf16(ctx_.stream(), s, p, static_cast<long long>(heads) * rows, nkv);
    ctx_.gemm(false, false, rows, dh, nkv, 1.0f, p, nkv, v, ldv, 0.0f,
              out + static_cast<std::size_t>(r0) * ldo, ldo, heads, blk, dh, dh);
  }
}

void DitGpu::block(const Block& b, const float* mod, const bf16* kv, int m, float* x, int n) {
  const int d = c_.width, hid = d * c_.mlp_ratio;
  const float *shift1 = mod, *scale1 = mod + d, *gate1 = mod + 2 * d;
  const float *shift2 = mod + 3 * d, *scale2 = mod + 4 * d, *gate2 = mod + 5 * d;
  cudaStream_t st = ctx_.stream();
  const auto nd = static_cast<std::size_t>(n) * d;
  bf16* h = hb_.get(nd);
  float* big = big_.get(static_cast<std::size_t>(n) * std::max(3 * d, hid));
  bf16* qkv = qkvb_.get(3 * nd);
  float* att = att_.get(nd);
  bf16* attb = attb_.get(nd);
  float* o = o_.get(nd);
  bf16* ff = ffb_.get(static_cast<std::size_t>(n) * hid);

  // Self-attention over the joint video+audio sequence.
  ln_modulate_bf16(st, x, h, n, d, shift1, scale1);
  ctx_.gemm(false, true, n, 3 * d, d, 1.0f, h, d, b.qkv.w, d, 0.0f, big, 3 * d);
  bias_rows_bf16(st, big, b.qkv.b, qkv, n, 3 * d);
  attention(qkv, 3 * d, qkv + d, 3 * d, qkv + 2 * d, 3 * d, n, n, att, d);
  to_bf16(st, att, attb, nd);
  apply(b.proj, attb, n, o);
  gated_add(st, x, o, gate1, n, d);
  // Cross-attention to the conditioning (keys/values precomputed per sample call).
  ln_affine_bf16(st, x, h, n, d, b.cn_g, b.cn_b);
  ctx_.gemm(false, true, n, d, d, 1.0f, h, d, b.cq.w, d, 0.0f, big, d);
  bias_rows_bf16(st, big, b.cq.b, qkv, n, d);
  attention(qkv, d, kv, 2 * d, kv + d, 2 * d, n, m, att, d);
  to_bf16(st, att, attb, nd);
  apply(b.cproj, attb, n, x, /*accumulate=*/true);
  // MLP.
  ln_modulate_bf16(st, x, h, n, d, shift2, scale2);
  ctx_.gemm(false, true, n, hid, d, 1.0f, h, d, b.fc1.w, d, 0.0f, big, hid);
  bias_gelu_bf16(st, big, b.fc1.b, ff, n, hid);
  apply(b.fc2, ff, n, o);
  gated_add(st, x, o, gate2, n, d);
}

Status DitGpu::sample(const Tensor& cond, const LatentDims& dims, std::uint32_t steps,
                      std::uint64_t seed, float* video_host, float* audio_host,
                      const CancelFn& cancelled) {
  const int d = c_.width, p = c_.patch[1], ap = c_.audio_patch;
  const int T = dims.t, H = dims.h, W = dims.w, L = dims.audio_len;
  const DitTokens tk = dit_tokens(c_, dims);
  const int hp = tk.hp, wp = tk.wp, nv = tk.nv, na = tk.na, n = tk.n, vf = tk.vf, af = tk.af;
  const int m = static_cast<int>(cond.shape[0]);
  const std::size_t vn = static_cast<std::size_t>(dims.video_numel()),
                    an = static_cast<std::size_t>(dims.audio_numel());
  cudaStream_t st = ctx_.stream();

  // Initial noise: the CPU's streams, generated here and uploaded once.
  const std::uint64_t vs = splitmix64(seed ^ kVideoNoise), as = splitmix64(seed ^ kAudioNoise);
  for (std::size_t i = 0; i < vn; ++i) video_host[i] = normal(vs, i);
  for (std::size_t i = 0; i < an; ++i) audio_host[i] = normal(as, i);
  float* video = video_.get(vn);
  float* audio = audio_.get(an);
  ctx_.to_device(video, video_host, vn);
  ctx_.to_device(audio, audio_host, an);

  // Conditioning keys/values for every block, once per call.
  const std::size_t md = static_cast<std::size_t>(m) * d;
  {
    float* c32 = big_.get(std::max<std::size_t>(md * 2, static_cast<std::size_t>(n) * 3 * d));
    bf16* cb = cb_.get(md);
    ctx_.to_device(c32, cond.data.data(), md);
    to_bf16(st, c32, cb, md);
    apply(cond_in_, cb, m, c32);
    to_bf16(st, c32, cb, md);
    bf16* kv = kvb_.get(static_cast<std::size_t>(c_.depth) * md * 2);
    float* kv32 = att_.get(md * 2);
    for (int i = 0; i < c_.depth; ++i) {
      apply(blocks_[static_cast<std::size_t>(i)].ckv, cb, m, kv32);
      to_bf16(st, kv32, kv + static_cast<std::size_t>(i) * md * 2, md * 2);
    }
  }

  // Positions (+ modality embedding), fixed for the call.
  float* pos = pos_.get(static_cast<std::size_t>(n) * d);
  pos_embed(st, pos, n, nv, hp, wp, d, (d / 3) & ~1, type_embed_);

  float* x = x_.get(static_cast<std::size_t>(n) * d);
  bf16* tin = tinb_.get(static_cast<std::size_t>(nv) * vf + static_cast<std::size_t>(na) * af);
  bf16* vpatch = tin;
  bf16* apatch = tin + static_cast<std::size_t>(nv) * vf;
  float* vout = vout_.get(static_cast<std::size_t>(nv) * vf);
  float* aout = aout_.get(static_cast<std::size_t>(na) * af);
  float* mods = mods_.get(static_cast<std::size_t>(c_.depth) * 6 * d);
  float* fmod = fmod_.get(2 * static_cast<std::size_t>(d));
  float* c1 = c1_.get(static_cast<std::size_t>(std::max(d, kTimeEmbed)));
  bf16* cb = cb_.get(std::max(md, static_cast<std::size_t>(std::max(d, kTimeEmbed))));
  std::vector<float> temb(kTimeEmbed);
  const std::vector<float> ts = flow_schedule(c_.flow_shift, steps);

  for (std::uint32_t step = 0; step < steps; ++step) {
    if (cancelled && cancelled())
      return make_error(errc::runtime::kCancelled, "sampling cancelled at step {}", step);
    patchify_bf16(st, video, audio, vpatch, apatch, T, H, W, p, L, ap);
    ctx_.gemm(false, true, nv, d, vf, 1.0f, vpatch, vf, video_in_.w, vf, 0.0f, x, d);
    ctx_.gemm(false, true, na, d, af, 1.0f, apatch, af, audio_in_.w, af, 0.0f,
              x + static_cast<std::size_t>(nv) * d, d);
    bias_pos(st, x, video_in_.b, pos, nv, d);
    bias_pos(st, x + static_cast<std::size_t>(nv) * d, audio_in_.b,
             pos + static_cast<std::size_t>(nv) * d, na, d);

    // Timestep conditioning and every block's modulation for this step.
    sinusoid(ts[step] * 1000.0f, kTimeEmbed, temb.data());
    ctx_.to_device(c1, temb.data(), kTimeEmbed);
    to_bf16(st, c1, cb, kTimeEmbed);
    apply(t1_, cb, 1, c1);
    silu(st, c1, static_cast<std::size_t>(d));
    to_bf16(st, c1, cb, static_cast<std::size_t>(d));
    apply(t2_, cb, 1, c1);
    silu(st, c1, static_cast<std::size_t>(d));
    to_bf16(st, c1, cb, static_cast<std::size_t>(d));
    for (int i = 0; i < c_.depth; ++i)
      apply(blocks_[static_cast<std::size_t>(i)].ada, cb, 1,
            mods + static_cast<std::size_t>(i) * 6 * d);
    apply(final_ada_, cb, 1, fmod);
    // One host wait per step: the cancel check above then sees real progress (the stream is
    // otherwise never drained during sampling).
    ctx_.sync();

    for (int i = 0; i < c_.depth; ++i)
      block(blocks_[static_cast<std::size_t>(i)], mods + static_cast<std::size_t>(i) * 6 * d,
            kvb_.data() + static_cast<std::size_t>(i) * md * 2, m, x, n);

    bf16* h = hb_.get(static_cast<std::size_t>(n) * d);
    ln_modulate_bf16(st, x, h, n, d, fmod, fmod + d);
    apply(video_out_, h, nv, vout);
    apply(audio_out_, h + static_cast<std::size_t>(nv) * d, na, aout);

    // Euler step x <- x + (t_next - t) * v on the unpatchified velocity.
    euler(st, video, audio, vout, aout, ts[step + 1] - ts[step], T, H, W, p, L, ap);
  }
  ctx_.to_host(video_host, video, vn);
  ctx_.to_host(audio_host, audio, an);
  return Status::Ok();
}

}  // namespace h3pipe::model::cuda
