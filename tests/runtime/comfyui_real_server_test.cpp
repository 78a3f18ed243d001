// The comfyui runtime against a real ComfyUI server, with weight-free core nodes only (EmptyImage,
// ImageScale, CreateVideo, SaveVideo): skipped unless H3PIPE_COMFYUI_URL names one.  What
// FakeComfyUiServer stands in for, checked for real (docs/runtimes.md; issue #12's note records
// a run):
//   H3PIPE_COMFYUI_URL=http://127.0.0.1:18231 H3PIPE_COMFYUI_BASE=/path/to/base (one command line:)
//   [H3PIPE_COMFYUI_RESTART='stop.sh 18231 && start.sh 18231'] build/tests/comfyui_real_server_test
// BASE is the server's --base-directory (its input/ and output/ stand for shared mounts);
// RESTART, when given, is run mid-prompt to check that a restart reads as lost.  The steps and
// previews case needs the server started with --preview-method latent2rgb and the test-only node
// H3ProbeSteps (steps, step_s, seed -> LATENT: ComfyUI's own sampler callback without weights) in
// its custom_nodes; it is skipped, saying so, on a server without that node.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <numeric>

#include "common/artifacts/artifacts.h"
#include "common/latent/profile.h"
#include "common/runtime/comfyui_client.h"
#include "common/runtime/comfyui_progress.h"
#include "common/runtime/comfyui_runtime.h"
#include "common/runtime/http_client.h"
#include "tests/support/fake_comfyui.h"

namespace h3pipe::runtime {
namespace {
using namespace h3pipe::runtime::testing;
using config::StageKind;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

json node(const char* cls, json inputs) {
  return {{"class_type", cls}, {"inputs", std::move(inputs)}};
}

// Frames -> scaled -> video -> SaveVideo "3" (depth 3), and a shallower side branch ending in
// SaveVideo "10", which sorts first.
json video_graph(const std::string& run, int frames = 9, int size = 64) {
  return {
      {"1", node("EmptyImage",
                 {{"width", size}, {"height", size}, {"batch_size", frames}, {"color", 255}})},
      {"6", node("ImageScale", {{"image", {"1", 0}},
                                {"upscale_method", "nearest-exact"},
                                {"width", size},
                                {"height", size},
                                {"crop", "disabled"}})},
      {"2", node("CreateVideo", {{"images", {"6", 0}}, {"fps", 24.0}})},
      {"3", node("SaveVideo", {{"video", {"2", 0}},
                               {"filename_prefix", "h3pipe/" + run + "/main"},
                               {"format", "mp4"},
                               {"codec", "h264"}})},
      {"4", node("EmptyImage", {{"width", 32}, {"height", 32}, {"batch_size", 2}, {"color", 0}})},
      {"5", node("CreateVideo", {{"images", {"4", 0}}, {"fps", 8.0}})},
      {"10", node("SaveVideo", {{"video", {"5", 0}},
                                {"filename_prefix", "h3pipe/" + run + "/side"},
                                {"format", "mp4"},
                                {"codec", "h264"}})}};
}

bool wait_for_done(comfyui::Client& c, const std::string& id) {
  auto end = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < end) {
    auto h = c.history(id);
    if (h.ok() && h->kind != comfyui::PromptState::Kind::kPending) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

class RealComfyUi : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = env("H3PIPE_COMFYUI_URL");
    base_ = env("H3PIPE_COMFYUI_BASE");
    if (url_.empty())
      GTEST_SKIP() << "H3PIPE_COMFYUI_URL is not set: no real ComfyUI server to check against";
    out_ = dir_.path() / "artifacts" / run_ / "job-1" / "out.mp4";
    spec_.set_job_id("job-1");
  }
  // What the checks left in the server's output folder (all under h3pipe/<run>/).
  void TearDown() override {
    std::error_code ec;
    if (!base_.empty()) fs::remove_all(fs::path(base_) / "output" / "h3pipe" / run_, ec);
  }
  json settings(json wf) {
    return {{"url", url_},
            {"workflow", std::move(wf)},
            {"poll_ms", 100},
            {"timeout_s", 120},
            {"inject",
             {{"fps", {{"node", "2"}, {"input", "fps"}}},
              {"filename_prefix", {{"node", "3"}, {"input", "filename_prefix"}}}}}};
  }
  StageContext ctx(long long attempt) {
    std::error_code ec;
    fs::remove(out_, ec);
    fs::remove(artifacts::sidecar_path(out_), ec);
    auto c = context(spec_, dir_.path() / "unused.h3latent", out_);
    c.run_id = run_;
    c.attempt = attempt;
    c.job_class = "default";
    // The graphs below make silent video (EmptyImage -> CreateVideo): a profile without audio, as
    // a Wan 2.1 job's (the runtime refuses a movie without audio for a profile with audio).
    c.latent_profile = *latent::find_builtin_profile("wan2.1");
    return c;
  }
  comfyui::PromptState history(const std::string& id) {
    comfyui::Client c(url_, {});
    auto h = c.history(id);
    EXPECT_TRUE(h.ok());
    return h.ok() ? *h : comfyui::PromptState{};
  }

  std::string url_, base_;
  std::string run_ = "real-" + std::to_string(::getpid()) + "-" +
                     std::to_string(Clock::now().time_since_epoch().count() % 100000);
  TempDir dir_;
  fs::path out_;
  pb::JobSpec spec_ = small_spec();
  ComfyCluster cluster_{StageKind::kDecode, {}};
};

TEST_F(RealComfyUi, OutputByGraphOrderPromptIdsNonceAndCleanup) {
  auto s = settings(video_graph(run_));
  auto rt = std::move(*make_comfyui_decode(cluster_.args(s)));
  auto first = rt->run(ctx(1));
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  std::string id1 = first->settings["prompt_id"];
  EXPECT_EQ(id1, comfyui::prompt_id_for(run_, "job-1", "decode", 1))
      << "the server keeps h3pipe's id";
  EXPECT_NE(first->settings["output"].get<std::string>().find("job-1_decode_00001_.mp4"),
            std::string::npos)
      << first->settings.dump() << ": node 3, the most downstream, not node \"10\"";
  EXPECT_EQ(history(id1).kind, comfyui::PromptState::Kind::kPending) << "history entry deleted";

  // Attempt 2 of the same job (attempt 1's entry is gone, its file is still there): a distinct
  // prompt; the nonce makes the save node run again, upstream nodes come from the cache.
  auto keep = s;
  keep["keep_history"] = true;
  auto second = (*make_comfyui_decode(cluster_.args(keep)))->run(ctx(2));
  ASSERT_TRUE(second.ok()) << second.error().to_string();
  EXPECT_NE(second->settings["output"], first->settings["output"])
      << "a fresh file, not the cached one";
  std::cerr << "attempt 2 output " << second->settings["output"]
            << " (attempt 1: " << first->settings["output"] << ")\n";
  auto h2 = history(second->settings["prompt_id"]);
  std::cerr << "attempt 2 listed " << h2.outputs.size() << " files\n";

  // The same identical prompt without a nonce, queued twice: ComfyUI's cache answers the second
  // with the first one's file and runs nothing (what a retry got before).
  comfyui::Client c(url_, {});
  auto g = video_graph(run_);
  g["3"]["inputs"]["filename_prefix"] = "h3pipe/" + run_ + "/nonce_check";
  std::vector<std::string> files;
  for (int i = 0; i < 2; ++i) {
    std::string id = comfyui::prompt_id_for(run_, "nonce-check", "decode", i + 1);
    ASSERT_TRUE(c.queue_prompt(g, {"h3pipe-test", id, {"3"}}).ok());
    ASSERT_TRUE(wait_for_done(c, id));
    auto h = c.history(id);
    ASSERT_TRUE(h.ok());
    ASSERT_FALSE(h->outputs.empty());
    files.push_back(h->outputs[0].filename);
    c.forget(id);
  }
  EXPECT_EQ(files[0], files[1]) << "identical prompts are served from the cache";
  std::cerr << "identical prompts listed " << files[0] << " and " << files[1] << "\n";

  // partial_execution_targets: a named output runs only its branch.
  spec_.set_job_id("job-named");
  spec_.set_width(32);  // the side branch's movie: 32x32, 2 frames
  spec_.set_height(32);
  spec_.set_frames(2);
  auto named = settings(video_graph(run_));
  named["output"] = {{"node", "10"}};
  named["inject"].erase("filename_prefix");
  named["keep_history"] = true;
  auto side = (*make_comfyui_decode(cluster_.args(named)))->run(ctx(3));
  ASSERT_TRUE(side.ok()) << side.error().to_string();
  auto h3 = history(side->settings["prompt_id"]);
  ASSERT_EQ(h3.outputs.size(), 1u);
  EXPECT_EQ(h3.outputs[0].node_id, "10");
  c.forget(second->settings["prompt_id"]);
  c.forget(side->settings["prompt_id"]);

  if (base_.empty()) return;
  spec_.set_job_id("job-mounted");
  spec_ = small_spec("job-mounted");
  // output_dir (the server's output/ as a shared mount): fetched files deleted, history dropped.
  auto mounted = settings(video_graph(run_));
  mounted["output_dir"] = base_ + "/output";
  auto clean = (*make_comfyui_decode(cluster_.args(mounted)))->run(ctx(4));
  ASSERT_TRUE(clean.ok()) << clean.error().to_string();
  EXPECT_FALSE(clean->settings.contains("cleanup_errors")) << clean->settings.dump();
  EXPECT_FALSE(
      fs::exists(fs::path(base_) / "output" / clean->settings["output"].get<std::string>()));
  EXPECT_EQ(history(clean->settings["prompt_id"]).kind, comfyui::PromptState::Kind::kPending);
}

TEST_F(RealComfyUi, ValidationErrorsAndOversizedUploadsArePermanent) {
  // Node 1 feeds only output 3: ComfyUI queues the rest (200 with node_errors) unless refused.
  auto s = settings(video_graph(run_));
  s["inject"]["params.size"] = {{"node", "1"}, {"input", "width"}};
  (*spec_.mutable_params())["size"] = "wide";
  auto bad = (*make_comfyui_decode(cluster_.args(s)))->run(ctx(1));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, "runtime.permanent.comfyui_rejected");
  std::cerr << "validation: " << bad.error().message << "\n";
  EXPECT_NE(bad.error().message.find(
                "node 1 (EmptyImage): Failed to convert an input value to a INT value"),
            std::string::npos);
  // Every output invalid: 400.
  auto wf = video_graph(run_);
  wf["1"]["inputs"]["width"] = "wide";
  wf["4"]["inputs"]["width"] = "narrow";
  auto all = (*make_comfyui_decode(cluster_.args(settings(wf))))->run(ctx(2));
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.error().code, "runtime.permanent.comfyui_rejected");
  std::cerr << "validation (all outputs): " << all.error().message << "\n";
  EXPECT_EQ(all.error().message.find("rejected part of"), std::string::npos)
      << "a 400, not a partial";

  // An upload above the server's --max-upload-size (100 MB by default).
  fs::path big = dir_.path() / "big.h3latent";
  {
    std::ofstream f(big, std::ios::binary);
    std::string mb(1 << 20, '\0');
    for (int i = 0; i < 101; ++i) f << mb;
  }
  auto up = settings(video_graph(run_));
  up["inject"]["input"] = {{"node", "3"}, {"input", "filename_prefix"}};
  up["max_upload_bytes"] = 1ll << 30;  // let the server decide
  up["request_timeout_s"] = 60;
  auto c = ctx(1);
  c.input = big;
  auto t0 = Clock::now();
  auto refused = (*make_comfyui_decode(cluster_.args(up)))->run(c);
  ASSERT_FALSE(refused.ok());
  std::cerr << "101 MB upload: " << refused.error().to_string() << " after "
            << std::chrono::duration<double>(Clock::now() - t0).count() << " s\n";
  EXPECT_EQ(refused.error().code, "runtime.permanent.comfyui_too_large");
}

TEST_F(RealComfyUi, ARetryAdoptsTheRunningPromptAndARestartReadsAsLost) {
  comfyui::Client c(url_, {});
  // A prompt that takes a few seconds on CPU (H.264 of 240 frames at 512x512), queued by
  // "attempt 1" whose worker then died.
  auto g = video_graph(run_, 240, 512);
  g["3"]["inputs"]["filename_prefix"] = "h3pipe/" + run_ + "/adopt";
  std::string id1 = comfyui::prompt_id_for(run_, "job-1", "decode", 1);
  ASSERT_TRUE(c.queue_prompt(g, {"h3pipe-test", id1, {"3"}}).ok());
  auto s = settings(video_graph(run_, 240, 512));
  s["output"] = {{"node", "3"}};
  spec_.set_width(512);  // the job this prompt decodes: the runtime checks the movie against it
  spec_.set_height(512);
  spec_.set_frames(240);
  auto t0 = Clock::now();
  auto out = (*make_comfyui_decode(cluster_.args(s)))->run(ctx(2));
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  std::cerr << "adopted " << out->settings["prompt_id"] << " in "
            << std::chrono::duration<double>(Clock::now() - t0).count() << " s\n";
  EXPECT_EQ(out->settings["prompt_id"], id1);
  EXPECT_EQ(out->settings["adopted"], true);

  std::string restart = env("H3PIPE_COMFYUI_RESTART");
  if (restart.empty()) return;
  s["poll_ms"] = 5000;
  s["unreachable_s"] = 180;
  std::thread restarter([&] {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    std::cerr << "restarting: " << restart << "\n";
    (void)std::system(restart.c_str());
  });
  auto t1 = Clock::now();
  auto lost = (*make_comfyui_decode(cluster_.args(s)))->run(ctx(3));
  restarter.join();
  ASSERT_FALSE(lost.ok());
  std::cerr << "restart mid-prompt: " << lost.error().to_string() << " after "
            << std::chrono::duration<double>(Clock::now() - t1).count() << " s\n";
  EXPECT_EQ(lost.error().code, "runtime.comfyui.lost");
}

TEST_F(RealComfyUi, SamplerStepsAndPreviewsFromTheServersWebsocket) {
  http::Client probe;
  auto info = probe.get(url_ + "/object_info/H3ProbeSteps");
  if (!info.ok() || info->status != 200 || info->body.find("H3ProbeSteps") == std::string::npos)
    GTEST_SKIP() << "the server at " << url_
                 << " has no H3ProbeSteps node (a test-only custom node running ComfyUI's "
                    "sampler callback without weights): no sampler steps to follow";
  // A Wan 2.1 latent of 16x3x32x32 (what H3ProbeSteps makes): a 256x256x9 job.
  spec_.set_width(256);
  spec_.set_height(256);
  spec_.set_frames(9);
  spec_.set_seed(static_cast<std::uint32_t>(Clock::now().time_since_epoch().count() % 1000000));
  const long long steps = 8;
  const double step_s = 0.25;
  json wf = {{"1", node("H3ProbeSteps", {{"steps", steps}, {"step_s", step_s}, {"seed", 0}})},
             {"2", node("SaveLatent", {{"samples", {"1", 0}}, {"filename_prefix", "x"}})}};
  json s = {{"url", url_},
            {"workflow", wf},
            {"poll_ms", 200},
            {"timeout_s", 120},
            {"output", {{"node", "2"}}},  // core SaveLatent's .latent (docs/latent.md)
            {"inject",
             {{"seed", {{"node", "1"}, {"input", "seed"}}},
              {"filename_prefix", {{"node", "2"}, {"input", "filename_prefix"}}}}}};
  if (!base_.empty()) s["output_dir"] = base_ + "/output";
  ComfyCluster cluster(StageKind::kSample, {});
  auto rt = make_comfyui_sample(cluster.args(s));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  auto c = ctx(1);
  std::vector<std::pair<long long, Clock::time_point>> seen;
  std::vector<std::pair<long long, std::size_t>> previews;
  c.progress = [&](long long k, long long n) {
    EXPECT_EQ(n, steps);
    seen.emplace_back(k, Clock::now());
  };
  c.preview = [&](long long k, long long, const std::string& b64) {
    previews.emplace_back(k, b64.size());
  };
  auto out = (*rt)->run(c);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  std::vector<long long> got;
  for (const auto& [k, at] : seen) got.push_back(k);
  std::vector<long long> want(static_cast<std::size_t>(steps));
  std::iota(want.begin(), want.end(), 1);
  EXPECT_EQ(got, want) << "every step of the server's progress messages, in order";
  ASSERT_FALSE(out->settings["previews"].is_null())
      << "no preview frames: is the server running with --preview-method latent2rgb? "
      << out->settings.dump();
  const json& p = out->settings["previews"];
  EXPECT_EQ(p["frames"], steps) << "a frame per step, each naming this prompt";
  ASSERT_GE(previews.size(), 2u);
  EXPECT_EQ(p["sent"], previews.size());
  for (const auto& [k, bytes] : previews) EXPECT_LE(bytes, 48u * 1024) << "step " << k;
  const double step_time =
      seen.size() > 1
          ? std::chrono::duration<double>(seen.back().second - seen.front().second).count() /
                static_cast<double>(seen.size() - 1)
          : step_s;
  // The CPU time previews take per step (wall time too: on a busy machine it includes waiting).
  const double cpu_per_step = p["cpu_s"].get<double>() / static_cast<double>(steps);
  const double sent = p["sent"].get<double>();
  std::cerr << "real previews: " << p["sent"] << " of " << p["frames"] << " frames handed on, "
            << p["bytes_in"].get<long long>() / p["sent"].get<long long>() << " bytes (JPEG) -> "
            << p["bytes_out"].get<long long>() / p["sent"].get<long long>()
            << " bytes (base64 JPEG) each, " << 1000 * p["cpu_s"].get<double>() / sent
            << " ms CPU (" << 1000 * p["cost_s"].get<double>() / sent << " ms wall) each; "
            << 1000 * cpu_per_step << " ms CPU per step against a step of " << 1000 * step_time
            << " ms (" << 100 * cpu_per_step / step_time << " %)\n";
  EXPECT_LE(cpu_per_step, 0.02 * step_time) << "previews cost more than 2 % of a step";
}

}  // namespace
}  // namespace h3pipe::runtime
