// Latent profiles in the cluster config and at submission (docs/latent.md, docs/config.md): the
// cluster's latent_profile, declared latent_profiles (validated with JSON paths), a job class's
// profile and a job's params["latent_profile"]; spec validation of width, height and frames
// against the job's profile; the planner's transfer sizes from the profile.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/config/config.h"
#include "common/dispatch/geometry.h"
#include "common/spec/spec.h"
#include "tests/support/cluster.h"

namespace h3pipe {
namespace {

nlohmann::json base_config() {
  return nlohmann::json::parse(R"({
    "hosts": [{"name": "local"}],
    "pools": [
      {"name": "sampler0", "host": "local", "stage": "sample"},
      {"name": "decoder", "host": "local", "stage": "decode"},
      {"name": "encoder", "host": "local", "stage": "encode"}
    ],
    "classes": [
      {"name": "wan480", "width": 832, "height": 480, "frames": 81, "latent_profile": "wan2.1"},
      {"name": "demo", "width": 256, "height": 256, "frames": 49}
    ]
  })");
}

config::Cluster load(const nlohmann::json& j) {
  return test_support::cluster_from(j, "/tmp");
}

std::string load_error(const nlohmann::json& j) {
  auto c = config::parse(j, "/tmp");
  return c.ok() ? "ok" : c.error().message;
}

pb::JobSpec job(std::uint32_t w, std::uint32_t h, std::uint32_t frames,
                const std::string& profile = "") {
  pb::JobSpec s;
  s.set_job_id("j1");
  s.set_prompt("a cat");
  s.set_width(w);
  s.set_height(h);
  s.set_frames(frames);
  s.set_fps(16);
  s.set_steps(4);
  if (!profile.empty()) (*s.mutable_params())["latent_profile"] = profile;
  return s;
}

std::vector<std::string> errors(const pb::JobSpec& s, const config::Cluster& c) {
  std::vector<std::string> out;
  for (const auto& e : spec::validate(s, c)) out.push_back(e.to_string());
  return out;
}

TEST(LatentProfileConfig, DefaultsAndResolutionOrder) {
  auto c = load(base_config());
  EXPECT_EQ(c.latent_profile, "builtin");
  // No class profile, no param: the cluster's.
  EXPECT_EQ(spec::latent_profile(job(256, 256, 49), c)->name, "builtin");
  // The class (matched by size) says wan2.1.
  EXPECT_EQ(spec::latent_profile(job(832, 480, 81), c)->name, "wan2.1");
  // A class named in the spec.
  auto named = job(256, 256, 49);
  named.set_job_class("wan480");
  EXPECT_EQ(spec::latent_profile(named, c)->name, "wan2.1");
  // The job's own param wins over the class.
  EXPECT_EQ(spec::latent_profile(job(832, 480, 81, "hunyuanvideo"), c)->name, "hunyuanvideo");
  auto j = base_config();
  j["latent_profile"] = "ltxv";
  auto l = load(j);
  EXPECT_EQ(spec::latent_profile(job(256, 256, 49), l)->name, "ltxv");
  auto unknown = spec::latent_profile(job(256, 256, 49, "sdxl"), c);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, "config.latent_profile");
  EXPECT_NE(unknown.error().message.find("params.latent_profile: unknown latent profile \"sdxl\""),
            std::string::npos)
      << unknown.error().message;
  auto want = spec::expected_latent(job(832, 480, 81), c);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(want->profile.channels, 16u);
  EXPECT_EQ(want->job, (latent::JobSize{832, 480, 81, 16}));
}

TEST(LatentProfileConfig, DeclaredProfiles) {
  auto j = base_config();
  j["latent_profiles"] = nlohmann::json::parse(R"({
    "cosmos": {"channels": 16, "temporal_factor": 8, "spatial_factor": 8, "size_multiple": 16},
    "avmodel": {"channels": 32, "temporal_factor": 4, "spatial_factor": 16, "frame_rule": "floor",
                "audio": {"shape": [1, 4, "L"], "rate": [50, 1], "tolerance": 2}},
    "likebuiltin": {"channels": 24, "temporal_factor": 4, "spatial_factor": 16, "audio": "builtin"}
  })");
  j["latent_profile"] = "cosmos";
  auto c = load(j);
  ASSERT_EQ(c.latent_profiles.size(), 3u);
  const auto& cosmos = c.latent_profiles.at("cosmos");
  EXPECT_EQ(cosmos.name, "cosmos");
  EXPECT_EQ(cosmos.frame_rule, latent::FrameRule::kStrict);
  EXPECT_FALSE(cosmos.has_audio());
  const auto& av = c.latent_profiles.at("avmodel");
  EXPECT_EQ(av.frame_rule, latent::FrameRule::kFloor);
  EXPECT_EQ(av.size_multiple, 16u) << "defaults to the spatial factor";
  EXPECT_EQ(av.audio.shape, (std::vector<std::int64_t>{1, 4, latent::AudioRule::kLength}));
  EXPECT_EQ(av.audio.tolerance, 2u);
  EXPECT_EQ(c.latent_profiles.at("likebuiltin").audio, latent::builtin_profile().audio);
  EXPECT_EQ(spec::latent_profile(job(256, 256, 49), c)->name, "cosmos");
  EXPECT_EQ(latent::expected_geometry(av, {64, 32, 10, 25}),
            (latent::Geometry{{1, 32, 3, 2, 4}, {1, 4, 20}}));
  EXPECT_NE(c.latent_profile_names().find("wan2.1, "), std::string::npos);
  EXPECT_NE(c.latent_profile_names().find("cosmos"), std::string::npos);
}

TEST(LatentProfileConfig, ErrorsNameTheJsonPath) {
  auto j = base_config();
  j["latent_profile"] = "nope";
  EXPECT_NE(load_error(j).find(
                "/latent_profile: unknown latent profile \"nope\" (known: builtin, wan2.1"),
            std::string::npos)
      << load_error(j);
  j = base_config();
  j["classes"][1]["latent_profile"] = "wan3";
  EXPECT_NE(load_error(j).find("/classes/1/latent_profile: unknown latent profile \"wan3\""),
            std::string::npos)
      << load_error(j);
  j = base_config();
  j["latent_profiles"] = nlohmann::json::parse(R"({
    "wan2.1": {"channels": 16, "temporal_factor": 4, "spatial_factor": 8},
    "a": {"temporal_factor": 0, "spatial_factor": 8, "color": 1},
    "b": {"channels": 4, "temporal_factor": 4, "spatial_factor": 8, "size_multiple": 12},
    "c": {"channels": 4, "temporal_factor": 4, "spatial_factor": 8, "frame_rule": "4k+1"},
    "d": {"channels": 4, "temporal_factor": 4, "spatial_factor": 8, "audio": {"shape": [1, 2], "rate": [1, 1]}},
    "e": {"channels": 4, "temporal_factor": 4, "spatial_factor": 8, "audio": {"shape": [1, "L", "L"], "rate": [0, 1]}},
    "f": {"channels": 4, "temporal_factor": 4, "spatial_factor": 8, "audio": "stereo"},
    "g": {"channels": 4, "temporal_factor": 4, "spatial_factor": 8, "audio": {"shape": [1, -3, "L"], "rate": [1, 1]}},
    "bad name": {"channels": 4, "temporal_factor": 4, "spatial_factor": 8}
  })");
  const std::string e = load_error(j);
  for (const char* want :
       {"/latent_profiles/wan2.1: \"wan2.1\" is a built-in profile",
        "/latent_profiles/a/channels: required but missing",
        "/latent_profiles/a/temporal_factor: 0 is out of range [1, 1024]",
        "/latent_profiles/a/color: unknown key",
        "/latent_profiles/b: size_multiple 12 must be a positive multiple of spatial_factor 8",
        "/latent_profiles/c/frame_rule: \"4k+1\": expected strict",
        "/latent_profiles/d: audio shape must have exactly one \"L\" axis, it has 0",
        "/latent_profiles/e: audio shape must have exactly one \"L\" axis, it has 2",
        "/latent_profiles/g/audio/shape/1: expected a size in [1, 65536] or \"L\"",
        "/latent_profiles/e/audio/rate: expected [per_second, divisor]",
        "/latent_profiles/f/audio: \"stereo\": expected none, builtin, ltx2, minimax-h3 or an "
        "object",
        "/latent_profiles/bad name"}) {
    EXPECT_NE(e.find(want), std::string::npos) << "missing: " << want << "\nin:\n" << e;
  }
}

TEST(LatentProfileSpec, FramesAndSizeCheckedAgainstTheJobsProfile) {
  auto c = load(base_config());
  // wan2.1 by the job's param: 4k+1 frames, multiples of 16.
  auto e = errors(job(832, 480, 80, "wan2.1"), c);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0], "frames: profile wan2.1 needs 4k+1 frames (e.g. 81), got 80");
  EXPECT_TRUE(errors(job(832, 480, 81, "wan2.1"), c).empty());
  // wan2.2-5b: multiples of 32.
  e = errors(job(848, 480, 81, "wan2.2-5b"), c);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("width: 848 is not a multiple of 32 (latent profile wan2.2-5b"),
            std::string::npos)
      << e[0];
  // ltxv: 8k+1.
  e = errors(job(768, 512, 96, "ltxv"), c);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0], "frames: profile ltxv needs 8k+1 frames (e.g. 97), got 96");
  // The builtin profile takes any frame count, multiples of 16 (the message the CLI prints).
  EXPECT_TRUE(errors(job(256, 256, 48), c).empty());
  e = errors(job(100, 256, 48), c);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("width: 100 is not a multiple of 16"), std::string::npos) << e[0];
  // Unknown profile: the field and the known names.
  e = errors(job(256, 256, 49, "sdxl"), c);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("params.latent_profile: unknown latent profile \"sdxl\" (known: builtin"),
            std::string::npos)
      << e[0];
  // The class's profile applies to a job matched by size: 832x480x81 fits wan2.1.
  EXPECT_TRUE(errors(job(832, 480, 81), c).empty());
  // The latent size limit uses the job's profile: wan2.1 at 1920x1920x513 is 16*129*240*240*4.
  auto big = load([] {
    auto j = base_config();
    j["limits"] = {{"max_latent_bytes", 200'000'000}, {"max_frames", 1000}};
    return j;
  }());
  e = errors(job(1920, 1920, 513, "wan2.1"), big);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("frames: the latent would be 475545600 bytes"), std::string::npos) << e[0];
  // ltxv compresses 4x more per axis of space and 2x more in time: 119,808,000 bytes.
  EXPECT_TRUE(errors(job(1920, 1920, 513, "ltxv"), big).empty());
}

TEST(LatentProfileSpec, BatchUsesTheClustersProfiles) {
  auto c = load(base_config());
  auto b = spec::parse_batch(
      R"({"jobId":"a","prompt":"p","width":832,"height":480,"frames":80,"fps":16,"params":{"latent_profile":"wan2.1"}})"
      "\n"
      R"({"jobId":"b","prompt":"p","width":832,"height":480,"frames":81,"fps":16,"params":{"latent_profile":"wan2.1"}})",
      c);
  ASSERT_EQ(b.errors.size(), 1u);
  EXPECT_EQ(b.errors[0].line, 1u);
  EXPECT_EQ(b.errors[0].error.to_string(),
            "frames: profile wan2.1 needs 4k+1 frames (e.g. 81), got 80");
}

// The example two-host config uses the built-in minimax-h3 profile (frames 17k+5, T' = 5k+2, audio
// at 40 steps a second) instead of switching the check off.
TEST(LatentProfileConfig, TheMiniMaxH3GridOfTheExampleConfig) {
  auto c = config::load_file(std::filesystem::path(H3PIPE_SOURCE_DIR) /
                             "configs/comfyui/two_host_comfyui.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->latent_profile, "minimax-h3");
  pb::JobSpec s = job(416, 736, 124);
  s.set_fps(24);
  auto want = spec::expected_latent(s, *c);
  ASSERT_TRUE(want.ok()) << want.error().message;
  EXPECT_EQ(latent::expected_geometry(want->profile, want->job),
            (latent::Geometry{{1, 24, 37, 46, 26}, {1, 32, 2, 207}}));
  EXPECT_EQ(dispatch::class_latent_bytes(*c, "sd"), 4'301'184u);  // the seeds' "about 4.3 MB"
  s.set_frames(121);
  auto e = errors(s, *c);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0], "frames: profile minimax-h3 needs 17k+5 frames (e.g. 124), got 121");
}

TEST(LatentProfilePlanner, TransferSizesFromTheProfile) {
  auto c = load(base_config());
  // wan480 is a wan2.1 class: 16 x 21 x 60 x 104 floats.
  EXPECT_EQ(dispatch::class_latent_bytes(c, "wan480"), 8'386'560u);
  EXPECT_EQ(dispatch::class_latent_bytes(c, "demo"), dispatch::latent_bytes(256, 256, 49));
  EXPECT_EQ(dispatch::class_latent_bytes(c, "absent"), 0u);
  EXPECT_EQ(dispatch::latent_bytes(*latent::find_builtin_profile("ltxv"), 768, 512, 97),
            128u * 13 * 16 * 24 * 4);
}

}  // namespace
}  // namespace h3pipe
