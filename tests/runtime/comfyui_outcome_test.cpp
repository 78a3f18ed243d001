// What the comfyui runtime makes of a prompt's result, against FakeComfyUiServer: a decode output
// checked against the job (size, frames, audio: stage_output.h), a NaN/Inf latent refused by the
// save node (permanent: every retry makes it again), and failure reasons without ComfyUI's
// path-like exception names (the node pack's code and text only).
#include <gtest/gtest.h>

#include "common/artifacts/artifacts.h"
#include "common/core/error_codes.h"
#include "common/runtime/comfyui_client.h"
#include "common/runtime/comfyui_runtime.h"
#include "tests/support/fake_comfyui.h"

namespace h3pipe::runtime {
namespace {
using namespace h3pipe::runtime::testing;
using config::StageKind;
using nlohmann::json;

const fs::path kSource = H3PIPE_SOURCE_DIR;

json sample_settings(const std::string& url) {
  return {{"url", url},
          {"workflow", (kSource / "configs/comfyui/sample_av_latent.api.json").string()},
          {"inject",
           {{"prompt", {{"title", "Prompt"}, {"input", "prompt"}}},
            {"width", {{"title", "Prompt"}, {"input", "width"}}},
            {"height", {{"title", "Prompt"}, {"input", "height"}}},
            {"frames", {{"title", "Prompt"}, {"input", "length"}}},
            {"seed", {{"title", "Sampler"}, {"input", "noise_seed"}}},
            {"reference_image", {{"title", "Reference Image"}, {"input", "image"}}},
            {"filename_prefix",
             {{"title", "Save MiniMax H3 AV Latent"}, {"input", "filename_prefix"}}}}},
          {"output", {{"title", "Save MiniMax H3 AV Latent"}}},
          {"poll_ms", 20},
          {"timeout_s", 15}};
}

json decode_settings(const std::string& url) {
  return {{"url", url},
          {"workflow", (kSource / "configs/comfyui/decode_av_latent.api.json").string()},
          {"inject",
           {{"input", {{"title", "Load MiniMax H3 AV Latent"}, {"input", "path"}}},
            {"fps", {{"title", "Video Combine"}, {"input", "fps"}}},
            {"filename_prefix", {{"title", "Save Video"}, {"input", "filename_prefix"}}}}},
          {"poll_ms", 20},
          {"timeout_s", 15}};
}

const std::vector<std::string> kTemplateModels = {
    "vae/minimax_h3_video_vae_fp16.safetensors",
    "vae/minimax_h3_video_vae_int8_convrot.safetensors",
    "vae/minimax_h3_audio_vae_fp32.safetensors"};

class ComfyUiOutcomeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    latent_ = dir_.path() / "fixture.h3latent";
    ASSERT_TRUE(latent::write_latent(latent_, latent_for(spec_)).ok());
    out_ = dir_.path() / "artifacts" / "run-1" / "job-1" / "artifact";
    fs::create_directories(inputs_);
  }

  FakeComfyUiServer::Options options() {
    FakeComfyUiServer::Options o;
    o.latent = latent_;
    o.packs = "seeds";
    o.models = kTemplateModels;
    return o;
  }

  Result<StageOutput> decode_with(const fs::path& mp4) {
    auto o = options();
    o.mp4 = mp4;
    FakeComfyUiServer server(dir_.path() / "server", o);
    ComfyCluster c(StageKind::kDecode, {});
    auto rt = make_comfyui_decode(c.args(decode_settings(server.url())));
    if (!rt.ok()) return rt.error();
    return (*rt)->run(context(spec_, latent_, out_));
  }

  TempDir dir_;
  fs::path latent_, out_, inputs_ = dir_.path() / "inputs";
  pb::JobSpec spec_ = small_spec();
};

TEST_F(ComfyUiOutcomeTest, DecodeOutputOfTheJobsSizeIsCommitted) {
  auto out = decode_with({});  // the fake's default: small_spec's 64x64x9 with sound
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_TRUE(artifacts::verify(out_).ok());
}

TEST_F(ComfyUiOutcomeTest, DecodeOutputOfAnotherSizeIsAPermanentFailureWithBothSizes) {
  const fs::path small = dir_.path() / "small.mp4";
  write_test_mp4(small, 32, 32, 9);
  auto out = decode_with(small);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.permanent.output_geometry");
  EXPECT_TRUE(errc::is_permanent(out.error().code));
  EXPECT_NE(out.error().message.find("decode output is 32x32x9, the job is 64x64x9"),
            std::string::npos)
      << out.error().message;
  EXPECT_FALSE(fs::exists(out_)) << "a rejected movie never reaches the final name";
  EXPECT_EQ(temporaries_of(out_), std::vector<std::string>{});
}

TEST_F(ComfyUiOutcomeTest, DecodeOutputWithTooFewFramesOrNoSoundIsRefused) {
  const fs::path short_clip = dir_.path() / "short.mp4";
  write_test_mp4(short_clip, 64, 64, 5);
  auto out = decode_with(short_clip);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.permanent.output_geometry");
  EXPECT_NE(out.error().message.find("decode output is 64x64x5, the job is 64x64x9"),
            std::string::npos)
      << out.error().message;

  const fs::path silent = dir_.path() / "silent.mp4";
  write_test_mp4(silent, 64, 64, 9, /*audio=*/false);
  out = decode_with(silent);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.permanent.output_geometry");
  EXPECT_NE(
      out.error().message.find("has no audio stream; the job's latent profile builtin has audio"),
      std::string::npos)
      << out.error().message;
}

TEST_F(ComfyUiOutcomeTest, AnMp4WithoutPicturesIsAnInvalidOutput) {
  const fs::path empty = dir_.path() / "empty.mp4";
  write_text(empty, std::string("\x00\x00\x00\x18"
                                "ftypisom\x00\x00\x02\x00isomiso2\x00\x00\x00\x08mdat",
                                32));
  auto out = decode_with(empty);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.invalid_output");
  EXPECT_NE(out.error().message.find("is not a playable movie"), std::string::npos)
      << out.error().message;
}

// The latent the sampler "made" holds a NaN: H3SaveLatent refuses it (as the node pack does),
// and the task fails permanently, reported by the pack's code and text alone.
TEST_F(ComfyUiOutcomeTest, NonFiniteLatentAtTheSaveNodeIsPermanentAndNamesNoExceptionPath) {
  std::string bytes = read_text(latent_);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  auto header = json::parse(bytes.substr(8, n));
  const std::size_t at = 8 + n + header["video"]["data_offsets"][0].get<std::size_t>() + 4 * 5;
  const char nan[4] = {0x00, 0x00, static_cast<char>(0xc0), 0x7f};  // quiet NaN, little-endian
  bytes.replace(at, 4, nan, 4);
  const fs::path bad = dir_.path() / "nan.h3latent";
  write_text(bad, bytes);
  auto o = options();
  o.latent = bad;
  FakeComfyUiServer server(dir_.path() / "server", o);
  write_text(inputs_ / "ref.png", "the fake only checks that it exists");
  spec_.set_reference_image((inputs_ / "ref.png").string());
  ComfyCluster c(StageKind::kSample, {inputs_});
  auto rt = make_comfyui_sample(c.args(sample_settings(server.url())));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  auto out = (*rt)->run(context(spec_, dir_.path() / "cond.safetensors", out_));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.permanent.nonfinite");
  EXPECT_TRUE(errc::is_permanent(out.error().code));
  const std::string& m = out.error().message;
  EXPECT_NE(m.find("(H3SaveAVLatent): latent.nonfinite: video holds 1 NaN/Inf value(s), the first "
                   "at index 5"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("NodeError"), std::string::npos) << m;
  EXPECT_EQ(m.find("custom_nodes"), std::string::npos) << m;
}

// A node pack failure with a catalogue code fails the task with that code; its message keeps the
// node and the reason, never ComfyUI's module-path exception name.
TEST_F(ComfyUiOutcomeTest, NodePackFailuresCarryTheirCodeAndText) {
  auto o = options();
  FakeComfyUiServer server(dir_.path() / "server", o);
  fs::path unsigned_latent = dir_.path() / "unsigned.h3latent";
  fs::copy_file(latent_, unsigned_latent);
  ComfyCluster c(StageKind::kDecode, {});
  auto rt = make_comfyui_decode(c.args(decode_settings(server.url())));
  ASSERT_TRUE(rt.ok());
  auto out = (*rt)->run(context(spec_, unsigned_latent, out_));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "artifact.no_sidecar") << out.error().to_string();
  EXPECT_NE(out.error().message.find("(H3LoadAVLatent): "), std::string::npos)
      << out.error().message;
  EXPECT_EQ(out.error().message.find("NodeError"), std::string::npos) << out.error().message;
  EXPECT_EQ(out.error().message.find("custom_nodes"), std::string::npos) << out.error().message;
}

TEST(ComfyUiExecutionFailure, PathLikeExceptionNamesAreDroppedAndPackCodesLifted) {
  auto pack =
      json::parse(R"({"status_str": "error", "messages": [["execution_error", {"node_id": "52",
      "node_type": "H3LoadLatent", "exception_type": "/srv/comfy/custom_nodes/h3pipe_nodes.nodes.NodeError",
      "exception_message": "H3LoadLatent: latent.profile: unknown latent profile \"x\"\n"}]]})");
  auto f = comfyui::execution_failure(pack);
  EXPECT_EQ(f.code, "latent.profile");
  EXPECT_EQ(f.description, "node 52 (H3LoadLatent): latent.profile: unknown latent profile \"x\"");
  EXPECT_EQ(f.without_code, "node 52 (H3LoadLatent): unknown latent profile \"x\"");
  EXPECT_FALSE(f.interrupted);

  // Another exception keeps its class name, without the module path.
  auto oom =
      json::parse(R"({"status_str": "error", "messages": [["execution_error", {"node_id": "8",
      "node_type": "VAEDecode", "exception_type": "torch.OutOfMemoryError",
      "exception_message": "CUDA out of memory. Tried to allocate 2.00 GiB\n"}]]})");
  f = comfyui::execution_failure(oom);
  EXPECT_EQ(f.code, "");
  EXPECT_EQ(
      f.description,
      "node 8 (VAEDecode) raised OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB");

  // Text that merely looks like a code, from an exception that is not the pack's, is not lifted.
  auto look =
      json::parse(R"({"status_str": "error", "messages": [["execution_error", {"node_id": "3",
      "node_type": "KSampler", "exception_type": "RuntimeError",
      "exception_message": "Error: foo.bar: something broke"}]]})");
  f = comfyui::execution_failure(look);
  EXPECT_EQ(f.code, "");
  EXPECT_EQ(f.description,
            "node 3 (KSampler) raised RuntimeError: Error: foo.bar: something broke");
}

}  // namespace
}  // namespace h3pipe::runtime
