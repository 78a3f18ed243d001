// The built-in minimax-h3 profile against ComfyUI's own rules (comfy_extras/nodes_minimax_h3.py,
// written again below in C++ the way ComfyUI computes them, float round included), the table's
// one reader (latent_profiles.json, also a config's latent_profiles) and the sizes the planner
// moves between hosts.
#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>

#include "common/config/config.h"
#include "common/latent/latent.h"
#include "common/latent/profile_json.h"

namespace h3pipe::latent {
namespace {

// ComfyUI: align_frame_count, video_latent_t, temporal_shape (Python's round of a float: to
// nearest, halves to even, which std::nearbyint does in the default rounding mode).
std::uint32_t comfy_align(std::uint32_t n) {
  while (n % 17 != 5) ++n;
  return n;
}
std::uint64_t comfy_latent_t(std::uint32_t f) {
  return f <= 5 ? 2 : ((f - 5) / 17) * 5 + 2;
}
std::uint64_t comfy_audio_t(std::uint32_t f) {
  const double duration = static_cast<double>(f) / 24;
  return static_cast<std::uint64_t>(std::nearbyint(duration * 40));
}

const LatentProfile& h3() {
  const LatentProfile* p = find_builtin_profile("minimax-h3");
  EXPECT_NE(p, nullptr);
  return *p;
}

TEST(MiniMaxH3Profile, IsBuiltInAndLast) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  const auto& all = builtin_profiles();
  ASSERT_EQ(all.size(), 8u);
  EXPECT_EQ(all.front().name, "builtin");
  EXPECT_EQ(all.back().name, "minimax-h3");
  const LatentProfile& p = h3();
  EXPECT_EQ(p.channels, 24u);
  EXPECT_EQ(p.spatial_factor, 16u);
  EXPECT_EQ(p.size_multiple, 32u);
  EXPECT_EQ(p.fps, 24u);
  EXPECT_EQ(p.audio.rounding, Rounding::kNearest);
  EXPECT_EQ(named_audio_rule("minimax-h3"), p.audio);
}

// Every on-grid frame count up to 3600 (the nodes' max), four sizes: the same shapes as ComfyUI.
TEST(MiniMaxH3Profile, ShapesEqualComfyUIsOnTheWholeGrid) {
  const std::pair<std::uint32_t, std::uint32_t> sizes[] = {
      {736, 416}, {416, 736}, {1344, 768}, {512, 512}};
  int checked = 0;
  for (auto [w, h] : sizes) {
    for (std::uint32_t f = 5; f <= 3600; f += 17) {
      const JobSize job{w, h, f, 24};
      ASSERT_TRUE(job_fits(h3(), job).empty()) << to_string(job);
      const Geometry g = expected_geometry(h3(), job);
      const Geometry comfy{{1, 24, comfy_latent_t(f), h / 16u, w / 16u},
                           {1, 32, 2, comfy_audio_t(f)}};
      ASSERT_EQ(g, comfy) << to_string(job);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4 * 212);
  // The lengths where ceil and ComfyUI's round differ (the old declared rule refused these).
  EXPECT_EQ(expected_geometry(h3(), {736, 416, 107, 24}).audio[3], 178u);
  EXPECT_EQ(expected_geometry(h3(), {736, 416, 362, 24}).audio[3], 603u);
}

// Off the grid: refused at submission with the rule and the count ComfyUI would snap it up to.
TEST(MiniMaxH3Profile, OffGridFramesNameTheNextValidCount) {
  for (std::uint32_t f = 1; f <= 600; ++f) {
    auto issues = job_fits(h3(), {736, 416, f, 24});
    if (f >= 5 && f % 17 == 5) {
      EXPECT_TRUE(issues.empty()) << f;
      continue;
    }
    ASSERT_EQ(issues.size(), 1u) << f;
    EXPECT_EQ(issues[0].field, "frames");
    EXPECT_EQ(next_valid_frames(h3(), f), comfy_align(std::max(5u, f))) << f;
    if (f >= 5)
      EXPECT_EQ(issues[0].reason,
                fmt::format("profile minimax-h3 needs 17k+5 frames (e.g. {}), got {}",
                            comfy_align(f), f));
    else
      EXPECT_EQ(issues[0].reason,
                fmt::format("profile minimax-h3 needs at least 5 frames, got {}", f));
  }
}

TEST(MiniMaxH3Profile, SizesAndFrameRateRules) {
  auto w = job_fits(h3(), {720, 416, 124, 24});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].field, "width");
  EXPECT_EQ(w[0].reason,
            "720 is not a multiple of 32 (latent profile minimax-h3, spatial factor 16)");
  auto fps = job_fits(h3(), {736, 416, 124, 25});
  ASSERT_EQ(fps.size(), 1u);
  EXPECT_EQ(fps[0].field, "fps");
  EXPECT_EQ(fps[0].reason, "profile minimax-h3 makes 24 fps only, got 25");
}

// What crosses hosts (docs/comfyui.md): f32 video + audio.
TEST(MiniMaxH3Profile, HandOffSizes) {
  EXPECT_EQ(latent_bytes(h3(), {736, 416, 124, 24}), 4'301'184u);    // 4.30 MB, the seeds' 4.3 MB
  EXPECT_EQ(latent_bytes(h3(), {1344, 768, 124, 24}), 14'374'656u);  // 14.4 MB
  EXPECT_EQ(latent_bytes(h3(), {1344, 768, 362, 24}), 41'571'072u);  // 41.6 MB
}

// A latent of ComfyUI's shapes reads back as the job's; one audio step off does not.
TEST(MiniMaxH3Profile, ReadersAcceptComfyUIsShapesOnly) {
  const JobSize job{736, 416, 124, 24};
  Latent l = make_latent(h3(), job);
  l.layout = "av_nested";
  const Expected want{h3(), job};
  auto ok = parse_latent(serialize(l), &want);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->geometry.audio, (std::vector<std::uint64_t>{1, 32, 2, 207}));

  Latent off = l;
  off.geometry.audio[3] = 208;
  off.audio.assign(off.geometry.audio_elems(), 0.0f);
  auto bad = parse_latent(serialize(off), &want);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("profile minimax-h3 expects (1, 32, 2, 207)"),
            std::string::npos)
      << bad.error().message;
}

TEST(AudioRounding, NearestHalvesToEvenAndCeilRoundsUp) {
  AudioRule half{{1, AudioRule::kLength}, 1, 2, Rounding::kNearest, 0};  // L = F / fps / 2
  EXPECT_EQ(audio_length(half, 1, 1), 0u);                               // 0.5 -> 0
  EXPECT_EQ(audio_length(half, 3, 1), 2u);                               // 1.5 -> 2
  EXPECT_EQ(audio_length(half, 5, 1), 2u);                               // 2.5 -> 2
  EXPECT_EQ(audio_length(half, 4, 1), 2u);
  AudioRule up = half;
  up.rounding = Rounding::kCeil;
  EXPECT_EQ(audio_length(up, 1, 1), 1u);
  EXPECT_EQ(audio_length(up, 5, 1), 3u);
  EXPECT_EQ(audio_length(up, 4, 1), 2u);
  EXPECT_EQ(audio_length(up, 4, 0), 0u);
}

// One reader for the table and for configs: what profile_to_json writes reads back equal.
TEST(ProfileJson, EveryBuiltInRoundTrips) {
  for (const auto& p : builtin_profiles()) {
    config::Errors e;
    LatentProfile back;
    back.name = p.name;
    read_profile(profile_to_json(p), "/p", back, e, /*allow_named_audio=*/false);  // a table entry
    EXPECT_TRUE(e.empty()) << p.name << ": " << e.joined();
    EXPECT_EQ(back, p) << p.name;
  }
}

// The smallest cluster config parse() accepts, with `extra` merged in.
nlohmann::json cluster_with(const char* extra) {
  auto j = nlohmann::json::parse(R"({"hosts": [{"name": "local"}], "pools": [
      {"name": "s", "host": "local", "stage": "sample"}, {"name": "d", "host": "local", "stage": "decode"},
      {"name": "e", "host": "local", "stage": "encode"}]})");
  j.update(nlohmann::json::parse(extra));
  return j;
}

TEST(ProfileJson, AConfigDeclaresARoundingAndAFrameRate) {
  auto c = config::parse(cluster_with(R"({
    "latent_profile": "h3x",
    "latent_profiles": {"h3x": {"channels": 24, "temporal_factor": 17, "frame_offset": 5,
      "temporal_steps": 5, "latent_offset": 2, "spatial_factor": 16, "size_multiple": 32, "fps": 24,
      "audio": {"shape": [1, 32, 2, "L"], "rate": [40, 1], "rounding": "nearest"}}}})"),
                         "/tmp");
  ASSERT_TRUE(c.ok()) << c.error().message;
  LatentProfile declared = *c->find_latent_profile("h3x");
  declared.name = "minimax-h3";
  declared.models = h3().models;
  EXPECT_EQ(declared, h3());

  auto bad = config::parse(cluster_with(R"({
    "latent_profiles": {"h3x": {"channels": 24, "temporal_factor": 17, "spatial_factor": 16,
      "fps": 2000, "audio": {"shape": [1, "L"], "rate": [40, 1], "rounding": "half-up"}}}})"),
                           "/tmp");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find(
                "/latent_profiles/h3x/audio/rounding: \"half-up\": expected ceil or nearest"),
            std::string::npos)
      << bad.error().message;
  EXPECT_NE(bad.error().message.find("/latent_profiles/h3x/fps"), std::string::npos)
      << bad.error().message;
  // A config may not redeclare the built-in one (it would shadow ComfyUI's rules).
  auto shadow = config::parse(
      cluster_with(
          R"({"latent_profiles": {"minimax-h3": {"channels": 24, "temporal_factor": 17, "spatial_factor": 16}}})"),
      "/tmp");
  ASSERT_FALSE(shadow.ok());
  EXPECT_NE(shadow.error().message.find("\"minimax-h3\" is a built-in profile"), std::string::npos);
}

}  // namespace
}  // namespace h3pipe::latent
