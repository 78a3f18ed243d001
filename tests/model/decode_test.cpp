// Video and audio decoding: exact frame counts, streaming, exact temporal segmentation, tile
// seams within a stated tolerance, and peak memory under the budget (measured in a child).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>

#include "tests/model/test_util.h"

using namespace h3pipe;
using namespace h3pipe::model;
using h3pipe::model::testing::tiny_config;

namespace {

// A latent with structure (smooth in space and time) so decoder differences are visible.
std::vector<float> make_latent(const LatentDims& d, float phase = 0.0f) {
  std::vector<float> v(static_cast<std::size_t>(d.video_numel()));
  std::size_t i = 0;
  for (int c = 0; c < kVideoChannels; ++c)
    for (int t = 0; t < d.t; ++t)
      for (int y = 0; y < d.h; ++y)
        for (int x = 0; x < d.w; ++x)
          v[i++] = std::sin(0.7f * x + 0.3f * c + phase) * std::cos(0.5f * y - 0.2f * t) +
                   0.1f * static_cast<float>(c % 5);
  return v;
}

std::vector<std::vector<std::uint8_t>> decode_all(Model& m, const std::vector<float>& v,
                                                  const LatentDims& d, int frames, int w, int h) {
  std::vector<std::vector<std::uint8_t>> out;
  auto st = m.decode_video(v.data(), d, frames, w, h, [&](std::span<const std::uint8_t> rgb) {
    out.emplace_back(rgb.begin(), rgb.end());
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  return out;
}

}  // namespace

TEST(VideoDecode, ExactFrameCountsStreamedInOrder) {
  auto m = Model::load(tiny_config());
  ASSERT_TRUE(m.ok());
  for (int frames : {1, 5, 9, 10, 12, 13}) {
    const auto d = latent_dims(64, 48, frames, 24);
    const auto v = make_latent(d);
    const auto out = decode_all(**m, v, d, frames, 64, 48);
    ASSERT_EQ(static_cast<int>(out.size()), frames) << frames;
    for (const auto& f : out) ASSERT_EQ(f.size(), 64u * 48u * 3u);
    // 12 frames come from 3 latent frames (9 decoded): the last one repeats.
    if (frames == 12) {
      EXPECT_EQ(out[8], out[11]);
    }
  }
  const auto d = latent_dims(64, 48, 9, 24);
  const auto v = make_latent(d);
  // Not all frames the same, not a flat picture.
  const auto out = decode_all(**m, v, d, 9, 64, 48);
  EXPECT_NE(out[0], out[8]);
  EXPECT_NE(std::count(out[4].begin(), out[4].end(), out[4][0]), static_cast<long>(out[4].size()));
  // A sink error stops decoding and is returned.
  int n = 0;
  auto st =
      (*m)->decode_video(v.data(), d, 9, 64, 48, [&](std::span<const std::uint8_t>) -> Status {
        return ++n == 3 ? Status(make_error(errc::io::kWrite, "disk full")) : Status::Ok();
      });
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, "io.write");
  EXPECT_EQ(n, 3);
  EXPECT_FALSE((*m)->decode_video(v.data(), d, 9, 80, 48, [](auto) { return Status::Ok(); }).ok());
  EXPECT_FALSE((*m)->decode_video(v.data(), d, 13, 64, 48, [](auto) { return Status::Ok(); }).ok());
}

TEST(VideoDecode, TemporalSegmentsAreExact) {
  ModelConfig whole = tiny_config();
  ModelConfig seg = tiny_config();
  seg.segment_frames = 1;
  ModelConfig seg3 = tiny_config(3);
  seg3.segment_frames = 2;
  auto a = Model::load(whole), b = Model::load(seg), c = Model::load(seg3);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const auto d = latent_dims(96, 64, 21, 24);
  EXPECT_EQ((*a)->plan_decode(d, 96, 64).segment_frames, d.t);
  EXPECT_EQ((*b)->plan_decode(d, 96, 64).segment_frames, 1);
  const auto v = make_latent(d);
  const auto fa = decode_all(**a, v, d, 21, 96, 64);
  const auto fb = decode_all(**b, v, d, 21, 96, 64);
  const auto fc = decode_all(**c, v, d, 21, 96, 64);
  ASSERT_EQ(fa.size(), 21u);
  // Causal caches carry the two previous frames of every temporal layer: tolerance 0.
  EXPECT_EQ(fa, fb);
  EXPECT_EQ(fa, fc);
}

TEST(VideoDecode, TileSeamsWithinTolerance) {
  const auto d = latent_dims(256, 192, 5, 24);  // 16 x 12 latent pixels
  const auto v = make_latent(d, 0.4f);
  auto a = Model::load(tiny_config());
  ASSERT_TRUE(a.ok());
  const auto fa = decode_all(**a, v, d, 5, 256, 192);
  // overlap 8 > the receptive radius (6): exact up to float rounding.  overlap 2: approximate.
  struct Case {
    int overlap;
    double max_mean;
    int max_abs;
  };
  for (const Case& k : {Case{8, 0.05, 2}, Case{2, 16.0, 255}}) {
    ModelConfig tiled = tiny_config();
    tiled.memory_budget_mb = 1;  // forces the smallest tiles
    tiled.overlap = k.overlap;
    auto b = Model::load(tiled);
    ASSERT_TRUE(b.ok());
    const auto plan = (*b)->plan_decode(d, 256, 192);
    EXPECT_GT(plan.tiles, 1);
    const auto fb = decode_all(**b, v, d, 5, 256, 192);
    ASSERT_EQ(fb.size(), fa.size());
    double sum = 0;
    int max_diff = 0;
    std::size_t n = 0;
    for (std::size_t f = 0; f < fa.size(); ++f)
      for (std::size_t i = 0; i < fa[f].size(); ++i, ++n) {
        const int diff = std::abs(int{fa[f][i]} - int{fb[f][i]});
        sum += diff;
        max_diff = std::max(max_diff, diff);
      }
    const double mean = sum / static_cast<double>(n);
    std::printf(
        "%d tiles of %dx%d latent px, overlap %d: mean |diff| %.4f, max |diff| %d (of 255)\n",
        plan.tiles, plan.tile_w, plan.tile_h, k.overlap, mean, max_diff);
    EXPECT_LE(mean, k.max_mean) << "overlap " << k.overlap;
    EXPECT_LE(max_diff, k.max_abs) << "overlap " << k.overlap;
  }
}

TEST(AudioDecode, ExactLengthFiniteDeterministic) {
  auto m = Model::load(tiny_config());
  ASSERT_TRUE(m.ok());
  const auto d = latent_dims(64, 64, 49, 24);
  std::vector<float> a(static_cast<std::size_t>(d.audio_numel()));
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.01f * static_cast<float>(i));
  std::vector<float> p1, p2;
  const auto samples = audio_samples(49, 24);
  ASSERT_TRUE((*m)->decode_audio(a.data(), d, samples, p1).ok());
  ASSERT_TRUE((*m)->decode_audio(a.data(), d, samples, p2).ok());
  ASSERT_EQ(p1.size(), static_cast<std::size_t>(2 * samples));
  EXPECT_EQ(std::memcmp(p1.data(), p2.data(), p1.size() * 4), 0);
  float peak = 0;
  for (float s : p1) {
    ASSERT_TRUE(std::isfinite(s));
    peak = std::max(peak, std::fabs(s));
  }
  EXPECT_GT(peak, 0.001f);
  EXPECT_LE(peak, 0.25f);
  EXPECT_FALSE((*m)->decode_audio(a.data(), d, std::int64_t{d.audio_len} * kAudioHop + 1, p1).ok());
}

namespace {

struct ChildPeak {
  long base_kb = 0, peak_kb = 0;
  bool ok = false, no_reset = false;
};

// Decodes in a forked child; returns the child's RSS after loading the model and its peak RSS
// (getrusage(RUSAGE_CHILDREN) in the parent).
ChildPeak decode_in_child(const ModelConfig& c, const LatentDims& d, int frames, int w, int h) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    // The child inherits the parent's peak RSS; "5" resets it to the current RSS (Linux >= 4.0).
    FILE* cr = std::fopen("/proc/self/clear_refs", "w");
    const bool reset = cr && std::fputs("5", cr) >= 0 && std::fclose(cr) == 0;
    if (!reset) _exit(4);
    auto m = Model::load(c);
    const auto v = make_latent(d);
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    long base = ru.ru_maxrss;
    std::uint64_t sum = 0;  // frames are consumed, never kept
    const bool ok = m.ok() && (*m)->decode_video(v.data(), d, frames, w, h,
                                                 [&](std::span<const std::uint8_t> rgb) {
                                                   sum += rgb[rgb.size() / 2];
                                                   return Status::Ok();
                                                 })
                                  .ok();
    if (write(fds[1], &base, sizeof base) != sizeof base) _exit(3);
    _exit(ok ? 0 : 1);
  }
  close(fds[1]);
  ChildPeak r;
  const bool got = read(fds[0], &r.base_kb, sizeof r.base_kb) == sizeof r.base_kb;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  rusage ru{};
  getrusage(RUSAGE_CHILDREN, &ru);
  r.peak_kb = ru.ru_maxrss;
  r.ok = got && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  r.no_reset = WIFEXITED(status) && WEXITSTATUS(status) == 4;
  return r;
}

}  // namespace

TEST(VideoDecode, LongClipStaysUnderTheMemoryBudget) {
  ModelConfig c = tiny_config();
  c.vae_channels = {32, 160, 16, 8, 8};
  c.memory_budget_mb = 16;
  const int frames = 121;
  const auto d = latent_dims(128, 128, frames, 24);
  auto m = Model::load(c);
  ASSERT_TRUE(m.ok());
  const auto plan = (*m)->plan_decode(d, 128, 128);
  ModelConfig big = c;
  big.memory_budget_mb = 4096;
  auto mb = Model::load(big);
  ASSERT_TRUE(mb.ok());
  const auto whole_plan = (*mb)->plan_decode(d, 128, 128);
  const std::uint64_t budget = std::uint64_t{16} << 20;
  EXPECT_EQ(whole_plan.segment_frames, d.t);
  EXPECT_GT(whole_plan.segment_bytes, budget);  // the whole clip as one segment would not fit
  EXPECT_LT(plan.segment_frames, d.t);
  EXPECT_LE(plan.segment_bytes, budget);

  // Measured: the small-budget child first (RUSAGE_CHILDREN keeps the maximum over children).
  const ChildPeak small = decode_in_child(c, d, frames, 128, 128);
  if (small.no_reset)
    GTEST_SKIP() << "/proc/self/clear_refs not writable: cannot reset the peak RSS";
  ASSERT_TRUE(small.ok);
  const long small_mb = (small.peak_kb - small.base_kb) / 1024;
  const ChildPeak whole = decode_in_child(big, d, frames, 128, 128);
  ASSERT_TRUE(whole.ok);
  const long whole_mb = (whole.peak_kb - whole.base_kb) / 1024;
  std::printf(
      "decode peak above load: %ld MB with a 16 MB budget (%d-frame segments), %ld MB whole "
      "(estimate %.1f MB)\n",
      small_mb, plan.segment_frames, whole_mb,
      static_cast<double>(whole_plan.segment_bytes) / (1 << 20));
  EXPECT_LT(small.peak_kb - small.base_kb, 16 * 1024);
  EXPECT_GT(whole.peak_kb - whole.base_kb, 16 * 1024);
}
