// Step progress from the runtimes (#37 item 4) and the cancel that frees the server (item 5):
// exec's `progress N/M` lines, ComfyUI's websocket `progress` messages (FakeComfyUiServer sends
// them as a real 0.3.64's main.py hook does, with progress_state beside), and
// a cancel that stops the prompt on the server within a poll.
#include <gtest/gtest.h>

#include "common/runtime/comfyui_progress.h"
#include "common/runtime/comfyui_runtime.h"
#include "common/runtime/exec_runtime.h"
#include "common/runtime/ws_client.h"
#include "tests/support/fake_comfyui.h"

namespace h3pipe::runtime {
namespace {
using namespace h3pipe::runtime::testing;
using config::StageKind;
using Clock = std::chrono::steady_clock;
using Steps = std::vector<std::pair<long long, long long>>;

const fs::path kSource = H3PIPE_SOURCE_DIR;

TEST(ExecProgress, OnlyWellFormedProgressLinesCount) {
  EXPECT_EQ(parse_progress_line("progress 3/8"), std::make_pair(3LL, 8LL));
  EXPECT_EQ(parse_progress_line("  progress 0/1 "), std::make_pair(0LL, 1LL));
  for (const char* bad :
       {"progress 9/8", "progress 1/0", "progress -1/4", "progress 1/", "progress", "Progress 1/2",
        "progress 1/2 steps", "step 1/2", "progress 1/99999999999"})
    EXPECT_EQ(parse_progress_line(bad), std::nullopt) << bad;
}

TEST(ExecProgress, TheCommandsProgressLinesReachTheContextOnEitherStream) {
  TempDir dir;
  const nlohmann::json settings = {
      {"command",
       {"sh", "-c",
        "echo progress 1/3; echo progress 2/3 >&2; echo 'progress 7/3'; echo noise; "
        "printf 'progress 3/3\\n'; exit 3"}}};
  ClusterFixture c(StageKind::kEncode);
  auto rt = make_exec_encode(c.args(settings));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  const auto spec = small_spec();
  auto ctx = context(spec, {}, dir.path() / "art" / "cond.safetensors");
  fs::create_directories(ctx.output.parent_path());
  Steps seen;
  ctx.progress = [&](long long k, long long n) { seen.emplace_back(k, n); };
  auto out = (*rt)->run(ctx);
  EXPECT_FALSE(out.ok());  // exit 3: the progress before it still counted
  // stdout and stderr are read as they arrive: 2/3 (stderr) may come before or after 1/3.
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (Steps{{1, 3}, {2, 3}, {3, 3}}));
}

nlohmann::json decode_settings(const std::string& url) {
  return {{"url", url},
          {"workflow", (kSource / "configs/comfyui/decode_av_latent.api.json").string()},
          {"inject",
           {{"input", {{"title", "Load MiniMax H3 AV Latent"}, {"input", "path"}}},
            {"fps", {{"title", "Video Combine"}, {"input", "fps"}}},
            {"filename_prefix", {{"title", "Save Video"}, {"input", "filename_prefix"}}}}},
          {"poll_ms", 200},
          {"timeout_s", 30}};
}

class ComfyProgress : public ::testing::Test {
 protected:
  void SetUp() override {
    latent_ = dir_.path() / "fixture.h3latent";
    ASSERT_TRUE(latent::write_latent(latent_, latent_for(spec_)).ok());
    out_ = dir_.path() / "artifacts" / "run-1" / "job-1" / "artifact.mp4";
  }
  FakeComfyUiServer::Options options(int delay_ms) {
    FakeComfyUiServer::Options o;
    o.latent = latent_;
    o.packs = "seeds";
    o.exec_delay_ms = delay_ms;
    o.models = {"vae/minimax_h3_video_vae_fp16.safetensors",
                "vae/minimax_h3_video_vae_int8_convrot.safetensors",
                "vae/minimax_h3_audio_vae_fp32.safetensors"};
    return o;
  }
  TempDir dir_;
  fs::path latent_, out_;
  pb::JobSpec spec_ = small_spec();
};

TEST_F(ComfyProgress, EveryStepOfTheServersProgressMessagesReachesTheContextInOrder) {
  FakeComfyUiServer server(dir_.path() / "server", options(800));
  ClusterFixture c(StageKind::kDecode);
  auto settings = decode_settings(server.url());
  auto rt = make_comfyui_decode(c.args(settings));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  auto ctx = context(spec_, latent_, out_);
  Steps seen;
  ctx.progress = [&](long long k, long long n) { seen.emplace_back(k, n); };
  auto out = (*rt)->run(ctx);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  // The fake's 8 steps over 800 ms, all of them although /history is polled only every 200 ms
  // (previews beside them: comfyui_preview_test.cpp).
  EXPECT_EQ(seen, (Steps{{1, 8}, {2, 8}, {3, 8}, {4, 8}, {5, 8}, {6, 8}, {7, 8}, {8, 8}}));
}

TEST_F(ComfyProgress, ACancelInterruptsTheRunningPromptWithinAPollAndTheRuntimeReturns) {
  FakeComfyUiServer server(dir_.path() / "server", options(20000));
  ClusterFixture c(StageKind::kDecode);
  auto settings = decode_settings(server.url());
  auto rt = make_comfyui_decode(c.args(settings));
  ASSERT_TRUE(rt.ok());
  auto ctx = context(spec_, latent_, out_);
  std::optional<Clock::time_point> cancel_at;
  // Cancelled once the prompt runs (its first step arrived).
  ctx.progress = [&](long long, long long) {
    if (!cancel_at) cancel_at = Clock::now();
  };
  ctx.cancelled = [&] { return cancel_at.has_value(); };
  auto out = (*rt)->run(ctx);
  const auto returned = Clock::now();
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.cancelled");
  ASSERT_TRUE(cancel_at);
  const double delay_s = std::chrono::duration<double>(returned - *cancel_at).count();
  std::printf("comfyui cancel: runtime returned %.3f s after the cancel (one fake step 2.5 s)\n",
              delay_s);
  EXPECT_LT(delay_s, 1.0);
  auto interrupts = server.recorded("interrupt");
  ASSERT_EQ(interrupts.size(), 1u);  // POST /interrupt naming the prompt
  EXPECT_TRUE(interrupts[0].contains("prompt_id"));
}

TEST(WsClient, RefusesWhatIsNotAWebsocketAndHttps) {
  auto https = ws::Client::connect("https://127.0.0.1:1", "/ws", 500);
  ASSERT_FALSE(https.ok());
  EXPECT_EQ(https.error().code, "http.url");
  auto closed =
      ws::Client::connect("http://127.0.0.1:" + std::to_string(closed_port()), "/ws", 500);
  ASSERT_FALSE(closed.ok());
  EXPECT_EQ(closed.error().code, "http.connect");
}

TEST(ComfyProgressMessages, OnlyTheProgressOfTheNamedPrompt) {
  using comfyui::progress_of;
  EXPECT_EQ(
      progress_of(R"({"type":"progress","data":{"value":3,"max":20,"prompt_id":"p","node":"9"}})",
                  "p"),
      std::make_pair(3LL, 20LL));
  EXPECT_EQ(progress_of(R"({"type":"progress","data":{"value":3,"max":20,"prompt_id":"q"}})", "p"),
            std::nullopt);
  EXPECT_EQ(progress_of(R"({"type":"progress_state","data":{"prompt_id":"p","nodes":{}}})", "p"),
            std::nullopt);
  EXPECT_EQ(progress_of(R"({"type":"progress","data":{"value":30,"max":20,"prompt_id":"p"}})", "p"),
            std::nullopt);
  EXPECT_EQ(progress_of("not json \"progress\"", "p"), std::nullopt);
}

}  // namespace
}  // namespace h3pipe::runtime
