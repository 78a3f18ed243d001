// Previews from ComfyUI's own preview frames (#38 item 6) with the step progress (#37 item 4):
// FakeComfyUiServer sends, per sampler step, progress_state, a binary preview frame and progress
// in the order and byte layout a real 0.3.64 with --preview-method latent2rgb does
// (fake_comfyui_ws.py, checked against the recorded exchange by
// comfyui_fake_ws_conformance_test.py).  The runtime asks for frames with metadata, reports every
// step, and hands on a few small JPEGs (at most one per kPreviewInterval); a frame above the
// client's bound is skipped without harm.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <sys/mman.h>

#include "common/artifacts/artifacts.h"
#include "common/runtime/comfyui_progress.h"
#include "common/runtime/comfyui_runtime.h"
#include "tests/support/fake_comfyui.h"

namespace h3pipe::runtime {
namespace {
using namespace h3pipe::runtime::testing;
using config::StageKind;
using Clock = std::chrono::steady_clock;
using Steps = std::vector<std::pair<long long, long long>>;

const fs::path kSource = H3PIPE_SOURCE_DIR;

struct Preview {
  long long step, steps;
  std::string jpeg;  // decoded from base64
  Clock::time_point at;
};

std::string unbase64(const std::string& b64) {
  std::string out(b64.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(b64.data()),
                                static_cast<int>(b64.size()));
  if (n < 0) return {};
  out.resize(static_cast<std::size_t>(n) - (b64.ends_with("==") ? 2 : b64.ends_with("=") ? 1 : 0));
  return out;
}

Result<media::Image> decode(const std::string& jpeg) {
  artifacts::UniqueFd fd(::memfd_create("preview-test", MFD_CLOEXEC));
  EXPECT_EQ(::write(fd.get(), jpeg.data(), jpeg.size()), static_cast<ssize_t>(jpeg.size()));
  return media::read_image(fd.get(), "preview");
}

class ComfyPreviews : public ::testing::Test {
 protected:
  void SetUp() override {
    latent_ = dir_.path() / "fixture.h3latent";
    ASSERT_TRUE(latent::write_latent(latent_, latent_for(spec_)).ok());
    out_ = dir_.path() / "artifacts" / "run-1" / "job-1" / "artifact";
    fs::create_directories(inputs_);
    // The sample template loads a reference image; the fake only checks that it exists.
    write_text(inputs_ / "ref.png", "not really a png");
    spec_.set_reference_image((inputs_ / "ref.png").string());
  }
  FakeComfyUiServer::Options options(long long huge = 0) {
    FakeComfyUiServer::Options o;
    o.latent = latent_;
    o.packs = "seeds";
    o.models = {"vae/minimax_h3_video_vae_fp16.safetensors",
                "vae/minimax_h3_video_vae_int8_convrot.safetensors",
                "vae/minimax_h3_audio_vae_fp32.safetensors"};
    o.exec_delay_ms = 1600;  // 8 steps of 200 ms
    o.preview_method = "latent2rgb";
    o.preview_huge_bytes = huge;
    return o;
  }
  nlohmann::json settings(const std::string& url) {
    return {{"url", url},
            {"workflow", (kSource / "configs/comfyui/sample_av_latent.api.json").string()},
            {"inject",
             {{"reference_image", {{"title", "Reference Image"}, {"input", "image"}}},
              {"filename_prefix",
               {{"title", "Save MiniMax H3 AV Latent"}, {"input", "filename_prefix"}}}}},
            {"output", {{"title", "Save MiniMax H3 AV Latent"}}},
            {"poll_ms", 200},
            {"timeout_s", 30}};
  }
  // Runs the sample stage, collecting its steps and previews.
  Result<StageOutput> sample(const FakeComfyUiServer& server, bool previews = true) {
    ComfyCluster c(StageKind::kSample, {inputs_});
    auto s = settings(server.url());
    auto rt = make_comfyui_sample(c.args(s));
    if (!rt.ok()) return rt.error();
    auto ctx = context(spec_, dir_.path() / "cond.safetensors", out_);
    ctx.progress = [&](long long k, long long n) { steps_.emplace_back(k, n); };
    if (previews)
      ctx.preview = [&](long long k, long long n, const std::string& b64) {
        EXPECT_LE(b64.size(), 48u * 1024) << "the worker's kMaxPreviewBase64 would drop it";
        previews_.push_back({k, n, unbase64(b64), Clock::now()});
      };
    return (*rt)->run(ctx);
  }

  TempDir dir_;
  fs::path latent_, out_, inputs_ = dir_.path() / "inputs";
  pb::JobSpec spec_ = small_spec();
  Steps steps_;
  std::vector<Preview> previews_;
};

const Steps kEightSteps = {{1, 8}, {2, 8}, {3, 8}, {4, 8}, {5, 8}, {6, 8}, {7, 8}, {8, 8}};

TEST_F(ComfyPreviews, EveryStepAndAFewSmallDecodablePreviewsOfTheServersFrames) {
  FakeComfyUiServer server(dir_.path() / "server", options());
  auto out = sample(server);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(steps_, kEightSteps);
  // The client announced supports_preview_metadata as its first message (frames of type 4).
  auto flags = server.recorded("feature_flags");
  ASSERT_EQ(flags.size(), 1u);
  EXPECT_EQ(flags[0], nlohmann::json({{"supports_preview_metadata", true}}));
  // 8 frames over 1.6 s, at most one preview per 0.5 s: 2 to 4 of them (5 if the runtime reads
  // late on a busy machine; the interval itself is checked below).
  ASSERT_GE(previews_.size(), 2u);
  EXPECT_LE(previews_.size(), 5u);
  for (std::size_t i = 0; i < previews_.size(); ++i) {
    const auto& p = previews_[i];
    EXPECT_EQ(p.steps, 8);
    EXPECT_GE(p.step, 1);
    EXPECT_LE(p.step, 8);
    auto img = decode(p.jpeg);
    ASSERT_TRUE(img.ok()) << "preview " << i << ": " << img.error().to_string();
    EXPECT_EQ(img->width, 128) << "the 512x512 frame shrunk to kPreviewMaxSide";
    EXPECT_EQ(img->height, 128);
    if (i == 0) continue;
    EXPECT_GT(p.step, previews_[i - 1].step);
    EXPECT_GE(p.at - previews_[i - 1].at, comfyui::kPreviewInterval);
  }
  const auto& st = out->settings["previews"];
  EXPECT_EQ(st["frames"], 8) << out->settings.dump();
  EXPECT_EQ(st["sent"], previews_.size());
  std::printf(
      "comfyui previews: %zu of 8 frames, %lld -> %lld bytes each (base64), %.2f ms CPU each\n",
      previews_.size(), st["bytes_in"].get<long long>() / st["sent"].get<long long>(),
      st["bytes_out"].get<long long>() / st["sent"].get<long long>(),
      1000 * st["cpu_s"].get<double>() / st["sent"].get<double>());
}

TEST_F(ComfyPreviews, AFrameAboveTheBoundIsSkippedAndTheStreamGoesOn) {
  // 3 MiB at step 1, before its ordinary frame: over kMaxPreviewFrameBytes (512 KiB) and over the
  // client's text bound (1 MiB), read past without being kept.
  FakeComfyUiServer server(dir_.path() / "server", options(3 << 20));
  auto out = sample(server);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(steps_, kEightSteps);
  ASSERT_GE(previews_.size(), 2u);
  for (const auto& p : previews_) EXPECT_TRUE(decode(p.jpeg).ok());
  EXPECT_EQ(out->settings["previews"]["frames"], 8) << "the huge one is not among them";
}

TEST_F(ComfyPreviews, AServerWithoutFeatureFlagsSendsType1FramesAndTheyAreTakenToo) {
  auto o = options();
  o.ignore_feature_flags = true;  // PREVIEW_IMAGE frames, naming no prompt
  FakeComfyUiServer server(dir_.path() / "server", o);
  auto out = sample(server);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(steps_, kEightSteps);
  EXPECT_EQ(out->settings["previews"]["frames"], 8) << "each after its prompt's progress message";
  ASSERT_GE(previews_.size(), 2u);
  for (const auto& p : previews_) EXPECT_TRUE(decode(p.jpeg).ok());
}

TEST_F(ComfyPreviews, WithoutAPreviewCallbackNoFrameIsKept) {
  FakeComfyUiServer server(dir_.path() / "server", options());
  auto out = sample(server, /*previews=*/false);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(steps_, kEightSteps);
  EXPECT_FALSE(out->settings.contains("previews")) << out->settings.dump();
}

TEST(ComfyPreviewFrames, Type1AndType4FramesAsServerPySendsThem) {
  using comfyui::preview_frame_of;
  auto be32 = [](std::uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  const std::string jpeg = "\xff\xd8\xff\xe0 rest";
  const std::string f1 = be32(1) + be32(1) + jpeg;  // PreviewFrame::image points into it
  auto t1 = preview_frame_of(f1);
  ASSERT_TRUE(t1);
  EXPECT_FALSE(t1->prompt_id);
  EXPECT_EQ(t1->image, jpeg);
  const std::string meta =
      R"({"node_id": "1", "prompt_id": "p", "display_node_id": "1", "parent_node_id": null, )"
      R"("real_node_id": "1", "image_type": "image/jpeg"})";
  const std::string f4 = be32(4) + be32(static_cast<std::uint32_t>(meta.size())) + meta + jpeg;
  auto t4 = preview_frame_of(f4);
  ASSERT_TRUE(t4);
  EXPECT_EQ(t4->prompt_id, "p");
  EXPECT_EQ(t4->image, jpeg);
  EXPECT_FALSE(preview_frame_of(be32(3) + be32(1) + jpeg)) << "UNENCODED_PREVIEW_IMAGE";
  EXPECT_FALSE(preview_frame_of(be32(1) + be32(7) + jpeg)) << "unknown image type";
  EXPECT_FALSE(preview_frame_of(be32(1))) << "short";
  EXPECT_FALSE(preview_frame_of(be32(4) + be32(1000) + meta + jpeg)) << "length past the end";
  EXPECT_FALSE(preview_frame_of(be32(4) + be32(2) + "{}" + jpeg)) << "no prompt_id";
}

}  // namespace
}  // namespace h3pipe::runtime
