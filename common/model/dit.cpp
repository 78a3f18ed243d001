// The DiT sampler: one token sequence of patchified video latent (1x p x p) and audio latent
// (audio_patch steps per token); adaLN-modulated self-attention, cross-attention to the
// conditioning, adaLN-modulated MLP; flow-matching Euler steps from seeded noise.
#include <algorithm>
#include <cmath>

#include "common/model/dit_layout.h"
#include "common/model/networks.h"

namespace h3pipe::model {

namespace {

// Initial noise: element i of each latent is a function of (seed, i) only.
void seed_noise(Exec& ex, const LatentDims& dims, std::uint64_t seed, float* video, float* audio) {
  const std::size_t thw = static_cast<std::size_t>(dims.h) * dims.w * dims.t;
  const std::uint64_t vs = splitmix64(seed ^ kVideoNoise), as = splitmix64(seed ^ kAudioNoise);
  ex.pool.run(static_cast<std::size_t>(kVideoChannels), [&](std::size_t c, int) {
    for (std::size_t i = c * thw; i < (c + 1) * thw; ++i) video[i] = normal(vs, i);
  });
  const std::size_t an = static_cast<std::size_t>(dims.audio_numel());
  for (std::size_t i = 0; i < an; ++i) audio[i] = normal(as, i);
}

// Positions (+ modality embedding) of every token, (n, d): fixed for a sample call.
std::vector<float> token_positions(Exec& ex, const DitTokens& tk, int d, const float* type_embed) {
  const int hp = tk.hp, wp = tk.wp, nv = tk.nv, n = tk.n;
  std::vector<float> pos(static_cast<std::size_t>(n) * d, 0.0f);
  const int third = (d / 3) & ~1;
  ex.pool.run(static_cast<std::size_t>(n + 63) / 64, [&](std::size_t task, int) {
    for (int tok = static_cast<int>(task) * 64; tok < std::min(n, static_cast<int>(task) * 64 + 64);
         ++tok) {
      float* pr = pos.data() + static_cast<std::size_t>(tok) * d;
      if (tok < nv) {
        const int t = tok / (hp * wp), y = (tok / wp) % hp, x = tok % wp;
        sinusoid(static_cast<float>(t), third, pr);
        sinusoid(static_cast<float>(y), third, pr + third);
        sinusoid(static_cast<float>(x), third, pr + 2 * third);
      } else {
        sinusoid(static_cast<float>(tok - nv), third, pr);
      }
      const float* te = type_embed + (tok < nv ? 0 : d);
      for (int j = 0; j < d; ++j) pr[j] += te[j];
    }
  });
  return pos;
}

// Patchify: video feature (c, py, px), audio feature (c, side, j).
void patchify(Exec& ex, const ModelConfig& cfg, const LatentDims& dims, const DitTokens& tk,
              const float* video, const float* audio, float* vpatch, float* apatch) {
  const int p = cfg.patch[1], ap = cfg.audio_patch;
  const int T = dims.t, H = dims.h, W = dims.w, L = dims.audio_len;
  const int hp = tk.hp, wp = tk.wp, na = tk.na, vf = tk.vf, af = tk.af;
  const std::size_t hw = static_cast<std::size_t>(H) * W, thw = hw * T;
  ex.pool.run(static_cast<std::size_t>(T), [&](std::size_t t, int) {
    for (int y = 0; y < hp; ++y)
      for (int xx = 0; xx < wp; ++xx) {
        float* f =
            vpatch +
            (static_cast<std::size_t>(t) * hp * wp + static_cast<std::size_t>(y) * wp + xx) * vf;
        for (int c = 0; c < kVideoChannels; ++c)
          for (int py = 0; py < p; ++py)
            for (int px = 0; px < p; ++px) {
              const int yy = y * p + py, xs = xx * p + px;
              *f++ = (yy < H && xs < W)
                         ? video[c * thw + t * hw + static_cast<std::size_t>(yy) * W + xs]
                         : 0.0f;
            }
      }
  });
  for (int tok = 0; tok < na; ++tok) {
    float* f = apatch + static_cast<std::size_t>(tok) * af;
    for (int cs = 0; cs < kAudioChannels * 2; ++cs)
      for (int j = 0; j < ap; ++j) {
        const int l = tok * ap + j;
        *f++ = l < L ? audio[static_cast<std::size_t>(cs) * L + l] : 0.0f;
      }
  }
}

// Euler step x <- x + dt * v on the unpatchified velocity (vout, aout: per-token patches).
void euler_step(Exec& ex, const ModelConfig& cfg, const LatentDims& dims, const DitTokens& tk,
                float dt, const float* vout, const float* aout, float* video, float* audio) {
  const int p = cfg.patch[1], ap = cfg.audio_patch;
  const int T = dims.t, H = dims.h, W = dims.w, L = dims.audio_len;
  const int hp = tk.hp, wp = tk.wp, na = tk.na, vf = tk.vf, af = tk.af;
  const std::size_t hw = static_cast<std::size_t>(H) * W, thw = hw * T;
  ex.pool.run(static_cast<std::size_t>(T), [&](std::size_t t, int) {
    for (int y = 0; y < hp; ++y)
      for (int xx = 0; xx < wp; ++xx) {
        const float* f =
            vout +
            (static_cast<std::size_t>(t) * hp * wp + static_cast<std::size_t>(y) * wp + xx) * vf;
        for (int c = 0; c < kVideoChannels; ++c)
          for (int py = 0; py < p; ++py)
            for (int px = 0; px < p; ++px, ++f) {
              const int yy = y * p + py, xs = xx * p + px;
              if (yy < H && xs < W)
                video[c * thw + t * hw + static_cast<std::size_t>(yy) * W + xs] += dt * *f;
            }
      }
  });
  for (int tok = 0; tok < na; ++tok) {
    const float* f = aout + static_cast<std::size_t>(tok) * af;
    for (int cs = 0; cs < kAudioChannels * 2; ++cs)
      for (int j = 0; j < ap; ++j, ++f) {
        const int l = tok * ap + j;
        if (l < L) audio[static_cast<std::size_t>(cs) * L + l] += dt * *f;
      }
  }
}

}  // namespace

Dit::Dit(const Weights& ws, const ModelConfig& c) : c_(c), type_embed_(ws.at("dit.type_embed")) {
  const int d = c.width, hid = c.width * c.mlp_ratio, p = c.patch[1];
  const int vf = kVideoChannels * p * p, af = kAudioChannels * 2 * c.audio_patch;
  video_in_ = linear_w(ws, "dit.video_in", d, vf);
  audio_in_ = linear_w(ws, "dit.audio_in", d, af);
  t1_ = linear_w(ws, "dit.t_embed.fc1", d, kTimeEmbed);
  t2_ = linear_w(ws, "dit.t_embed.fc2", d, d);
  cond_in_ = linear_w(ws, "dit.cond_in", d, d);
  final_ada_ = linear_w(ws, "dit.final.ada", 2 * d, d);
  video_out_ = linear_w(ws, "dit.video_out", vf, d);
  audio_out_ = linear_w(ws, "dit.audio_out", af, d);
  for (int i = 0; i < c.depth; ++i) {
    const std::string n = fmt::format("dit.blocks.{}", i);
    blocks_.push_back({linear_w(ws, n + ".ada", 6 * d, d), linear_w(ws, n + ".attn.qkv", 3 * d, d),
                       linear_w(ws, n + ".attn.proj", d, d), linear_w(ws, n + ".cross.q", d, d),
                       linear_w(ws, n + ".cross.kv", 2 * d, d),
                       linear_w(ws, n + ".cross.proj", d, d), linear_w(ws, n + ".mlp.fc1", hid, d),
                       linear_w(ws, n + ".mlp.fc2", d, hid), ws.at(n + ".cross.norm.weight"),
                       ws.at(n + ".cross.norm.bias")});
  }
}

std::vector<float> Dit::schedule(std::uint32_t steps) const {
  return flow_schedule(c_.flow_shift, steps);
}

void Dit::block(Exec& ex, const Block& b, const float* mod, const float* kv, int m, float* x,
                int n) const {
  const int d = c_.width, hid = d * c_.mlp_ratio;
  const float *shift1 = mod, *scale1 = mod + d, *gate1 = mod + 2 * d;
  const float *shift2 = mod + 3 * d, *scale2 = mod + 4 * d, *gate2 = mod + 5 * d;
  Scratch& s = ex.scratch;
  const auto nd = static_cast<std::size_t>(n) * d;
  float* h = Scratch::get(s.h, nd);
  float* qkv = Scratch::get(s.qkv, 3 * nd);
  float* att = Scratch::get(s.att, nd);
  float* o = Scratch::get(s.o, nd);
  float* ff = Scratch::get(s.ff, static_cast<std::size_t>(n) * hid);

  // Self-attention over the joint video+audio sequence.
  modulate_rows(ex, x, h, n, d, shift1, scale1);
  apply(ex, b.qkv, h, n, qkv);
  attention(ex, qkv, 3 * d, qkv + d, 3 * d, qkv + 2 * d, 3 * d, n, n, d, c_.heads, att, d);
  apply(ex, b.proj, att, n, o);
  gated_add(ex, x, o, gate1, n, d);
  // Cross-attention to the conditioning (keys/values precomputed per sample call).
  layer_norm_rows(ex, x, h, n, d, b.cn_g, b.cn_b);
  apply(ex, b.cq, h, n, qkv);
  attention(ex, qkv, d, kv, 2 * d, kv + d, 2 * d, n, m, d, c_.heads, att, d);
  apply(ex, b.cproj, att, n, x, /*accumulate=*/true);
  // MLP.
  modulate_rows(ex, x, h, n, d, shift2, scale2);
  apply(ex, b.fc1, h, n, ff);
  gelu_rows(ex, ff, n, hid);
  apply(ex, b.fc2, ff, n, o);
  gated_add(ex, x, o, gate2, n, d);
}

Status Dit::sample(Exec& ex, const Tensor& cond, const LatentDims& dims, std::uint32_t steps,
                   std::uint64_t seed, float* video, float* audio,
                   const CancelFn& cancelled) const {
  const int d = c_.width;
  const DitTokens tk = dit_tokens(c_, dims);
  const int nv = tk.nv, na = tk.na, n = tk.n, vf = tk.vf, af = tk.af;
  const int m = static_cast<int>(cond.shape[0]);

  seed_noise(ex, dims, seed, video, audio);

  // Conditioning keys/values for every block, once per call.
  std::vector<float> cproj(static_cast<std::size_t>(m) * d);
  apply(ex, cond_in_, cond.data.data(), m, cproj.data());
  std::vector<float> kv(static_cast<std::size_t>(c_.depth) * m * 2 * d);
  for (int i = 0; i < c_.depth; ++i)
    apply(ex, blocks_[static_cast<std::size_t>(i)].ckv, cproj.data(), m,
          kv.data() + static_cast<std::size_t>(i) * m * 2 * d);

  const std::vector<float> pos = token_positions(ex, tk, d, type_embed_);

  std::vector<float> x(static_cast<std::size_t>(n) * d),
      tin(static_cast<std::size_t>(n) * std::max(vf, af));
  std::vector<float> vout(static_cast<std::size_t>(nv) * vf),
      aout(static_cast<std::size_t>(na) * af);
  std::vector<float> temb(kTimeEmbed), c1(static_cast<std::size_t>(d)),
      c2(static_cast<std::size_t>(d));
  std::vector<float> mods(static_cast<std::size_t>(c_.depth) * 6 * d),
      fmod(2 * static_cast<std::size_t>(d));
  const std::vector<float> ts = schedule(steps);
  float* vpatch = tin.data();
  float* apatch = tin.data() + static_cast<std::size_t>(nv) * vf;

  for (std::uint32_t step = 0; step < steps; ++step) {
    if (cancelled && cancelled())
      return make_error(errc::runtime::kCancelled, "sampling cancelled at step {}", step);
    patchify(ex, c_, dims, tk, video, audio, vpatch, apatch);
    apply(ex, video_in_, vpatch, nv, x.data());
    apply(ex, audio_in_, apatch, na, x.data() + static_cast<std::size_t>(nv) * d);
    ex.pool.run(static_cast<std::size_t>(n + 255) / 256, [&](std::size_t task, int) {
      const std::size_t b = task * 256 * d,
                        e = std::min(static_cast<std::size_t>(n) * d, b + 256 * d);
      for (std::size_t i = b; i < e; ++i) x[i] += pos[i];
    });

    // Timestep conditioning and every block's modulation for this step.
    sinusoid(ts[step] * 1000.0f, kTimeEmbed, temb.data());
    apply(ex, t1_, temb.data(), 1, c1.data());
    silu_inplace(c1.data(), c1.size());
    apply(ex, t2_, c1.data(), 1, c2.data());
    silu_inplace(c2.data(), c2.size());
    for (int i = 0; i < c_.depth; ++i)
      apply(ex, blocks_[static_cast<std::size_t>(i)].ada, c2.data(), 1,
            mods.data() + static_cast<std::size_t>(i) * 6 * d);
    apply(ex, final_ada_, c2.data(), 1, fmod.data());

    for (int i = 0; i < c_.depth; ++i)
      block(ex, blocks_[static_cast<std::size_t>(i)],
            mods.data() + static_cast<std::size_t>(i) * 6 * d,
            kv.data() + static_cast<std::size_t>(i) * m * 2 * d, m, x.data(), n);

    float* h = Scratch::get(ex.scratch.h, static_cast<std::size_t>(n) * d);
    modulate_rows(ex, x.data(), h, n, d, fmod.data(), fmod.data() + d);
    apply(ex, video_out_, h, nv, vout.data());
    apply(ex, audio_out_, h + static_cast<std::size_t>(nv) * d, na, aout.data());

    euler_step(ex, c_, dims, tk, ts[step + 1] - ts[step], vout.data(), aout.data(), video, audio);
  }
  return Status::Ok();
}

}  // namespace h3pipe::model
