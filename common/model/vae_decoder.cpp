// Streaming causal video decoder.  Latent frames are decoded in segments; causality (every
// temporal kernel looks only at the current and two previous frames) lets each segment carry
// the last two frames of each temporal layer's input forward, so temporal segmentation is exact
// (the same bytes as one pass).  Frames too large for the budget are cut into spatial tiles: each
// tile is decoded with `overlap` latent pixels of context on every side and blended with its
// neighbours by linear ramps.  The decoder's receptive radius is under kReceptiveRadius latent
// pixels, so with overlap > kReceptiveRadius every blended pixel is computed with its whole
// receptive field inside the tile: tiled output equals untiled output up to float rounding.
//
// Per latent frame: conv_in (causal 3x3x3, 24 -> c0) -> res(c0) -> tup (causal time conv,
// 1 frame -> 2) -> up (nearest 2x + 3x3 -> c1) -> res(c1) -> tup -> up (c2) ; then per output
// frame: res(c2) -> up (c3) -> res-lite(c3) -> up (c4) -> norm+silu -> conv_out (3) -> tanh.
#include <algorithm>
#include <cmath>
#include <deque>

#include "common/model/conv_ops.h"
#include "common/model/decode_layout.h"
#include "common/model/networks.h"

namespace h3pipe::model {

namespace {
ConvW conv_w(const Weights& ws, const std::string& n, int out, int in) {
  return {ws.at(n + ".weight"), ws.at(n + ".bias"), out, in};
}
}  // namespace

struct VideoDecoder::Impl {
  const ModelConfig& c;
  int c0, c1, c2, c3, c4;
  ConvW conv_in, r0a, r0b, tup0, up0, r1a, r1b, tup1, up1, r2a, r2b, up2, s3, up3, out;
  std::deque<std::vector<float>>
      phases;  // sub-pixel kernels of the upsampling convs (stable addresses)
  const float *g0a, *g0b, *gu0, *g1a, *g1b, *gu1, *g2a, *g2b, *gu2, *g3, *gu3, *gout;

  Impl(const Weights& ws, const ModelConfig& cfg) : c(cfg) {
    const auto& v = cfg.vae_channels;
    c0 = v[0], c1 = v[1], c2 = v[2], c3 = v[3], c4 = v[4];
    conv_in = conv_w(ws, "vae.conv_in", c0, kVideoChannels);
    r0a = conv_w(ws, "vae.s0.res.conv1", c0, c0), r0b = conv_w(ws, "vae.s0.res.conv2", c0, c0);
    tup0 = conv_w(ws, "vae.s0.tup", 2 * c0, c0), up0 = conv_w(ws, "vae.s0.up", c1, c0);
    r1a = conv_w(ws, "vae.s1.res.conv1", c1, c1), r1b = conv_w(ws, "vae.s1.res.conv2", c1, c1);
    tup1 = conv_w(ws, "vae.s1.tup", 2 * c1, c1), up1 = conv_w(ws, "vae.s1.up", c2, c1);
    r2a = conv_w(ws, "vae.s2.res.conv1", c2, c2), r2b = conv_w(ws, "vae.s2.res.conv2", c2, c2);
    up2 = conv_w(ws, "vae.s2.up", c3, c2);
    s3 = conv_w(ws, "vae.s3.conv", c3, c3), up3 = conv_w(ws, "vae.s3.up", c4, c3);
    out = conv_w(ws, "vae.conv_out", 3, c4);
    for (ConvW* u : {&up0, &up1, &up2, &up3}) {
      phases.push_back(subpixel_weights(u->w, u->out, u->in));
      u->phases = phases.back().data();
    }
    g0a = ws.at("vae.s0.res.norm1.weight"), g0b = ws.at("vae.s0.res.norm2.weight");
    gu0 = ws.at("vae.s0.up_norm.weight");
    g1a = ws.at("vae.s1.res.norm1.weight"), g1b = ws.at("vae.s1.res.norm2.weight");
    gu1 = ws.at("vae.s1.up_norm.weight");
    g2a = ws.at("vae.s2.res.norm1.weight"), g2b = ws.at("vae.s2.res.norm2.weight");
    gu2 = ws.at("vae.s2.up_norm.weight");
    g3 = ws.at("vae.s3.norm.weight"), gu3 = ws.at("vae.s3.up_norm.weight");
    gout = ws.at("vae.out_norm.weight");
  }

  // Working set (bytes) of decoding segments of s latent frames over an eh x ew latent region
  // (a tile with its overlap), `tiles` tiles: the buffers decode() keeps across segments, the
  // causal caches, one im2col band per worker and the frame accumulator.
  std::uint64_t segment_bytes(int s, int eh, int ew, int tiles, int threads, int out_w,
                              int out_h) const {
    const double p0 = static_cast<double>(eh) * ew, p1 = 4 * p0, p2 = 16 * p0, p3 = 64 * p0,
                 p4 = 256 * p0;
    const double n1 = 2.0 * s, n2 = 4.0 * s, r = std::min(s, kResChunk);
    double floats = (s + 2.0) * kVideoChannels * p0  // latent slice with two causal frames
                    + s * c0 * p0                    // x0
                    + 2.0 * s * c0 * p0              // tup0 output (becomes the 1/8 stage input)
                    + n1 * c1 * p1                   // x1
                    + 2.0 * n1 * c1 * p1;            // tup1 output (n2 frames of c1)
    (void)n2;
    floats += 2.0 * std::max({r * c0 * p0, 2 * r * c1 * p1, c2 * p2});  // res-block temporaries
    floats += std::max(c2 * p2, c4 * p4) + c3 * p3 + std::max(c3 * p3, 3 * p4);  // per-frame chain
    floats += tiles * 2.0 * (c0 * p0 + c1 * p1);                                 // causal caches
    // Per worker: the largest im2col band, and as much again for OpenBLAS's packed copy of it.
    double bytes = 4.0 * floats + static_cast<double>(threads) * 2.0 * col_bytes(eh, ew);
    const double frame_px = static_cast<double>(out_w) * out_h;
    const bool tiled = tiles > 1;
    bytes += tiled ? 4.0 * 4 * n2 * frame_px + 6.0 * frame_px : 6.0 * frame_px;  // accumulator, rgb
    return static_cast<std::uint64_t>(bytes);
  }

  // Largest per-worker im2col buffer over the layers (conv_ops.cpp sizing rules).
  double col_bytes(int eh, int ew) const {
    const auto conv = [](int k, int ow, int oh) { return 1.0 * k * band_rows(k, ow, oh) * ow; };
    const auto up = [](int cin, int cout, int w, int h) {
      return 1.0 * (4 * cin + cout) * band_rows(4 * cin, w, h) * w + w + 2;
    };
    const auto time = [](int k, double px) { return k * std::min<double>(px, time_band(k)); };
    const double p0 = static_cast<double>(eh) * ew;
    const double floats = std::max(
        {conv(27 * kVideoChannels, ew, eh), conv(9 * c0, ew, eh), time(3 * c0, p0),
         up(c0, c1, ew, eh), conv(9 * c1, 2 * ew, 2 * eh), time(3 * c1, 4 * p0),
         up(c1, c2, 2 * ew, 2 * eh), conv(9 * c2, 4 * ew, 4 * eh), up(c2, c3, 4 * ew, 4 * eh),
         conv(9 * c3, 8 * ew, 8 * eh), up(c3, c4, 8 * ew, 8 * eh)});
    return 4.0 * (floats + 16 * ew + 2);
  }

  // Working set of a naive decoder that runs every stage on the whole clip at once.
  std::uint64_t whole_bytes(const LatentDims& d) const {
    const double p0 = static_cast<double>(d.h) * d.w;
    const double t = d.t, f2 = 2.0 * t - 1, f4 = 4.0 * t - 3;
    const double peak =
        std::max({3.0 * c0 * p0 * t + 2 * c0 * p0 * t, 3.0 * c1 * 4 * p0 * f2,
                  3.0 * c2 * 16 * p0 * f4, 2.0 * c3 * 64 * p0 * f4 + c4 * 256 * p0 * f4,
                  2.0 * c4 * 256 * p0 * f4 + 3 * 256 * p0 * f4});
    return static_cast<std::uint64_t>(4.0 * peak);
  }
};

VideoDecoder::VideoDecoder(const Weights& ws, const ModelConfig& c)
    : impl_(std::make_unique<Impl>(ws, c)) {}
VideoDecoder::~VideoDecoder() = default;

// The device backend's fixed workspaces (cuda/networks.h kDeviceColElems): the bf16 im2col band,
// the phase product of the same size in fp32, and cuBLASLt's 64 MiB.
constexpr std::uint64_t kDeviceWorkspaceBytes = (64ull + 128 + 64) << 20;

DecodePlan VideoDecoder::plan(const LatentDims& d, bool device) const {
  const Impl& im = *impl_;
  const ModelConfig& c = im.c;
  DecodePlan p;
  const std::uint64_t budget = static_cast<std::uint64_t>(c.memory_budget_mb) << 20;
  int s = c.segment_frames > 0 ? std::min(c.segment_frames, d.t) : d.t;
  int th = d.h, tw = d.w;
  const int ov = c.overlap;
  const int min_tile = std::max(4, 2 * blend_width(ov));
  const auto est = [&](int seg, int h, int w) {
    const int tiles = ((d.h + h - 1) / h) * ((d.w + w - 1) / w);
    const int eh = tiles > 1 ? std::min(d.h, h + 2 * ov) : d.h,
              ew = tiles > 1 ? std::min(d.w, w + 2 * ov) : d.w;
    if (device)
      return im.segment_bytes(seg, eh, ew, tiles, 0, d.w * kSpatialFactor, d.h * kSpatialFactor) +
             kDeviceWorkspaceBytes + static_cast<std::uint64_t>(4 * d.video_numel());
    return im.segment_bytes(seg, eh, ew, tiles, c.threads, d.w * kSpatialFactor,
                            d.h * kSpatialFactor);
  };
  while (est(s, th, tw) > budget) {
    if (s > 1)
      s = (s + 1) / 2;
    else if (std::max(th, tw) > min_tile)
      (th >= tw ? th : tw) = std::max(min_tile, (std::max(th, tw) + 1) / 2);
    else
      break;  // smallest cut; decode anyway and report the estimate
  }
  p.segment_frames = std::max(1, s);
  p.tile_h = th;
  p.tile_w = tw;
  p.tiles = ((d.h + th - 1) / th) * ((d.w + tw - 1) / tw);
  p.segment_bytes = est(p.segment_frames, th, tw);
  p.whole_bytes = im.whole_bytes(d);
  return p;
}

namespace {

// One spatial tile's region and causal state.
struct Tile : TileRect {
  explicit Tile(const TileRect& r) : TileRect(r) {}
  std::deque<std::vector<float>> cache0, cache1;  // last inputs of tup0 / tup1 (<= 2 frames)
};

// Blend weight of output pixel coordinate v for a tile whose core is [a, b) latent pixels in an
// image of n latent pixels: a linear ramp across the 2*bw*16 pixels around each seam, so
// neighbouring weights sum to 1; bw = 0 is a hard cut at the core.
float ramp(int v, int a, int b, int n, int bw) {
  constexpr int S = kSpatialFactor;
  if (bw == 0) return (v >= a * S && v < b * S) ? 1.0f : 0.0f;
  const float span = static_cast<float>(2 * bw * S);
  float w = 1.0f;
  if (a > 0) w = std::min(w, (static_cast<float>(v - (a - bw) * S) + 0.5f) / span);
  if (b < n) w = std::min(w, (static_cast<float>((b + bw) * S - v) - 0.5f) / span);
  return std::clamp(w, 0.0f, 1.0f);
}

void push_cache(std::deque<std::vector<float>>& cache, const float* cur, int frames,
                std::size_t elems) {
  for (int f = std::max(0, frames - 2); f < frames; ++f) {
    cache.emplace_back(cur + f * elems, cur + (f + 1) * elems);
    if (cache.size() > 2) cache.pop_front();
  }
}

// Residual block in place on x (frames, ch, h, w), kResChunk frames at a time.
void res_block(Exec& ex, float* x, std::vector<float>& t1, std::vector<float>& t2, int frames,
               int ch, int h, int w, const float* ga, const ConvW& ca, const float* gb,
               const ConvW& cb) {
  const std::size_t px = static_cast<std::size_t>(h) * w, fe = px * ch;
  for (int f0 = 0; f0 < frames; f0 += kResChunk) {
    const int n = std::min(kResChunk, frames - f0);
    float* xs = x + f0 * fe;
    t1.resize(std::max(t1.size(), n * fe));
    t2.resize(std::max(t2.size(), n * fe));
    rms_norm_silu(ex, xs, t1.data(), n, ch, px, ga);
    conv3x3(ex, ca, t1.data(), n, h, w, false, t2.data(), false);
    rms_norm_silu(ex, t2.data(), t1.data(), n, ch, px, gb);
    conv3x3(ex, cb, t1.data(), n, h, w, false, xs, true);
  }
}

// The temporal upsampler's output (frames, 2*ch, px) read as 2*frames frames of (ch, px): frame
// 0 of the clip keeps only its first half.  Drops that half in place; returns the frame count.
int split_time(std::vector<float>& tup, int frames, std::size_t frame_elems, bool clip_start) {
  if (!clip_start) return 2 * frames;
  std::copy(tup.begin() + static_cast<std::ptrdiff_t>(2 * frame_elems),
            tup.begin() + static_cast<std::ptrdiff_t>(2 * frames * frame_elems),
            tup.begin() + static_cast<std::ptrdiff_t>(frame_elems));
  return 2 * frames - 1;
}

// The buffers of one decode() call: they only grow, and are kept across segments and tiles.
struct DecodeBuffers {
  std::vector<float> lat, x0, t1, t2, x1, xf, a, b, y0, y1;
};

// Latent frames f0 .. f0+s-1 of the tile's region through stage 0 (1/16), stage 1 (1/8) and both
// temporal upsamplers, carrying the tile's causal caches forward: leaves the returned number of
// frames of (c1, 2eh x 2ew) in buf.y1.
int decode_latent_stages(Exec& ex, const VideoDecoder::Impl& im, const float* video,
                         const LatentDims& d, int f0, int s, bool clip_start, Tile& tile,
                         DecodeBuffers& buf) {
  const int W = d.w;
  const std::size_t lat_plane = static_cast<std::size_t>(d.h) * W, lat_thw = lat_plane * d.t;
  const int eh = tile.eh(), ew = tile.ew();
  const std::size_t p0 = static_cast<std::size_t>(eh) * ew;
  // Latent frames f0-2 .. f0+s-1 of this region (the causal conv_in reads two back).
  const int pre = std::min(2, f0);
  std::vector<float>& lat = buf.lat;
  lat.assign(static_cast<std::size_t>(pre + s) * kVideoChannels * p0, 0.0f);
  for (int f = 0; f < pre + s; ++f)
    for (int ch = 0; ch < kVideoChannels; ++ch)
      for (int y = 0; y < eh; ++y)
        std::copy_n(video + ch * lat_thw + static_cast<std::size_t>(f0 - pre + f) * lat_plane +
                        static_cast<std::size_t>(tile.ey0 + y) * W + tile.ex0,
                    ew,
                    lat.data() + (static_cast<std::size_t>(f) * kVideoChannels + ch) * p0 +
                        static_cast<std::size_t>(y) * ew);
  std::vector<const float*> taps;
  for (int f = 0; f < s; ++f)
    for (int dt = -2; dt <= 0; ++dt) {
      const int idx = pre + f + dt;
      taps.push_back(idx >= 0 ? lat.data() + static_cast<std::size_t>(idx) * kVideoChannels * p0
                              : nullptr);
    }
  std::vector<float>&x0 = buf.x0, &x1 = buf.x1, &y0 = buf.y0, &y1 = buf.y1, &t1 = buf.t1,
  &t2 = buf.t2;
  // Stage 0 at 1/16.
  x0.resize(std::max(x0.size(), static_cast<std::size_t>(s) * im.c0 * p0));
  conv3x3x3_causal(ex, im.conv_in, taps, s, eh, ew, x0.data());
  res_block(ex, x0.data(), t1, t2, s, im.c0, eh, ew, im.g0a, im.r0a, im.g0b, im.r0b);
  y0.resize(std::max(y0.size(), static_cast<std::size_t>(s) * 2 * im.c0 * p0));
  time_conv3(ex, im.tup0, causal_taps(tile.cache0, x0.data(), s, im.c0 * p0), s, p0, y0.data());
  push_cache(tile.cache0, x0.data(), s, im.c0 * p0);
  const int n1 = split_time(y0, s, im.c0 * p0, clip_start);
  // Stage 1 at 1/8.
  const int h1 = 2 * eh, w1 = 2 * ew;
  const std::size_t p1 = static_cast<std::size_t>(h1) * w1;
  rms_norm_silu(ex, y0.data(), y0.data(), n1, im.c0, p0, im.gu0);
  x1.resize(std::max(x1.size(), static_cast<std::size_t>(n1) * im.c1 * p1));
  conv3x3(ex, im.up0, y0.data(), n1, eh, ew, true, x1.data(), false);
  res_block(ex, x1.data(), t1, t2, n1, im.c1, h1, w1, im.g1a, im.r1a, im.g1b, im.r1b);
  y1.resize(std::max(y1.size(), static_cast<std::size_t>(n1) * 2 * im.c1 * p1));
  time_conv3(ex, im.tup1, causal_taps(tile.cache1, x1.data(), n1, im.c1 * p1), n1, p1, y1.data());
  push_cache(tile.cache1, x1.data(), n1, im.c1 * p1);
  // Frame 0 of the clip is the first output of both temporal upsamplers.
  return split_time(y1, n1, im.c1 * p1, clip_start);
}

// One output frame of stage 1's output in1 (c1, h1 x w1, normalised in place): 1/4 -> 1/2 -> 1/1,
// leaving conv_out's (3, 8h1 x 8w1), before tanh, in buf.b.
void decode_output_frame(Exec& ex, const VideoDecoder::Impl& im, float* in1, int h1, int w1,
                         DecodeBuffers& buf) {
  const int h2 = 2 * h1, w2 = 2 * w1, h3 = 2 * h2, w3 = 2 * w2, h4 = 2 * h3, w4 = 2 * w3;
  const std::size_t p1 = static_cast<std::size_t>(h1) * w1;
  const std::size_t p2 = static_cast<std::size_t>(h2) * w2, p3 = p2 * 4, p4 = p3 * 4;
  std::vector<float>&xf = buf.xf, &a = buf.a, &b = buf.b, &t1 = buf.t1, &t2 = buf.t2;
  rms_norm_silu(ex, in1, in1, 1, im.c1, p1, im.gu1);
  xf.resize(std::max(xf.size(), static_cast<std::size_t>(im.c2) * p2));
  conv3x3(ex, im.up1, in1, 1, h1, w1, true, xf.data(), false);
  res_block(ex, xf.data(), t1, t2, 1, im.c2, h2, w2, im.g2a, im.r2a, im.g2b, im.r2b);
  rms_norm_silu(ex, xf.data(), xf.data(), 1, im.c2, p2, im.gu2);
  a.resize(std::max(a.size(), static_cast<std::size_t>(im.c3) * p3));
  conv3x3(ex, im.up2, xf.data(), 1, h2, w2, true, a.data(), false);
  b.resize(std::max(b.size(), static_cast<std::size_t>(im.c3) * p3));
  rms_norm_silu(ex, a.data(), b.data(), 1, im.c3, p3, im.g3);
  conv3x3(ex, im.s3, b.data(), 1, h3, w3, false, a.data(), true);
  rms_norm_silu(ex, a.data(), a.data(), 1, im.c3, p3, im.gu3);
  xf.resize(std::max(xf.size(), static_cast<std::size_t>(im.c4) * p4));
  conv3x3(ex, im.up3, a.data(), 1, h3, w3, true, xf.data(), false);
  rms_norm_silu(ex, xf.data(), xf.data(), 1, im.c4, p4, im.gout);
  b.resize(std::max(b.size(), 3 * p4));
  conv3x3(ex, im.out, xf.data(), 1, h4, w4, false, b.data(), false);
}

// Where a tile's decoded frame (3, h4 x w4) lands in the output frame (cropped to out_w x out_h).
struct TileOut {
  int oy0, ox0, rows, cols, w4;
  std::size_t p4;
};

// Untiled: tanh of the tile's rgb -> 8-bit rgb of the output frame.
void store_rgb(const float* b, const TileOut& to, int out_w, std::uint8_t* rgb) {
  const int oy0 = to.oy0, ox0 = to.ox0, rows = to.rows, cols = to.cols, w4 = to.w4;
  const std::size_t p4 = to.p4;
  for (int y = 0; y < rows; ++y)
    for (int x = 0; x < cols; ++x)
      for (int ch = 0; ch < 3; ++ch) {
        const float v = b[ch * p4 + static_cast<std::size_t>(y) * w4 + x];
        const float t = 1.0f - 2.0f / (fast_exp(2.0f * v) + 1.0f);
        rgb[(static_cast<std::size_t>(oy0 + y) * out_w + ox0 + x) * 3 + ch] =
            static_cast<std::uint8_t>(std::lround(std::clamp((t + 1.0f) * 127.5f, 0.0f, 255.0f)));
      }
}

// Tiled: adds the tile's tanh rgb, weighted by its blend ramps, and the weight to fa (4, frame).
void accumulate_tile(const float* b, const TileOut& to, const Tile& tile, int out_w, int H, int W,
                     int bw, std::size_t frame_px, float* fa) {
  const int oy0 = to.oy0, ox0 = to.ox0, rows = to.rows, cols = to.cols, w4 = to.w4;
  const std::size_t p4 = to.p4;
  for (int y = 0; y < rows; ++y) {
    const float wy = ramp(oy0 + y, tile.y0, tile.y1, H, bw);
    for (int x = 0; x < cols; ++x) {
      const float wgt = wy * ramp(ox0 + x, tile.x0, tile.x1, W, bw);
      if (wgt <= 0.0f) continue;
      const std::size_t o = static_cast<std::size_t>(oy0 + y) * out_w + ox0 + x;
      for (int ch = 0; ch < 3; ++ch) {
        const float v = b[ch * p4 + static_cast<std::size_t>(y) * w4 + x];
        fa[ch * frame_px + o] += wgt * (1.0f - 2.0f / (fast_exp(2.0f * v) + 1.0f));
      }
      fa[3 * frame_px + o] += wgt;
    }
  }
}

// Tiled: the segment's blended frames (weighted sums over weights) as 8-bit rgb, emitted in order.
Status emit_blended(const std::vector<float>& acc, int seg_out, std::size_t frame_px,
                    std::vector<std::uint8_t>& rgb, FrameEmitter& emitter) {
  for (int f = 0; f < seg_out && !emitter.done(); ++f) {
    const float* fa = acc.data() + static_cast<std::size_t>(f) * 4 * frame_px;
    for (std::size_t o = 0; o < frame_px; ++o) {
      const float wsum = fa[3 * frame_px + o];
      for (int ch = 0; ch < 3; ++ch) {
        const float t = wsum > 0 ? fa[ch * frame_px + o] / wsum : 0.0f;
        rgb[o * 3 + ch] =
            static_cast<std::uint8_t>(std::lround(std::clamp((t + 1.0f) * 127.5f, 0.0f, 255.0f)));
      }
    }
    H3_TRY(emitter.emit(rgb.data()));
  }
  return Status::Ok();
}

}  // namespace

Status VideoDecoder::decode(Exec& ex, const float* video, const LatentDims& d,
                            const DecodePlan& plan, int frames, int out_w, int out_h,
                            const FrameSink& sink, const CancelFn& cancelled) const {
  const Impl& im = *impl_;
  const int ov = im.c.overlap, bw = blend_width(ov);
  const int H = d.h, W = d.w, T = d.t;
  const bool tiled = plan.tiles > 1;

  std::vector<Tile> tiles;
  for (const TileRect& r : tile_rects(plan, H, W, ov)) tiles.emplace_back(r);

  const std::size_t frame_px = static_cast<std::size_t>(out_w) * out_h;
  std::vector<std::uint8_t> rgb(frame_px * 3);
  std::vector<float> acc;  // tiled: (frames, 4, out_h, out_w) weighted rgb + weight
  FrameEmitter emitter(sink, frames, frame_px);

  DecodeBuffers buf;
  for (int f0 = 0; f0 < T && !emitter.done(); f0 += plan.segment_frames) {
    if (cancelled && cancelled())
      return make_error(errc::runtime::kCancelled, "decode cancelled at latent frame {}", f0);
    const int s = std::min(plan.segment_frames, T - f0);
    const bool clip_start = f0 == 0;
    const int seg_out = segment_output_frames(s, clip_start);
    if (tiled) acc.assign(static_cast<std::size_t>(seg_out) * 4 * frame_px, 0.0f);

    for (Tile& tile : tiles) {
      const int n2 = decode_latent_stages(ex, im, video, d, f0, s, clip_start, tile, buf);
      const int h1 = 2 * tile.eh(), w1 = 2 * tile.ew(), h4 = 8 * h1, w4 = 8 * w1;
      const std::size_t p1 = static_cast<std::size_t>(h1) * w1,
                        p4 = static_cast<std::size_t>(h4) * w4;
      // RGB of the tile's extended region -> output frame (crop to out_w x out_h).
      const int oy0 = tile.ey0 * kSpatialFactor, ox0 = tile.ex0 * kSpatialFactor;
      const TileOut to{oy0, ox0, std::min(h4, out_h - oy0), std::min(w4, out_w - ox0), w4, p4};
      for (int f = 0; f < n2; ++f) {
        if (cancelled && cancelled())
          return make_error(errc::runtime::kCancelled, "decode cancelled at output frame {}",
                            emitter.emitted());
        decode_output_frame(ex, im, buf.y1.data() + static_cast<std::size_t>(f) * im.c1 * p1, h1,
                            w1, buf);
        if (!tiled) {
          store_rgb(buf.b.data(), to, out_w, rgb.data());
          H3_TRY(emitter.emit(rgb.data()));
          if (emitter.done()) break;
        } else {
          accumulate_tile(buf.b.data(), to, tile, out_w, H, W, bw, frame_px,
                          acc.data() + static_cast<std::size_t>(f) * 4 * frame_px);
        }
      }
    }
    if (tiled) H3_TRY(emit_blended(acc, seg_out, frame_px, rgb, emitter));
  }
  return emitter.finish();
}

}  // namespace h3pipe::model
