// The builtin sampler's previews (#38 item 6): a small JPEG of the latent's middle frame every
// quarter of the steps (at most one a second), bounded in size, costing a sliver of a step.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <algorithm>
#include <chrono>

#include "common/media/media.h"
#include "common/model/model.h"
#include "common/runtime/builtin_runtime.h"
#include "common/runtime/preview.h"
#include "tests/support/runtime_test_util.h"

namespace h3pipe::runtime {
namespace {
using namespace h3pipe::runtime::testing;
using Clock = std::chrono::steady_clock;

std::string unbase64(const std::string& b) {
  std::string out(b.size() * 3 / 4 + 3, '\0');
  const int n =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(b.data()), static_cast<int>(b.size()));
  out.resize(n < 0 ? 0 : static_cast<std::size_t>(n));
  return out;
}

TEST(LatentPreview, IsASmallJpegOfTheGridEnlarged) {
  const int c = model::kVideoChannels, t = 13, h = 16, w = 16;
  std::vector<float> v(static_cast<std::size_t>(c) * t * h * w);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.05f * static_cast<float>(i));
  auto p = latent_preview_jpeg_base64(v.data(), c, t, h, w);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  EXPECT_LT(p->size(), 48u * 1024);
  TempDir dir;
  write_text(dir.path() / "p.jpg", unbase64(*p));
  auto img = media::read_image(dir.path() / "p.jpg");
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  EXPECT_EQ(img->width, 128);
  EXPECT_EQ(img->height, 128);
  EXPECT_FALSE(latent_preview_jpeg_base64(nullptr, c, t, h, w).ok());
}

TEST(LatentPreview, TheBuiltinSamplerSendsAFewAndTheyCostUnderTwoPercentOfAStep) {
  TempDir dir;
  ClusterFixture c(config::StageKind::kSample);
  const nlohmann::json settings = nlohmann::json::object();  // the embedded default model
  auto enc = make_builtin_encode(c.args(settings));
  auto smp = make_builtin_sample(c.args(settings));
  ASSERT_TRUE(enc.ok() && smp.ok());
  auto spec = small_spec();
  spec.set_width(256);
  spec.set_height(256);
  spec.set_frames(17);
  spec.set_steps(8);
  const fs::path cond = dir.path() / "art" / "run-1" / "job-1" / "cond.safetensors";
  const fs::path lat = dir.path() / "art" / "run-1" / "job-1" / "latent.h3latent";
  fs::create_directories(cond.parent_path());
  auto ectx = context(spec, {}, cond);
  ectx.root = dir.path() / "art";
  ASSERT_TRUE((*enc)->run(ectx).ok());
  auto ctx = context(spec, cond, lat);
  ctx.root = dir.path() / "art";
  std::vector<Clock::time_point> step_at;
  std::vector<long long> preview_steps;
  std::size_t largest = 0;
  const auto t0 = Clock::now();
  ctx.progress = [&](long long, long long) { step_at.push_back(Clock::now()); };
  ctx.preview = [&](long long k, long long, const std::string& b64) {
    preview_steps.push_back(k);
    largest = std::max(largest, b64.size());
  };
  auto out = (*smp)->run(ctx);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  ASSERT_EQ(step_at.size(), 8u);
  std::vector<double> steps_s;
  for (std::size_t i = 0; i < step_at.size(); ++i)
    steps_s.push_back(
        std::chrono::duration<double>(step_at[i] - (i ? step_at[i - 1] : t0)).count());
  std::sort(steps_s.begin(), steps_s.end());
  const double step_s = steps_s[steps_s.size() / 2];
  // Every second step at most (8 steps / 4), never the last, at most one a second.
  ASSERT_FALSE(preview_steps.empty());
  for (long long k : preview_steps) {
    EXPECT_EQ(k % 2, 0);
    EXPECT_LT(k, 8);
  }
  EXPECT_LT(largest, 48u * 1024);
  // The cost of one preview on this job's grid (median of 21).
  const auto d = model::latent_dims(256, 256, 17, 24);
  std::vector<float> v(static_cast<std::size_t>(d.video_numel()), 0.25f);
  std::vector<double> cost;
  for (int i = 0; i < 21; ++i) {
    const auto a = Clock::now();
    ASSERT_TRUE(latent_preview_jpeg_base64(v.data(), model::kVideoChannels, d.t, d.h, d.w).ok());
    cost.push_back(std::chrono::duration<double>(Clock::now() - a).count());
  }
  std::sort(cost.begin(), cost.end());
  const double preview_s = cost[cost.size() / 2];
  std::printf(
      "preview: %.3f ms, %zu B base64; step: %.1f ms (median); %.2f %% of a step; %zu "
      "previews in 8 steps\n",
      preview_s * 1000, largest, step_s * 1000, 100 * preview_s / step_s, preview_steps.size());
  EXPECT_LT(preview_s, 0.02 * step_s);
}

}  // namespace
}  // namespace h3pipe::runtime
