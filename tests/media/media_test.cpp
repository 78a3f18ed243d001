// Mp4Writer checked by ffprobe (codec, size, exact frame count, fps, AAC stereo 48 kHz) and
// read_image on pictures made by the ffmpeg CLI.
#include "common/media/media.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using namespace h3pipe;

namespace {

using TempDir = h3pipe::test_support::TempDir;

std::string run(const std::string& cmd) {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  if (!p) return out;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p.get())) > 0) out.append(buf, n);
  return out;
}

nlohmann::json probe(const fs::path& f) {
  const std::string out = run(
      "ffprobe -v error -count_frames -show_streams -show_format -of json '" + f.string() + "'");
  return nlohmann::json::parse(out, nullptr, false);
}

void write_clip(const fs::path& out, int w, int h, int fps, int frames, bool fast = false) {
  auto wr = fast ? media::Mp4Writer::open(out, media::fast_video_params(w, h, fps),
                                          media::fast_audio_params())
                 : media::Mp4Writer::open(out, {w, h, fps}, {});
  ASSERT_TRUE(wr.ok()) << wr.error().to_string();
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w) * h * 3);
  const int audio_per_frame = 48000 / fps;
  std::vector<float> pcm(2 * static_cast<std::size_t>(audio_per_frame));
  std::int64_t t = 0;
  for (int f = 0; f < frames; ++f) {
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        auto* px = &rgb[(static_cast<std::size_t>(y) * w + x) * 3];
        px[0] = static_cast<std::uint8_t>(x + f * 4);
        px[1] = static_cast<std::uint8_t>(y * 2);
        px[2] = static_cast<std::uint8_t>(128 + f);
      }
    ASSERT_TRUE((*wr)->add_frame(rgb).ok());
    for (int i = 0; i < audio_per_frame; ++i, ++t) {
      const float s =
          0.3f * std::sin(2.0f * 3.14159265f * 440.0f * static_cast<float>(t) / 48000.0f);
      pcm[2 * i] = s;
      pcm[2 * i + 1] = -s;
    }
    // Odd chunk sizes exercise the buffering to the encoder frame size.
    ASSERT_TRUE((*wr)->add_audio({pcm.data(), pcm.size() - 2 * 7}).ok());
    ASSERT_TRUE((*wr)->add_audio({pcm.data() + pcm.size() - 2 * 7, 2 * 7}).ok());
  }
  auto st = (*wr)->finish();
  ASSERT_TRUE(st.ok()) << st.error().to_string();
  EXPECT_EQ((*wr)->frames_written(), frames);
}

}  // namespace

TEST(Mp4Writer, TwoSecondClipProbesExactly) {
  media::set_libav_log_level(16);
  TempDir dir;
  const fs::path out = dir.path() / "clip.mp4.part";
  write_clip(out, 320, 240, 24, 48);
  ASSERT_TRUE(fs::exists(out));
  const auto j = probe(out);
  ASSERT_TRUE(j.is_object()) << "ffprobe output not JSON";
  ASSERT_EQ(j["streams"].size(), 2u);
  bool saw_video = false, saw_audio = false;
  for (const auto& s : j["streams"]) {
    if (s["codec_type"] == "video") {
      saw_video = true;
      EXPECT_EQ(s["codec_name"], "h264");
      EXPECT_EQ(s["pix_fmt"], "yuv420p");
      EXPECT_EQ(s["width"], 320);
      EXPECT_EQ(s["height"], 240);
      EXPECT_EQ(s["r_frame_rate"], "24/1");
      EXPECT_EQ(s["avg_frame_rate"], "24/1");
      EXPECT_EQ(s["nb_read_frames"], "48");
      EXPECT_EQ(s["nb_frames"], "48");
    } else if (s["codec_type"] == "audio") {
      saw_audio = true;
      EXPECT_EQ(s["codec_name"], "aac");
      EXPECT_EQ(s["sample_rate"], "48000");
      EXPECT_EQ(s["channels"], 2);
      const double dur = std::stod(s["duration"].get<std::string>());
      EXPECT_NEAR(dur, 2.0, 0.05);
    }
  }
  EXPECT_TRUE(saw_video);
  EXPECT_TRUE(saw_audio);
  // faststart: the moov box comes before mdat.
  std::ifstream f(out, std::ios::binary);
  std::string head(4096, '\0');
  f.read(head.data(), static_cast<std::streamsize>(head.size()));
  const auto moov = head.find("moov");
  ASSERT_NE(moov, std::string::npos);
  const auto mdat = head.find("mdat");
  EXPECT_TRUE(mdat == std::string::npos || moov < mdat);
}

TEST(Mp4Writer, OddFrameCountAndFpsAreExact) {
  media::set_libav_log_level(16);
  TempDir dir;
  const fs::path out = dir.path() / "odd.mp4";
  write_clip(out, 64, 48, 25, 13);
  const auto j = probe(out);
  ASSERT_TRUE(j.is_object());
  for (const auto& s : j["streams"])
    if (s["codec_type"] == "video") {
      EXPECT_EQ(s["nb_read_frames"], "13");
      EXPECT_EQ(s["r_frame_rate"], "25/1");
    }
}

// The settings the sim decoder writes with (single-threaded zerolatency x264 for small frames,
// x264's own threads above; fast AAC coder): still exact frames, fps, AAC stereo 48 kHz.
TEST(Mp4Writer, FastSettingsProbeExactly) {
  media::set_libav_log_level(16);
  ASSERT_TRUE(media::warm_up().ok());
  const auto small = media::fast_video_params(64, 64, 12);
  EXPECT_EQ(small.threads, 1);
  EXPECT_EQ(small.tune, "zerolatency");
  EXPECT_EQ(media::fast_video_params(736, 416, 24).threads, 0);
  TempDir dir;
  for (auto [w, h, fps, frames] : {std::array{64, 64, 12, 9}, std::array{416, 256, 24, 30}}) {
    const fs::path out = dir.path() / fmt::format("fast_{}x{}.mp4", w, h);
    write_clip(out, w, h, fps, frames, true);
    const auto j = probe(out);
    ASSERT_TRUE(j.is_object());
    ASSERT_EQ(j["streams"].size(), 2u);
    for (const auto& s : j["streams"]) {
      if (s["codec_type"] == "video") {
        EXPECT_EQ(s["codec_name"], "h264");
        EXPECT_EQ(s["width"], w);
        EXPECT_EQ(s["height"], h);
        EXPECT_EQ(s["nb_read_frames"], std::to_string(frames));
        EXPECT_EQ(s["r_frame_rate"], fmt::format("{}/1", fps));
      } else {
        EXPECT_EQ(s["codec_name"], "aac");
        EXPECT_EQ(s["sample_rate"], "48000");
        EXPECT_EQ(s["channels"], 2);
        EXPECT_NEAR(std::stod(s["duration"].get<std::string>()), static_cast<double>(frames) / fps,
                    0.05);
      }
    }
  }
}

TEST(Mp4Writer, RejectsUnknownCoderAndTune) {
  media::set_libav_log_level(16);
  TempDir dir;
  media::AudioParams ap;
  ap.coder = "no-such-coder";
  auto a = media::Mp4Writer::open(dir.path() / "a.mp4", {64, 48, 24}, ap);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("no-such-coder"), std::string::npos);
  media::VideoParams vp{64, 48, 24};
  vp.tune = "no-such-tune";
  auto v = media::Mp4Writer::open(dir.path() / "v.mp4", vp, {});
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.error().message.find("no-such-tune"), std::string::npos);
}

TEST(Mp4Writer, RejectsBadInput) {
  media::set_libav_log_level(16);
  TempDir dir;
  auto odd = media::Mp4Writer::open(dir.path() / "x.mp4", {65, 48, 24}, {});
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.error().message.find("x.mp4"), std::string::npos);
  auto wr = media::Mp4Writer::open(dir.path() / "y.mp4", {64, 48, 24}, {});
  ASSERT_TRUE(wr.ok());
  std::vector<std::uint8_t> small(10);
  auto st = (*wr)->add_frame(small);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, "media.mp4");
  EXPECT_NE(st.error().message.find("y.mp4"), std::string::npos);
  auto nodir = media::Mp4Writer::open(dir.path() / "missing" / "z.mp4", {64, 48, 24}, {});
  ASSERT_FALSE(nodir.ok());
  EXPECT_NE(nodir.error().message.find("z.mp4"), std::string::npos);
  // An unfinished writer is destroyed without a trailer and without crashing.
}

TEST(ReadImage, PngAndJpegFromFfmpeg) {
  media::set_libav_log_level(16);
  TempDir dir;
  const fs::path png = dir.path() / "ref.png", jpg = dir.path() / "ref.jpg";
  run("ffmpeg -v error -y -f lavfi -i color=c=0xFF0000:s=40x30 -frames:v 1 '" + png.string() + "'");
  run("ffmpeg -v error -y -f lavfi -i color=c=0x0000FF:s=40x30 -frames:v 1 '" + jpg.string() + "'");
  auto img = media::read_image(png);
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  EXPECT_EQ(img->width, 40);
  EXPECT_EQ(img->height, 30);
  ASSERT_EQ(img->rgb.size(), 40u * 30u * 3u);
  EXPECT_GT(img->rgb[0], 245);
  EXPECT_LT(img->rgb[1], 10);
  EXPECT_LT(img->rgb[2], 10);
  auto j = media::read_image(jpg);
  ASSERT_TRUE(j.ok()) << j.error().to_string();
  EXPECT_EQ(j->width, 40);
  EXPECT_LT(j->rgb[0], 20);
  EXPECT_GT(j->rgb[2], 230);

  const auto r = media::resize_bilinear(*img, 8, 6);
  EXPECT_EQ(r.rgb.size(), 8u * 6u * 3u);
  EXPECT_EQ(r.rgb[0], img->rgb[0]);
}

TEST(ReadImage, ErrorsNameTheFile) {
  media::set_libav_log_level(-8);
  TempDir dir;
  auto missing = media::read_image(dir.path() / "nope.png");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, "media.image");
  EXPECT_NE(missing.error().message.find("nope.png"), std::string::npos);
  const fs::path junk = dir.path() / "junk.png";
  std::ofstream(junk) << "this is not a png";
  auto bad = media::read_image(junk);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("junk.png"), std::string::npos);
}
