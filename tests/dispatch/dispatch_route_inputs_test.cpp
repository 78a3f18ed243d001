// Decode routing's inputs derived once (issue #26): spec::route_inputs is the one function that
// turns a job spec into what dispatch::route_latent / decode_hosts take (the job's class and its
// latent's bytes).  It gives what the derivations it replaced gave, the sampler's
// (worker/decode_choice.cpp) and the transfer sender's fallback
// (transfer/config_map.cpp), for a builtin job, a wan2.1-profile job and an unknown-profile job.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "common/config/config.h"
#include "common/dispatch/geometry.h"
#include "common/latent/latent.h"
#include "common/spec/spec.h"

namespace h3pipe {
namespace {

using nlohmann::json;

config::Cluster cluster() {
  auto c = config::parse(json::parse(R"({
    "classes": [
      {"name": "sd", "width": 736, "height": 416, "frames": 124},
      {"name": "wan480", "width": 832, "height": 480, "frames": 81, "latent_profile": "wan2.1"}
    ],
    "hosts": [{"name": "a"}],
    "pools": [{"name": "e", "host": "a", "stage": "encode"},
              {"name": "s", "host": "a", "stage": "sample"},
              {"name": "d", "host": "a", "stage": "decode"}]})"),
                         "/tmp");
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().to_string());
  return c.ok() ? *c : config::Cluster{};
}

pb::JobSpec job(std::uint32_t w, std::uint32_t h, std::uint32_t frames, std::uint32_t fps,
                std::string profile = "") {
  pb::JobSpec s;
  s.set_job_id("j");
  s.set_width(w);
  s.set_height(h);
  s.set_frames(frames);
  s.set_fps(fps);
  s.set_steps(6);
  if (!profile.empty()) (*s.mutable_params())["latent_profile"] = profile;
  return s;
}

// The sampler's derivation before issue #26 (worker/decode_choice.cpp).
spec::RouteInputs old_sampler(const pb::JobSpec& s, const config::Cluster& c) {
  spec::RouteInputs in;
  in.job_class = c.class_of(s.width(), s.height(), s.frames(), s.steps(), s.job_class());
  auto profile = spec::latent_profile(s, c);
  in.latent_bytes =
      latent::latent_bytes(profile.ok() ? *profile : latent::builtin_profile(),
                           {s.width(), s.height(), s.frames(), s.fps() ? s.fps() : 24});
  return in;
}

// The transfer sender's fallback before issue #26 (transfer/config_map.cpp).
spec::RouteInputs old_sender(const pb::JobSpec& s, const config::Cluster& c) {
  spec::RouteInputs in;
  in.job_class = c.class_of(s.width(), s.height(), s.frames(), s.steps(), s.job_class());
  auto profile = spec::latent_profile(s, c);
  in.latent_bytes =
      dispatch::latent_bytes(profile.ok() ? *profile : latent::builtin_profile(), s.width(),
                             s.height(), s.frames(), s.fps() ? s.fps() : dispatch::kDefaultFps);
  return in;
}

void expect_as_before(const pb::JobSpec& s, const config::Cluster& c, const std::string& cls,
                      std::uint64_t bytes) {
  const auto in = spec::route_inputs(s, c);
  EXPECT_EQ(in.job_class, cls);
  EXPECT_EQ(in.latent_bytes, bytes);
  for (const auto& old : {old_sampler(s, c), old_sender(s, c)}) {
    EXPECT_EQ(in.job_class, old.job_class);
    EXPECT_EQ(in.latent_bytes, old.latent_bytes);
  }
  EXPECT_EQ(spec::job_class(s, c), cls);
}

TEST(RouteInputs, BuiltinJob) {
  const auto c = cluster();
  expect_as_before(job(736, 416, 124, 24), c, "sd", 4'297'600u);
  // No /classes entry: "default", the cluster's profile (builtin), fps 0 counted as 24.
  expect_as_before(job(640, 384, 49, 0), c, "default", dispatch::latent_bytes(640, 384, 49));
}

TEST(RouteInputs, Wan21ProfileJob) {
  const auto c = cluster();
  // By its class's profile, and by params["latent_profile"] on a job of no class.
  expect_as_before(job(832, 480, 81, 16), c, "wan480", 8'386'560u);
  expect_as_before(
      job(832, 480, 49, 16, "wan2.1"), c, "default",
      latent::latent_bytes(*latent::find_builtin_profile("wan2.1"), {832, 480, 49, 16}));
  // A named jobClass wins over the geometry, as it did.
  auto named = job(736, 416, 124, 24);
  named.set_job_class("wan480");
  expect_as_before(
      named, c, "wan480",
      latent::latent_bytes(*latent::find_builtin_profile("wan2.1"), {736, 416, 124, 24}));
}

TEST(RouteInputs, UnknownProfileJobCountsAsBuiltin) {
  const auto c = cluster();
  ASSERT_FALSE(spec::latent_profile(job(832, 480, 81, 24, "no-such-profile"), c).ok());
  // Of class wan480 (its geometry), but the unknown name replaces the class's wan2.1.
  expect_as_before(job(832, 480, 81, 24, "no-such-profile"), c, "wan480", 3'627'264u);
  expect_as_before(job(832, 480, 81, 16, "no-such-profile"), c, "wan480",
                   dispatch::latent_bytes(832, 480, 81, 16));
  expect_as_before(job(832, 480, 49, 0, "no-such-profile"), c, "default",
                   dispatch::latent_bytes(832, 480, 49));
}

}  // namespace
}  // namespace h3pipe
