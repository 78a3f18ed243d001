// The comparison's measurements on movies written here with h3pipe's own MP4 writer: FFmpeg's
// psnr/ssim per frame (infinite for the same file, finite for a changed one), MAE, black and
// saturated frames, audio SNR; the decoder precision option's rounding.  Label: unit.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>

#include "common/compare/frames.h"
#include "common/compare/quality.h"
#include "common/media/media.h"
#include "common/model/precision.h"
#include "tests/support/temp_dir.h"

using namespace h3pipe;
using namespace h3pipe::compare;
namespace fs = std::filesystem;

namespace {

constexpr int kW = 64, kH = 48, kFrames = 9;

// A moving gradient; `black` / `white` frame indices replaced; `noise` adds a small pattern.
fs::path movie(const fs::path& dir, const std::string& name, int black = -1, int white = -1,
               int noise = 0, float audio_gain = 1.0f) {
  const fs::path p = dir / name;
  media::VideoParams vp{kW, kH, 12};
  vp.crf = 18;
  auto w = media::Mp4Writer::open(p, vp, media::AudioParams{});
  EXPECT_TRUE(w.ok()) << w.error().message;
  std::vector<std::uint8_t> rgb(kW * kH * 3);
  for (int f = 0; f < kFrames; ++f) {
    for (int y = 0; y < kH; ++y)
      for (int x = 0; x < kW; ++x)
        for (int c = 0; c < 3; ++c) {
          int v = 40 + ((x * 3 + y * 2 + f * 7 + c * 50) % 160);
          if (noise && ((x + y + c) % 3 == 0)) v += noise;
          rgb[(y * kW + x) * 3 + c] = static_cast<std::uint8_t>(v);
        }
    if (f == black) std::fill(rgb.begin(), rgb.end(), 0);
    if (f == white) std::fill(rgb.begin(), rgb.end(), 255);
    EXPECT_TRUE((*w)->add_frame(rgb).ok());
  }
  std::vector<float> pcm(48000 * kFrames / 12 * 2);
  for (std::size_t i = 0; i < pcm.size(); ++i) pcm[i] = audio_gain * 0.3f * std::sin(0.01f * i);
  EXPECT_TRUE((*w)->add_audio(pcm).ok());
  EXPECT_TRUE((*w)->finish().ok());
  return p;
}

}  // namespace

TEST(CompareQuality, SameFileIsInfinitePsnrAndSsimOne) {
  test_support::TempDir d;
  const auto a = movie(d.path(), "a.mp4");
  auto f = psnr_ssim(a, a);
  ASSERT_TRUE(f.ok()) << f.error().message;
  ASSERT_EQ(f->size(), static_cast<std::size_t>(kFrames));
  for (const auto& fr : *f) {
    EXPECT_EQ(fr.mse, 0);
    EXPECT_TRUE(std::isinf(fr.psnr_db));
    EXPECT_DOUBLE_EQ(fr.ssim, 1.0);
  }
  auto p = pixel_compare(a, a);
  ASSERT_TRUE(p.ok());
  const Summary s = summarize(*f, *p);
  EXPECT_TRUE(s.identical);
  EXPECT_TRUE(std::isinf(s.psnr_db));
  EXPECT_EQ(s.worst_frame, -1);
  EXPECT_EQ(s.mae, 0);
  EXPECT_TRUE(s.black_frames.empty());
  EXPECT_TRUE(s.saturated_frames.empty());
  auto pcm = read_audio(a);
  ASSERT_TRUE(pcm.ok());
  EXPECT_EQ(pcm->channels, 2);
  auto ad = audio_diff(*pcm, *pcm);
  ASSERT_TRUE(ad.has_value());
  EXPECT_TRUE(std::isinf(ad->snr_db));
  EXPECT_EQ(ad->max_abs, 0);
}

TEST(CompareQuality, ChangedFramesAreFoundAndMeasured) {
  test_support::TempDir d;
  const auto ref = movie(d.path(), "ref.mp4");
  const auto noisy = movie(d.path(), "noisy.mp4", -1, -1, 6, 0.9f);
  const auto planted = movie(d.path(), "planted.mp4", 2, 6);
  auto f = psnr_ssim(ref, noisy);
  ASSERT_TRUE(f.ok()) << f.error().message;
  auto p = pixel_compare(ref, noisy);
  ASSERT_TRUE(p.ok()) << p.error().message;
  const Summary s = summarize(*f, *p);
  EXPECT_FALSE(s.identical);
  EXPECT_TRUE(std::isfinite(s.psnr_db));
  EXPECT_GT(s.psnr_db, 25);  // +6 on a third of the values: MSE about 12, PSNR about 37 dB
  EXPECT_LT(s.psnr_db, 50);
  EXPECT_GT(s.mae, 0.5);
  EXPECT_LT(s.mae, 5);
  EXPECT_LT(s.ssim_mean, 1.0);
  EXPECT_GT(s.ssim_mean, 0.8);
  EXPECT_GE(s.worst_frame, 0);
  auto ra = read_audio(ref), na = read_audio(noisy);
  ASSERT_TRUE(ra.ok() && na.ok());
  auto ad = audio_diff(*ra, *na);
  ASSERT_TRUE(ad.has_value());
  EXPECT_NEAR(ad->snr_db, 20.0, 1.5);  // gain 0.9: error 0.1 of the signal
  EXPECT_GT(ad->max_abs, 0.02);

  auto fp = psnr_ssim(ref, planted);
  ASSERT_TRUE(fp.ok());
  auto pp = pixel_compare(ref, planted);
  ASSERT_TRUE(pp.ok());
  const Summary sp = summarize(*fp, *pp);
  EXPECT_EQ(sp.black_frames, std::vector<long long>{2});
  EXPECT_EQ(sp.saturated_frames, std::vector<long long>{6});
  EXPECT_TRUE(sp.worst_frame == 2 || sp.worst_frame == 6) << sp.worst_frame;
  EXPECT_LT(sp.psnr_min_db, 12);
  EXPECT_EQ(s.black_frames.size() + s.saturated_frames.size(), 0u);
}

TEST(CompareQuality, DifferentSizesAreAMismatch) {
  test_support::TempDir d;
  const auto a = movie(d.path(), "a.mp4");
  const fs::path b = d.path() / "b.mp4";
  auto w = media::Mp4Writer::open(b, media::VideoParams{32, 32, 12}, media::AudioParams{});
  ASSERT_TRUE(w.ok());
  std::vector<std::uint8_t> rgb(32 * 32 * 3, 100);
  ASSERT_TRUE((*w)->add_frame(rgb).ok());
  ASSERT_TRUE((*w)->finish().ok());
  auto f = psnr_ssim(a, b);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code, errc::compare::kMismatch.id);
  EXPECT_NE(f.error().message.find("32x32"), std::string::npos) << f.error().message;
}

TEST(CompareQuality, PngOfAFrameDecodesBack) {
  test_support::TempDir d;
  const auto a = movie(d.path(), "a.mp4");
  int w = 0, h = 0;
  auto rgb = read_frame(a, 4, &w, &h);
  ASSERT_TRUE(rgb.ok()) << rgb.error().message;
  EXPECT_EQ(w, kW);
  EXPECT_EQ(h, kH);
  auto png = encode_png(w, h, *rgb);
  ASSERT_TRUE(png.ok());
  EXPECT_EQ(png->substr(1, 3), "PNG");
  EXPECT_FALSE(read_frame(a, kFrames, nullptr, nullptr).ok()) << "no frame past the end";
}

TEST(DecoderPrecision, RoundingIsThePrecisionsOwn) {
  EXPECT_EQ(model::round_bf16(1.0f), 1.0f);
  EXPECT_EQ(model::round_bf16(1.0f + 1.0f / 512), 1.0f) << "ties to even at bf16's 2^-7 spacing";
  EXPECT_EQ(model::round_fp16(1.0f + 1.0f / 4096), 1.0f);
  EXPECT_EQ(model::round_fp16(1.0f + 1.0f / 1024), 1.0f + 1.0f / 1024);
  EXPECT_TRUE(std::isinf(model::round_fp16(70000.0f))) << "beyond half's range";
  EXPECT_EQ(model::round_fp16(0.1f), 0.0999755859375f);
  EXPECT_TRUE(model::known_precision("int8"));
  EXPECT_FALSE(model::known_precision("fp8"));
  auto bad = model::parse_config(nlohmann::json{{"decoder_precision", "fp8"}}, "/s");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("/s/decoder_precision"), std::string::npos)
      << bad.error().message;
}

// The audio's log-spectral distance (quality.h): the ideal 0 for the same PCM, |20 log10 g| for a
// gain g everywhere, tens of dB for a moved tone; and, the case the SNR cannot judge, two
// different waveforms of the same noise spectrum (what AAC makes of the builtin model's noise-like
// audio after any change) are close in LSD while their SNR is about 0 dB.
namespace {
Pcm tone(double hz, double gain, int rate = 48000, double seconds = 2.0) {
  Pcm p;
  p.channels = 2;
  p.sample_rate = rate;
  const auto n = static_cast<std::size_t>(rate * seconds);
  for (std::size_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(gain * 0.3 * std::sin(2 * std::numbers::pi * hz * i / rate));
    p.samples.push_back(v);
    p.samples.push_back(v);
  }
  return p;
}
Pcm noise(unsigned seed, double gain = 1.0, int rate = 48000, double seconds = 2.0) {
  Pcm p;
  p.channels = 1;
  p.sample_rate = rate;
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.1f);
  for (std::size_t i = 0; i < static_cast<std::size_t>(rate * seconds); ++i)
    p.samples.push_back(static_cast<float>(gain) * g(rng));
  return p;
}
}  // namespace

TEST(CompareAudio, LogSpectralDistanceIsZeroForTheSamePcm) {
  for (const Pcm& p : {tone(440, 1), noise(1)}) {
    auto d = audio_diff(p, p);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->lsd_db, 0.0);
    EXPECT_TRUE(std::isinf(d->snr_db));
  }
}

TEST(CompareAudio, LogSpectralDistanceMeasuresWhatChanged) {
  // A gain of 0.5 everywhere: every band 6.02 dB down.
  auto half = audio_diff(noise(1), noise(1, 0.5));
  ASSERT_TRUE(half.has_value());
  EXPECT_NEAR(half->lsd_db, 20 * std::log10(2.0), 0.01);
  // Another noise waveform of the same spectrum: the SNR says "unrelated", the LSD "close".
  auto other = audio_diff(noise(1), noise(2));
  ASSERT_TRUE(other.has_value());
  EXPECT_LT(other->snr_db, 1.0);
  EXPECT_LT(other->lsd_db, 1.5) << "same spectral envelope";
  EXPECT_GT(other->lsd_db, 0.0);
  // A tone moved from 440 Hz to 1 kHz: the spectrum is another one.
  auto moved = audio_diff(tone(440, 1), tone(1000, 1));
  ASSERT_TRUE(moved.has_value());
  EXPECT_GT(moved->lsd_db, 15.0);
  // Through the MP4 writer's AAC: the 0.9 gain of the test movie is 0.92 dB in every band.
  test_support::TempDir d;
  auto ra = read_audio(movie(d.path(), "ref.mp4")),
       na = read_audio(movie(d.path(), "quiet.mp4", -1, -1, 0, 0.9f));
  ASSERT_TRUE(ra.ok() && na.ok());
  auto aac = audio_diff(*ra, *na);
  ASSERT_TRUE(aac.has_value());
  EXPECT_GT(aac->lsd_db, 0.2);
  EXPECT_LT(aac->lsd_db, 6.0);
}
