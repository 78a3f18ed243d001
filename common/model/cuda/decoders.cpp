// The video and audio decoders on the device: VideoDecoder::decode (vae_decoder.cpp) and
// AudioDecoder::decode (audio_decoder.cpp) step for step, convolutions as bf16 im2col bands +
// cuBLASLt (conv_ops.cpp's structure), norms and activations in fp32 kernels, the RGB head in
// fp32.  Only finished frames (rgb24) leave the device.  UNRUN on a GPU (backend.h).
#include <algorithm>

#include "common/model/conv_ops.h"
#include "common/model/cuda/networks.h"
#include "common/model/decode_layout.h"
#include "common/model/weights.h"

namespace h3pipe::model::cuda {

namespace {
DConv dconv(Ctx& ctx, const Weights& ws, const std::string& n, bool phases) {
  const DTensor& w = ctx.at(n + ".weight");
  DConv c{w.b16,
          w.f32,
          ctx.at(n + ".bias").f32,
          nullptr,
          static_cast<int>(w.shape[0]),
          static_cast<int>(w.shape[1])};
  if (phases) {
    const std::string pn = n + ".phases";
    Tensor t;
    t.data = subpixel_weights(ws.at(n + ".weight"), c.out, c.in);
    t.shape = {4, c.out, c.in, 2, 2};
    ctx.upload(pn, t, false, true);
    c.phases = ctx.at(pn).b16;
  }
  return c;
}

// One tile's causal state on the device (vae_decoder.cpp Tile).
struct TileGpu : TileRect {
  explicit TileGpu(const TileRect& r) : TileRect(r) {}
  std::deque<Buf<float>> cache0, cache1;
};

void push_cache(Ctx& ctx, std::deque<Buf<float>>& cache, const float* cur, int frames,
                std::size_t elems) {
  // The frames leaving the cache may still be read by queued kernels (the taps just taken).
  ctx.sync();
  for (int f = std::max(0, frames - 2); f < frames; ++f) {
    Buf<float> b = ctx.buf<float>();
    ctx.copy(b.get(elems), cur + f * elems, elems);
    cache.push_back(std::move(b));
    if (cache.size() > 2) cache.pop_front();
  }
}

// vae_decoder.cpp's split_time on the device: the temporal upsampler's output (frames, 2*ch,
// px) read as 2*frames frames of (ch, px); frame 0 of the clip keeps only its first half.
// Drops that half in place; returns the frame count.
int split_time(Ctx& ctx, float* tup, int frames, std::size_t frame_elems, bool clip_start) {
  if (!clip_start) return 2 * frames;
  for (int f = 1; f < 2 * frames - 1; ++f)
    ctx.copy(tup + f * frame_elems, tup + (f + 1) * frame_elems, frame_elems);
  return 2 * frames - 1;
}

Taps3 taps_of(const std::vector<const float*>& taps, int f) {
  Taps3 t;
  for (int i = 0; i < 3; ++i) t.p[i] = taps[static_cast<std::size_t>(f) * 3 + i];
  return t;
}

// Latent frames f0-pre .. f0+s-1 of the tile's region into lat (frames, 24, eh x ew), one 2-D copy
// per (frame, channel); returns conv_in's three causal taps per frame (nullptr before the clip).
std::vector<const float*> load_tile_latents(cudaStream_t st, const float* video,
                                            const LatentDims& d, const TileRect& tile, int f0,
                                            int pre, int s, float* lat) {
  const int W = d.w;
  const std::size_t lat_plane = static_cast<std::size_t>(d.h) * W, lat_thw = lat_plane * d.t;
  const int eh = tile.eh(), ew = tile.ew();
  const std::size_t p0 = static_cast<std::size_t>(eh) * ew;
  for (int f = 0; f < pre + s; ++f)
    for (int ch = 0; ch < kVideoChannels; ++ch)
      H3_CUDA(cudaMemcpy2DAsync(
          lat + (static_cast<std::size_t>(f) * kVideoChannels + ch) * p0, sizeof(float) * ew,
          video + ch * lat_thw + static_cast<std::size_t>(f0 - pre + f) * lat_plane +
              static_cast<std::size_t>(tile.ey0) * W + tile.ex0,
          sizeof(float) * W, sizeof(float) * ew, eh, cudaMemcpyDeviceToDevice, st));
  std::vector<const float*> taps;
  for (int f = 0; f < s; ++f)
    for (int dt = -2; dt <= 0; ++dt) {
      const int idx = pre + f + dt;
      taps.push_back(idx >= 0 ? lat + static_cast<std::size_t>(idx) * kVideoChannels * p0
                              : nullptr);
    }
  return taps;
}
}  // namespace

VideoDecoderGpu::VideoDecoderGpu(Ctx& ctx, const Weights& ws, const ModelConfig& c)
    : ctx_(ctx), c_(c) {
  const auto& v = c.vae_channels;
  c0_ = v[0], c1_ = v[1], c2_ = v[2], c3_ = v[3], c4_ = v[4];
  conv_in_ = dconv(ctx, ws, "vae.conv_in", false);
  r0a_ = dconv(ctx, ws, "vae.s0.res.conv1", false),
  r0b_ = dconv(ctx, ws, "vae.s0.res.conv2", false);
  tup0_ = dconv(ctx, ws, "vae.s0.tup", false), up0_ = dconv(ctx, ws, "vae.s0.up", true);
  r1a_ = dconv(ctx, ws, "vae.s1.res.conv1", false),
  r1b_ = dconv(ctx, ws, "vae.s1.res.conv2", false);
  tup1_ = dconv(ctx, ws, "vae.s1.tup", false), up1_ = dconv(ctx, ws, "vae.s1.up", true);
  r2a_ = dconv(ctx, ws, "vae.s2.res.conv1", false),
  r2b_ = dconv(ctx, ws, "vae.s2.res.conv2", false);
  up2_ = dconv(ctx, ws, "vae.s2.up", true);
  s3_ = dconv(ctx, ws, "vae.s3.conv", false), up3_ = dconv(ctx, ws, "vae.s3.up", true);
  out_ = dconv(ctx, ws, "vae.conv_out", false);
  const auto g = [&](const char* n) { return ctx.at(n).f32; };
  g0a_ = g("vae.s0.res.norm1.weight"), g0b_ = g("vae.s0.res.norm2.weight");
  gu0_ = g("vae.s0.up_norm.weight");
  g1a_ = g("vae.s1.res.norm1.weight"), g1b_ = g("vae.s1.res.norm2.weight");
  gu1_ = g("vae.s1.up_norm.weight");
  g2a_ = g("vae.s2.res.norm1.weight"), g2b_ = g("vae.s2.res.norm2.weight");
  gu2_ = g("vae.s2.up_norm.weight");
  g3_ = g("vae.s3.norm.weight"), gu3_ = g("vae.s3.up_norm.weight");
  gout_ = g("vae.out_norm.weight");
  col_ = ctx.buf<bf16>();
  tmp_ = ctx.buf<float>(), t1_ = ctx.buf<float>(), t2_ = ctx.buf<float>();
}

// conv_ops.cpp conv3x3: sub-pixel phases for the 2x-upsampling convs, the direct fp32 conv for
// the RGB head, im2col bands + GEMM otherwise.
void VideoDecoderGpu::conv3x3(const DConv& cw, const float* in, int frames, int h, int w,
                              bool upsample, float* out, bool accumulate) {
  cudaStream_t st = ctx_.stream();
  const std::size_t in_plane = static_cast<std::size_t>(h) * w;
  if (upsample && cw.phases) {
    const int k = cw.in * 4, oh = 2 * h, ow = 2 * w;
    const std::size_t out_plane = static_cast<std::size_t>(oh) * ow;
    const int rows =
        std::clamp(static_cast<int>(kDeviceColElems / (static_cast<std::size_t>(k) * w)), 1, h);
    bf16* col = col_.get(static_cast<std::size_t>(k) * rows * w);
    float* tmp = tmp_.get(static_cast<std::size_t>(cw.out) * rows * w);
    for (int f = 0; f < frames; ++f) {
      const float* src = in + f * static_cast<std::size_t>(cw.in) * in_plane;
      float* dst = out + f * static_cast<std::size_t>(cw.out) * out_plane;
      for (int r0 = 0; r0 < h; r0 += rows) {
        const int r1 = std::min(h, r0 + rows), npx = (r1 - r0) * w;
        for (int py = 0; py < 2; ++py)
          for (int px = 0; px < 2; ++px) {
            im2col_phase_bf16(st, src, cw.in, h, w, r0, r1, py, px, col);
            ctx_.gemm(false, false, cw.out, npx, k, 1.0f,
                      cw.phases + static_cast<std::size_t>(py * 2 + px) * cw.out * k, k, col, npx,
                      0.0f, tmp, npx);
            phase_scatter(st, tmp, cw.b, dst, cw.out, r0, r1, h, w, py, px, accumulate);
          }
      }
    }
    return;
  }
  if (!upsample && cw.out <= 4) {
    ctx_.flops += 2.0 * cw.out * frames * static_cast<double>(in_plane) * cw.in * 9;
    for (int f = 0; f < frames; ++f)
      conv3x3_direct(st, in + f * static_cast<std::size_t>(cw.in) * in_plane, cw.w32, cw.b, cw.in,
                     cw.out, h, w, out + f * static_cast<std::size_t>(cw.out) * in_plane,
                     accumulate);
    return;
  }
  const int oh = upsample ? 2 * h : h, ow = upsample ? 2 * w : w, k = cw.in * 9;
  const std::size_t out_plane = static_cast<std::size_t>(oh) * ow;
  const int rows =
      std::clamp(static_cast<int>(kDeviceColElems / (static_cast<std::size_t>(k) * ow)), 1, oh);
  bf16* col = col_.get(static_cast<std::size_t>(k) * rows * ow);
  for (int f = 0; f < frames; ++f) {
    Taps3 t;
    t.p[0] = in + f * static_cast<std::size_t>(cw.in) * in_plane;
    float* dst = out + f * static_cast<std::size_t>(cw.out) * out_plane;
    for (int r0 = 0; r0 < oh; r0 += rows) {
      const int r1 = std::min(oh, r0 + rows), npx = (r1 - r0) * ow;
      const std::size_t off = static_cast<std::size_t>(r0) * ow;
      im2col3x3_bf16(st, t, 1, in_plane, cw.in, h, w, upsample, r0, r1, col);
      ctx_.gemm(false, false, cw.out, npx, k, 1.0f, cw.w, k, col, npx, accumulate ? 1.0f : 0.0f,
                dst + off, static_cast<int>(out_plane));
      bias_planes(st, dst, cw.b, cw.out, out_plane, off, static_cast<std::size_t>(npx));
    }
  }
}

void VideoDecoderGpu::conv_causal(const DConv& cw, const std::vector<const float*>& taps,
                                  int frames, int h, int w, float* out) {
  cudaStream_t st = ctx_.stream();
  const int k = cw.in * 27;
  const std::size_t plane = static_cast<std::size_t>(h) * w;
  const int rows =
      std::clamp(static_cast<int>(kDeviceColElems / (static_cast<std::size_t>(k) * w)), 1, h);
  bf16* col = col_.get(static_cast<std::size_t>(k) * rows * w);
  for (int f = 0; f < frames; ++f) {
    float* dst = out + f * static_cast<std::size_t>(cw.out) * plane;
    for (int r0 = 0; r0 < h; r0 += rows) {
      const int r1 = std::min(h, r0 + rows), npx = (r1 - r0) * w;
      const std::size_t off = static_cast<std::size_t>(r0) * w;
      im2col3x3_bf16(st, taps_of(taps, f), 3, plane, cw.in * 3, h, w, false, r0, r1, col);
      ctx_.gemm(false, false, cw.out, npx, k, 1.0f, cw.w, k, col, npx, 0.0f, dst + off,
                static_cast<int>(plane));
      bias_planes(st, dst, cw.b, cw.out, plane, off, static_cast<std::size_t>(npx));
    }
  }
}

void VideoDecoderGpu::time_conv(const DConv& cw, const std::vector<const float*>& taps, int frames,
                                std::size_t px, float* out) {
  cudaStream_t st = ctx_.stream();
  const int k = cw.in * 3;
  const std::size_t band = std::clamp<std::size_t>(kDeviceColElems / k, 1, px);
  bf16* col = col_.get(static_cast<std::size_t>(k) * band);
  for (int f = 0; f < frames; ++f) {
    float* dst = out + f * static_cast<std::size_t>(cw.out) * px;
    for (std::size_t p0 = 0; p0 < px; p0 += band) {
      const std::size_t n = std::min(px, p0 + band) - p0;
      im2col_time_bf16(st, taps_of(taps, f), cw.in, px, p0, n, col);
      ctx_.gemm(false, false, cw.out, static_cast<int>(n), k, 1.0f, cw.w, k, col,
                static_cast<int>(n), 0.0f, dst + p0, static_cast<int>(px));
      bias_planes(st, dst, cw.b, cw.out, px, p0, n);
    }
  }
}

void VideoDecoderGpu::res_block(float* x, int frames, int ch, int h, int w, const float* ga,
                                const DConv& ca, const float* gb, const DConv& cb) {
  cudaStream_t st = ctx_.stream();
  const std::size_t px = static_cast<std::size_t>(h) * w, fe = px * ch;
  for (int f0 = 0; f0 < frames; f0 += kResChunk) {
    const int n = std::min(kResChunk, frames - f0);
    float* xs = x + f0 * fe;
    float* t1 = t1_.get(n * fe);
    float* t2 = t2_.get(n * fe);
    rms_norm_silu(st, xs, t1, n, ch, px, ga);
    conv3x3(ca, t1, n, h, w, false, t2, false);
    rms_norm_silu(st, t2, t1, n, ch, px, gb);
    conv3x3(cb, t1, n, h, w, false, xs, true);
  }
}

// One output frame of stage 1's output in1 (c1, h1 x w1, normalised in place): 1/4 -> 1/2 -> 1/1,
// leaving conv_out's (3, 8h1 x 8w1), before tanh, in b (vae_decoder.cpp decode_output_frame).
void VideoDecoderGpu::decode_output_frame(float* in1, int h1, int w1, float* xf, float* a,
                                          float* b) {
  cudaStream_t st = ctx_.stream();
  const int h2 = 2 * h1, w2 = 2 * w1, h3 = 2 * h2, w3 = 2 * w2, h4 = 2 * h3, w4 = 2 * w3;
  const std::size_t p1 = static_cast<std::size_t>(h1) * w1;
  const std::size_t p2 = static_cast<std::size_t>(h2) * w2, p3 = p2 * 4, p4 = p3 * 4;
  rms_norm_silu(st, in1, in1, 1, c1_, p1, gu1_);
  conv3x3(up1_, in1, 1, h1, w1, true, xf, false);
  res_block(xf, 1, c2_, h2, w2, g2a_, r2a_, g2b_, r2b_);
  rms_norm_silu(st, xf, xf, 1, c2_, p2, gu2_);
  conv3x3(up2_, xf, 1, h2, w2, true, a, false);
  rms_norm_silu(st, a, b, 1, c3_, p3, g3_);
  conv3x3(s3_, b, 1, h3, w3, false, a, true);
  rms_norm_silu(st, a, a, 1, c3_, p3, gu3_);
  conv3x3(up3_, a, 1, h3, w3, true, xf, false);
  rms_norm_silu(st, xf, xf, 1, c4_, p4, gout_);
  conv3x3(out_, xf, 1, h4, w4, false, b, false);
}

Status VideoDecoderGpu::decode(const float* video_host, const LatentDims& d, const DecodePlan& plan,
                               int frames, int out_w, int out_h, const FrameSink& sink,
                               const CancelFn& cancelled) {
  cudaStream_t st = ctx_.stream();
  const int ov = c_.overlap, bw = blend_width(ov);
  const int H = d.h, W = d.w, T = d.t;
  const bool tiled = plan.tiles > 1;

  std::deque<TileGpu> tiles;  // stable: a tile owns device buffers
  for (const TileRect& r : tile_rects(plan, H, W, ov)) tiles.emplace_back(r);

  // The latent goes up once; finished frames come down one at a time.
  Buf<float> video_b = ctx_.buf<float>();
  float* video = video_b.get(static_cast<std::size_t>(d.video_numel()));
  ctx_.to_device(video, video_host, static_cast<std::size_t>(d.video_numel()));

  const std::size_t frame_px = static_cast<std::size_t>(out_w) * out_h;
  std::vector<std::uint8_t> rgb(frame_px * 3);
  Buf<std::uint8_t> rgb_b = ctx_.buf<std::uint8_t>();
  std::uint8_t* rgb_d = rgb_b.get(frame_px * 3);
  Buf<float> acc_b = ctx_.buf<float>();
  FrameEmitter emitter(sink, frames, frame_px);

  Buf<float> lat_b = ctx_.buf<float>(), x0_b = ctx_.buf<float>(), x1_b = ctx_.buf<float>(),
             xf_b = ctx_.buf<float>(), a_b = ctx_.buf<float>(), b_b = ctx_.buf<float>(),
             y0_b = ctx_.buf<float>(), y1_b = ctx_.buf<float>();
  for (int f0 = 0; f0 < T && !emitter.done(); f0 += plan.segment_frames) {
    if (cancelled && cancelled())
      return make_error(errc::runtime::kCancelled, "decode cancelled at latent frame {}", f0);
    const int s = std::min(plan.segment_frames, T - f0);
    const bool clip_start = f0 == 0;
    const int seg_out = segment_output_frames(s, clip_start);
    float* acc = nullptr;
    if (tiled) {
      acc = acc_b.get(static_cast<std::size_t>(seg_out) * 4 * frame_px);
      ctx_.zero(acc, static_cast<std::size_t>(seg_out) * 4 * frame_px);
    }

    for (TileGpu& tile : tiles) {
      const int eh = tile.eh(), ew = tile.ew();
      const std::size_t p0 = static_cast<std::size_t>(eh) * ew;
      const int pre = std::min(2, f0);
      float* lat = lat_b.get(static_cast<std::size_t>(pre + s) * kVideoChannels * p0);
      const std::vector<const float*> taps = load_tile_latents(st, video, d, tile, f0, pre, s, lat);
      // Stage 0 at 1/16.
      float* x0 = x0_b.get(static_cast<std::size_t>(s) * c0_ * p0);
      conv_causal(conv_in_, taps, s, eh, ew, x0);
      res_block(x0, s, c0_, eh, ew, g0a_, r0a_, g0b_, r0b_);
      float* y0 = y0_b.get(static_cast<std::size_t>(s) * 2 * c0_ * p0);
      time_conv(tup0_, causal_taps(tile.cache0, x0, s, c0_ * p0), s, p0, y0);
      push_cache(ctx_, tile.cache0, x0, s, c0_ * p0);
      const int n1 = split_time(ctx_, y0, s, c0_ * p0, clip_start);
      // Stage 1 at 1/8.
      const int h1 = 2 * eh, w1 = 2 * ew;
      const std::size_t p1 = static_cast<std::size_t>(h1) * w1;
      rms_norm_silu(st, y0, y0, n1, c0_, p0, gu0_);
      float* x1 = x1_b.get(static_cast<std::size_t>(n1) * c1_ * p1);
      conv3x3(up0_, y0, n1, eh, ew, true, x1, false);
      res_block(x1, n1, c1_, h1, w1, g1a_, r1a_, g1b_, r1b_);
      float* y1 = y1_b.get(static_cast<std::size_t>(n1) * 2 * c1_ * p1);
      time_conv(tup1_, causal_taps(tile.cache1, x1, n1, c1_ * p1), n1, p1, y1);
      push_cache(ctx_, tile.cache1, x1, n1, c1_ * p1);
      const int n2 = split_time(ctx_, y1, n1, c1_ * p1, clip_start);
      // Per output frame: 1/4 -> 1/2 -> 1/1.
      const int h2 = 2 * h1, w2 = 2 * w1, h3 = 2 * h2, w3 = 2 * w2, h4 = 2 * h3, w4 = 2 * w3;
      const std::size_t p2 = static_cast<std::size_t>(h2) * w2, p3 = p2 * 4, p4 = p3 * 4;
      float* xf = xf_b.get(
          std::max(static_cast<std::size_t>(c2_) * p2, static_cast<std::size_t>(c4_) * p4));
      float* a = a_b.get(static_cast<std::size_t>(c3_) * p3);
      float* b = b_b.get(std::max(static_cast<std::size_t>(c3_) * p3, 3 * p4));
      for (int f = 0; f < n2; ++f) {
        if (cancelled && cancelled())
          return make_error(errc::runtime::kCancelled, "decode cancelled at output frame {}",
                            emitter.emitted());
        decode_output_frame(y1 + static_cast<std::size_t>(f) * c1_ * p1, h1, w1, xf, a, b);
        const int oy0 = tile.ey0 * kSpatialFactor, ox0 = tile.ex0 * kSpatialFactor;
        const int rows = std::min(h4, out_h - oy0), cols = std::min(w4, out_w - ox0);
        if (!tiled) {
          rgb_out(st, b, rows, cols, w4, p4, rgb_d, oy0, ox0, out_w);
          ctx_.to_host(rgb.data(), rgb_d, frame_px * 3);
          H3_TRY(emitter.emit(rgb.data()));
          if (emitter.done()) break;
        } else {
          blend_acc(st, b, rows, cols, w4, p4, acc + static_cast<std::size_t>(f) * 4 * frame_px,
                    frame_px, oy0, ox0, out_w, tile.y0, tile.y1, tile.x0, tile.x1, H, W, bw);
        }
      }
    }
    if (tiled) {
      for (int f = 0; f < seg_out && !emitter.done(); ++f) {
        acc_rgb(st, acc + static_cast<std::size_t>(f) * 4 * frame_px, frame_px, rgb_d);
        ctx_.to_host(rgb.data(), rgb_d, frame_px * 3);
        H3_TRY(emitter.emit(rgb.data()));
      }
    }
  }
  return emitter.finish();
}

// --- audio ---

AudioDecoderGpu::AudioDecoderGpu(Ctx& ctx, const ModelConfig& c)
    : ctx_(ctx), c_(c), col_(ctx.buf<bf16>()), z_(ctx.buf<float>()) {}

DConv AudioDecoderGpu::conv(const std::string& n, int out, int in) const {
  return DConv{ctx_.at(n + ".weight").b16, nullptr, ctx_.at(n + ".bias").f32, nullptr, out, in};
}

void AudioDecoderGpu::conv1d(const DConv& cw, int k, const float* in, int n, float* out,
                             bool accumulate) {
  const int kk = cw.in * k;
  const std::size_t band = std::max<std::size_t>(
      1, std::min<std::size_t>(kDeviceColElems / kk, static_cast<std::size_t>(n)));
  bf16* col = col_.get(static_cast<std::size_t>(kk) * band);
  for (std::size_t p0 = 0; p0 < static_cast<std::size_t>(n); p0 += band) {
    const std::size_t m = std::min<std::size_t>(n, p0 + band) - p0;
    im2col1d_bf16(ctx_.stream(), in, cw.in, n, k, p0, m, col);
    ctx_.gemm(false, false, cw.out, static_cast<int>(m), kk, 1.0f, cw.w, kk, col,
              static_cast<int>(m), accumulate ? 1.0f : 0.0f, out + p0, n);
    bias_planes(ctx_.stream(), out, cw.b, cw.out, static_cast<std::size_t>(n), p0, m);
  }
}

void AudioDecoderGpu::conv_transpose1d(const DConv& cw, int k, int stride, int pad, const float* in,
                                       int n, float* out) {
  const int rows = cw.out * k;
  bf16* inb = col_.get(static_cast<std::size_t>(cw.in) * n);
  to_bf16(ctx_.stream(), in, inb, static_cast<std::size_t>(cw.in) * n);
  float* z = z_.get(static_cast<std::size_t>(rows) * n);
  // z (rows x n) = W^T (rows x Cin) * in (Cin x n); W is (Cin, Cout*k) row-major.
  ctx_.gemm(true, false, rows, n, cw.in, 1.0f, cw.w, rows, inb, n, 0.0f, z, n);
  overlap_add(ctx_.stream(), z, cw.b, out, cw.out, k, stride, pad, n);
}

void AudioDecoderGpu::decode(const float* audio_host, int len, std::int64_t samples,
                             std::vector<float>& pcm) {
  cudaStream_t st = ctx_.stream();
  const int a0 = c_.audio_channels[0], a1 = c_.audio_channels[1], a2 = c_.audio_channels[2];
  const int n1 = len, n2 = 2 * len, n3 = kAudioHop * len;
  Buf<float> in_b = ctx_.buf<float>(), x_b = ctx_.buf<float>(), t_b = ctx_.buf<float>(),
             t2_b = ctx_.buf<float>();
  float* in = in_b.get(static_cast<std::size_t>(2 * kAudioChannels) * n1);
  ctx_.to_device(in, audio_host, static_cast<std::size_t>(2 * kAudioChannels) * n1);
  const std::size_t xs = static_cast<std::size_t>(a0) * n1;
  float* x = x_b.get(xs);
  float* t = t_b.get(xs);
  float* t2 = t2_b.get(xs);
  conv1d(conv("audio.conv_in", a0, 2 * kAudioChannels), 3, in, n1, x, false);
  ctx_.copy(t, x, xs);
  silu(st, t, xs);
  conv1d(conv("audio.res.conv1", a0, a0), 3, t, n1, t2, false);
  silu(st, t2, xs);
  conv1d(conv("audio.res.conv2", a0, a0), 3, t2, n1, x, true);
  silu(st, x, xs);

  Buf<float> y_b = ctx_.buf<float>(), zz_b = ctx_.buf<float>();
  const std::size_t ys = static_cast<std::size_t>(a1) * n2;
  float* y = y_b.get(ys);
  float* zz = zz_b.get(ys);
  conv_transpose1d(conv("audio.up1", a1, a0), 4, 2, 1, x, n1, y);
  silu(st, y, ys);
  conv1d(conv("audio.conv1", a1, a1), 3, y, n2, zz, false);
  silu(st, zz, ys);

  Buf<float> u_b = ctx_.buf<float>(), o_b = ctx_.buf<float>();
  const std::size_t us = static_cast<std::size_t>(a2) * n3;
  float* u = u_b.get(us);
  conv_transpose1d(conv("audio.up2", a2, a1), 2 * (kAudioHop / 2), kAudioHop / 2, kAudioHop / 4, zz,
                   n2, u);
  silu(st, u, us);
  float* o = o_b.get(2 * static_cast<std::size_t>(n3));
  conv1d(conv("audio.conv_out", 2, a2), 7, u, n3, o, false);

  const std::int64_t n = std::min<std::int64_t>(samples, n3);
  pcm.assign(static_cast<std::size_t>(2 * samples), 0.0f);
  float* pd = y_b.get(std::max<std::size_t>(ys, static_cast<std::size_t>(2 * n)));
  pcm_out(st, o, n3, n, pd);
  if (n > 0) ctx_.to_host(pcm.data(), pd, static_cast<std::size_t>(2 * n));
  ctx_.sync();
}

}  // namespace h3pipe::model::cuda
