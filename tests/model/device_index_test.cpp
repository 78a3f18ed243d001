// The device decoder kernels' index arithmetic (common/model/cuda/ops_index.h), run on the CPU:
// each convolution is rebuilt the way the device backend does it (cuda/decoders.cpp: col bands
// from the *_at functions, the same row-major products, bias planes, the phase scatter, the
// overlap-add) in fp32, and must equal the CPU decoder's own convolution (conv_ops.h).  What this
// cannot check is the CUDA launch itself and the bf16 rounding: that is model_gpu_test.cpp's.
#include <gtest/gtest.h>

#include <random>

#include "common/model/conv_ops.h"
#include "common/model/cuda/ops_index.h"

using namespace h3pipe::model;
using namespace h3pipe::model::cuda;

namespace {

std::vector<float> rnd(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(g);
  return v;
}

void expect_close(const std::vector<float>& want, const std::vector<float>& got, const char* what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::abs(want[i]))) << what << " at " << i;
}

struct Cpu {
  ThreadPool pool{2};
  FlopCounter fc;
  Scratch scratch;
  Exec ex() {
    scratch.per_worker.resize(static_cast<std::size_t>(pool.size()));
    return Exec{pool, fc, scratch};
  }
};

void add_bias_planes(const float* b, int cout, float* out, std::size_t plane, std::size_t off,
                     std::size_t n) {
  for (int co = 0; co < cout; ++co)
    for (std::size_t j = 0; j < n; ++j) out[co * plane + off + j] += b[co];
}

// VideoDecoderGpu::conv3x3 (im2col path) / conv_causal on one frame, `rows` output rows per band.
void emu_conv3x3(const float* w, const float* b, int cout, int cin, const float* const* frames,
                 int ntap, int h, int wd, bool up, float* out, bool acc, int rows) {
  const int oh = up ? 2 * h : h, ow = up ? 2 * wd : wd, k = cin * ntap * 9;
  const std::size_t plane = static_cast<std::size_t>(h) * wd,
                    out_plane = static_cast<std::size_t>(oh) * ow;
  for (int r0 = 0; r0 < oh; r0 += rows) {
    const int r1 = std::min(oh, r0 + rows), npx = (r1 - r0) * ow;
    std::vector<float> col(static_cast<std::size_t>(k) * npx);
    for (std::size_t i = 0; i < col.size(); ++i)
      col[i] = im2col3x3_at(frames, ntap, plane, h, wd, up, r0, static_cast<std::size_t>(npx), i);
    const std::size_t off = static_cast<std::size_t>(r0) * ow;
    sgemm(false, false, cout, npx, k, 1.0f, w, k, col.data(), npx, acc ? 1.0f : 0.0f, out + off,
          static_cast<int>(out_plane));
    add_bias_planes(b, cout, out, out_plane, off, static_cast<std::size_t>(npx));
  }
}

}  // namespace

TEST(DeviceIndex, Im2col3x3BandsMatchTheCpuConvPlainAndUpsampled) {
  Cpu cpu;
  const int cin = 5, cout = 7, h = 9, w = 11;
  const auto wt = rnd(static_cast<std::size_t>(cout) * cin * 9, 1), b = rnd(cout, 2);
  const auto in = rnd(static_cast<std::size_t>(cin) * h * w, 3);
  for (bool up : {false, true})
    for (bool acc : {false, true})
      for (int rows : {1, 4, 100}) {
        const int oh = up ? 2 * h : h, ow = up ? 2 * w : w;
        const auto init = rnd(static_cast<std::size_t>(cout) * oh * ow, 4);
        std::vector<float> want = init, got = init;
        Exec ex = cpu.ex();
        conv3x3(ex, ConvW{wt.data(), b.data(), cout, cin}, in.data(), 1, h, w, up, want.data(),
                acc);
        const float* fr[3] = {in.data(), nullptr, nullptr};
        emu_conv3x3(wt.data(), b.data(), cout, cin, fr, 1, h, w, up, got.data(), acc, rows);
        expect_close(want, got, up ? "upsampled conv3x3" : "conv3x3");
      }
}

TEST(DeviceIndex, SubpixelPhasesAndTheirScatterMatchTheCpuUpsamplingConv) {
  Cpu cpu;
  const int cin = 4, cout = 6, h = 7, w = 10;
  const auto wt = rnd(static_cast<std::size_t>(cout) * cin * 9, 5), b = rnd(cout, 6);
  const auto in = rnd(static_cast<std::size_t>(cin) * h * w, 7);
  const auto phases = subpixel_weights(wt.data(), cout, cin);
  for (bool acc : {false, true})
    for (int rows : {1, 3, 100}) {
      const auto init = rnd(static_cast<std::size_t>(cout) * 4 * h * w, 8);
      std::vector<float> want = init, got = init;
      Exec ex = cpu.ex();
      ConvW cw{wt.data(), b.data(), cout, cin, phases.data()};
      conv3x3(ex, cw, in.data(), 1, h, w, true, want.data(), acc);
      const int k = cin * 4;
      for (int r0 = 0; r0 < h; r0 += rows) {
        const int r1 = std::min(h, r0 + rows);
        const std::size_t npx = static_cast<std::size_t>(r1 - r0) * w;
        std::vector<float> col(k * npx), tmp(cout * npx);
        for (int py = 0; py < 2; ++py)
          for (int px = 0; px < 2; ++px) {
            for (std::size_t i = 0; i < col.size(); ++i)
              col[i] = im2col_phase_at(in.data(), h, w, r0, py, px, npx, i);
            sgemm(false, false, cout, static_cast<int>(npx), k, 1.0f,
                  phases.data() + static_cast<std::size_t>(py * 2 + px) * cout * k, k, col.data(),
                  static_cast<int>(npx), 0.0f, tmp.data(), static_cast<int>(npx));
            for (std::size_t i = 0; i < tmp.size(); ++i) {
              int co = 0;
              float& o = got[phase_scatter_at(h, w, r0, py, px, npx, i, &co)];
              const float v = tmp[i] + b[co];
              o = acc ? o + v : v;
            }
          }
      }
      expect_close(want, got, "phase conv");
    }
}

TEST(DeviceIndex, CausalTapsOfThe3dConvMatchTheCpu) {
  Cpu cpu;
  const int cin = 3, cout = 4, h = 6, w = 8, frames = 3;
  const std::size_t fe = static_cast<std::size_t>(cin) * h * w;
  const auto wt = rnd(static_cast<std::size_t>(cout) * cin * 27, 9), b = rnd(cout, 10);
  const auto lat = rnd(fe * (frames + 2), 11);
  std::vector<const float*> taps;
  for (int f = 0; f < frames; ++f)
    for (int dt = -2; dt <= 0; ++dt) {
      const int idx = f + dt + 1;  // one cached frame before the first: frame -1 is absent
      taps.push_back(idx >= 1 ? lat.data() + static_cast<std::size_t>(idx) * fe : nullptr);
    }
  std::vector<float> want(static_cast<std::size_t>(frames) * cout * h * w), got(want.size());
  Exec ex = cpu.ex();
  conv3x3x3_causal(ex, ConvW{wt.data(), b.data(), cout, cin}, taps, frames, h, w, want.data());
  for (int f = 0; f < frames; ++f) {
    const float* fr[3] = {taps[f * 3], taps[f * 3 + 1], taps[f * 3 + 2]};
    emu_conv3x3(wt.data(), b.data(), cout, cin, fr, 3, h, w, false,
                got.data() + static_cast<std::size_t>(f) * cout * h * w, false, 2);
  }
  expect_close(want, got, "causal 3x3x3");
}

TEST(DeviceIndex, TimeConvConv1dAndTransposedConvMatchTheCpu) {
  Cpu cpu;
  {  // time_conv3
    const int cin = 4, cout = 6, frames = 2;
    const std::size_t px = 37;
    const auto wt = rnd(static_cast<std::size_t>(cout) * cin * 3, 12), b = rnd(cout, 13);
    const auto x = rnd(px * cin * 3, 14);
    std::vector<const float*> taps = {nullptr,
                                      x.data(),
                                      x.data() + px * cin,
                                      x.data(),
                                      x.data() + px * cin,
                                      x.data() + 2 * px * cin};
    std::vector<float> want(frames * cout * px), got(want.size());
    Exec ex = cpu.ex();
    time_conv3(ex, ConvW{wt.data(), b.data(), cout, cin}, taps, frames, px, want.data());
    const int k = cin * 3;
    for (int f = 0; f < frames; ++f)
      for (std::size_t p0 = 0; p0 < px; p0 += 16) {  // bands of 16 pixels
        const std::size_t n = std::min<std::size_t>(px, p0 + 16) - p0;
        std::vector<float> col(k * n);
        const float* fr[3] = {taps[f * 3], taps[f * 3 + 1], taps[f * 3 + 2]};
        for (std::size_t i = 0; i < col.size(); ++i) col[i] = im2col_time_at(fr, px, p0, n, i);
        float* dst = got.data() + f * cout * px;
        sgemm(false, false, cout, static_cast<int>(n), k, 1.0f, wt.data(), k, col.data(),
              static_cast<int>(n), 0.0f, dst + p0, static_cast<int>(px));
        add_bias_planes(b.data(), cout, dst, px, p0, n);
      }
    expect_close(want, got, "time_conv3");
  }
  {  // conv1d, k = 7, in bands
    const int cin = 3, cout = 5, n = 50, k = 7;
    const auto wt = rnd(static_cast<std::size_t>(cout) * cin * k, 15), b = rnd(cout, 16);
    const auto x = rnd(static_cast<std::size_t>(cin) * n, 17);
    for (bool acc : {false, true}) {
      const auto init = rnd(static_cast<std::size_t>(cout) * n, 18);
      std::vector<float> want = init, got = init;
      Exec ex = cpu.ex();
      conv1d(ex, ConvW{wt.data(), b.data(), cout, cin}, k, x.data(), n, want.data(), acc);
      const int kk = cin * k;
      for (std::size_t p0 = 0; p0 < static_cast<std::size_t>(n); p0 += 13) {
        const std::size_t m = std::min<std::size_t>(n, p0 + 13) - p0;
        std::vector<float> col(kk * m);
        for (std::size_t i = 0; i < col.size(); ++i) col[i] = im2col1d_at(x.data(), n, k, p0, m, i);
        sgemm(false, false, cout, static_cast<int>(m), kk, 1.0f, wt.data(), kk, col.data(),
              static_cast<int>(m), acc ? 1.0f : 0.0f, got.data() + p0, n);
        add_bias_planes(b.data(), cout, got.data(), n, p0, m);
      }
      expect_close(want, got, "conv1d");
    }
  }
  {  // conv_transpose1d with the audio decoder's two geometries
    struct G {
      int k, stride, pad;
    };
    for (const G g : {G{4, 2, 1}, G{86, 43, 21}}) {
      const int cin = 3, cout = 2, n = 9, rows = cout * g.k;
      const auto wt = rnd(static_cast<std::size_t>(cin) * rows, 19), b = rnd(cout, 20);
      const auto x = rnd(static_cast<std::size_t>(cin) * n, 21);
      std::vector<float> want(static_cast<std::size_t>(cout) * n * g.stride), got(want.size());
      Exec ex = cpu.ex();
      conv_transpose1d(ex, ConvW{wt.data(), b.data(), cout, cin}, g.k, g.stride, g.pad, x.data(), n,
                       want.data());
      std::vector<float> z(static_cast<std::size_t>(rows) * n);
      sgemm(true, false, rows, n, cin, 1.0f, wt.data(), rows, x.data(), n, 0.0f, z.data(), n);
      for (std::size_t i = 0; i < got.size(); ++i)
        got[i] = overlap_add_at(z.data(), b.data(), g.k, g.stride, g.pad, n, i);
      expect_close(want, got, "conv_transpose1d");
    }
  }
}

TEST(DeviceIndex, PatchifyFollowsTheSamplersLayoutAndTheEulerUpdateIsItsInverse) {
  for (int p : {1, 2, 4}) {
    const int T = 3, H = 5, W = 7;  // not multiples of p: padded tokens
    const int hp = (H + p - 1) / p, wp = (W + p - 1) / p, vf = kVideoChannels * p * p;
    const std::size_t hw = static_cast<std::size_t>(H) * W, thw = hw * T;
    // dit.cpp's patchify loop, transcribed: feature order (c, py, px) per token (t, y, x).
    std::vector<long long> want;
    for (int t = 0; t < T; ++t)
      for (int y = 0; y < hp; ++y)
        for (int xx = 0; xx < wp; ++xx)
          for (int c = 0; c < kVideoChannels; ++c)
            for (int py = 0; py < p; ++py)
              for (int px = 0; px < p; ++px) {
                const int yy = y * p + py, xs = xx * p + px;
                want.push_back((yy < H && xs < W)
                                   ? static_cast<long long>(c * thw + t * hw +
                                                            static_cast<std::size_t>(yy) * W + xs)
                                   : -1);
              }
    ASSERT_EQ(want.size(), static_cast<std::size_t>(T) * hp * wp * vf);
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(patchify_video_src(T, H, W, p, i), want[i]) << "p=" << p << " i=" << i;
    for (std::size_t i = 0; i < kVideoChannels * thw; ++i)
      ASSERT_EQ(patchify_video_src(T, H, W, p, euler_video_src(T, H, W, p, i)),
                static_cast<long long>(i));
  }
  const int L = 10, ap = 4, na = (L + ap - 1) / ap;
  std::vector<long long> want;
  for (int tok = 0; tok < na; ++tok)
    for (int cs = 0; cs < kAudioChannels * 2; ++cs)
      for (int j = 0; j < ap; ++j) {
        const int l = tok * ap + j;
        want.push_back(l < L ? static_cast<long long>(cs) * L + l : -1);
      }
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(patchify_audio_src(L, ap, i), want[i]);
  for (std::size_t i = 0; i < static_cast<std::size_t>(kAudioChannels) * 2 * L; ++i)
    ASSERT_EQ(patchify_audio_src(L, ap, euler_audio_src(L, ap, i)), static_cast<long long>(i));
}
