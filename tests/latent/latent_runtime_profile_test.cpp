// The sim runtime against the job's latent profile (docs/latent.md): its sampler writes a latent of
// the job's profile (a rehearsal of a Wan cluster moves Wan-sized latents), its decoder reads it
// against that profile and refuses another one; the stage output check has no escape hatch.
#include <gtest/gtest.h>

#include "common/artifacts/artifacts.h"
#include "common/latent/latent.h"
#include "common/runtime/sim_runtime.h"
#include "common/runtime/stage_output.h"
#include "tests/support/temp_dir.h"

namespace h3pipe::runtime {
namespace {

namespace fs = std::filesystem;

class SimProfile : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_.name = "p";
    pool_.host = "h";
    pool_.profiles["default"] = config::Profile{};
    spec_.set_job_id("j");
    spec_.set_prompt("a kite");
    spec_.set_width(64);
    spec_.set_height(48);
    spec_.set_frames(9);
    spec_.set_fps(16);
    spec_.set_steps(2);
  }
  StageContext ctx(const fs::path& in, const fs::path& out, const latent::LatentProfile& p) {
    StageContext c;
    c.run_id = "r";
    c.spec = &spec_;
    c.job_class = "default";
    c.input = in;
    c.output = out;
    c.latent_profile = p;
    return c;
  }
  FactoryArgs args() { return {&cluster_, &pool_, &settings_, 1}; }

  test_support::TempDir dir_;
  config::Cluster cluster_;
  config::Pool pool_;
  nlohmann::json settings_ = nlohmann::json::object();
  pb::JobSpec spec_;
};

TEST_F(SimProfile, SampleWritesTheJobsProfileAndDecodeReadsIt) {
  const fs::path root = dir_.path() / "artifacts";
  const fs::path cond = root / "r/j/cond.safetensors";
  ASSERT_TRUE(latent::write_tensors(cond, {{"cond", {{1, 2}, {0.5f, 0.25f}}}}, {}).ok());
  const auto& wan = *latent::find_builtin_profile("wan2.1");
  auto sample = make_sim_sample(args());
  ASSERT_TRUE(sample.ok());
  const fs::path lat = root / "r/j/latent.h3latent";
  auto out = (*sample)->run(ctx(cond, lat, wan));
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  const latent::Expected want{wan, {64, 48, 9, 16}};
  auto l = latent::read_latent(lat, &want);
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  EXPECT_EQ(l->geometry, (latent::Geometry{{1, 16, 3, 6, 8}, {}}));
  EXPECT_EQ(l->metadata.at("h3pipe.profile"), "wan2.1");
  EXPECT_EQ(out->bytes, l->geometry.data_bytes());
  EXPECT_TRUE(validate_stage_output(config::StageKind::kSample, lat, spec_, wan).ok());
  auto wrong =
      validate_stage_output(config::StageKind::kSample, lat, spec_, latent::builtin_profile());
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code, "runtime.invalid_output");
  EXPECT_NE(wrong.error().message.find("profile builtin"), std::string::npos)
      << wrong.error().message;

  auto decode = make_sim_decode(args());
  ASSERT_TRUE(decode.ok());
  const fs::path mp4 = dir_.path() / "outputs/r/j.mp4";
  auto dec = (*decode)->run(ctx(lat, mp4, wan));
  ASSERT_TRUE(dec.ok()) << dec.error().to_string();
  EXPECT_TRUE(artifacts::verify(mp4).ok());
  // The same latent for a job of another profile is refused before anything is written.
  const fs::path mp4b = dir_.path() / "outputs/r/k.mp4";
  auto refused = (*decode)->run(ctx(lat, mp4b, *latent::find_builtin_profile("hunyuanvideo")));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, "runtime.input");
  EXPECT_NE(refused.error().message.find(
                "latent was made for profile wan2.1, the job's profile is hunyuanvideo"),
            std::string::npos)
      << refused.error().message;
  EXPECT_FALSE(fs::exists(mp4b));
}

TEST_F(SimProfile, BuiltinProfileKeepsAudio) {
  const fs::path root = dir_.path() / "artifacts";
  const fs::path cond = root / "r/j/cond.safetensors";
  ASSERT_TRUE(latent::write_tensors(cond, {{"cond", {{1, 2}, {0.5f, 0.25f}}}}, {}).ok());
  auto sample = make_sim_sample(args());
  ASSERT_TRUE(sample.ok());
  const fs::path lat = root / "r/j/latent.h3latent";
  ASSERT_TRUE((*sample)->run(ctx(cond, lat, latent::builtin_profile())).ok());
  auto l = latent::read_latent(lat, nullptr);
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  EXPECT_EQ(l->geometry, latent::Geometry::for_job(64, 48, 9, 16));
  EXPECT_EQ(l->layout, "video+audio");
}

}  // namespace
}  // namespace h3pipe::runtime
