// The comfyui runtime's behaviours that a real ComfyUI 0.3.64 showed were needed (issue #12),
// against the faithful FakeComfyUiServer: the output chosen by graph order, a distinct prompt per
// attempt under h3pipe's own prompt id (no stale cached result, a restarted worker adopts its
// earlier prompt), only the stage's outputs run, validation errors and 413 permanent, restart
// detection that does not count polls, cleanup of staged inputs, outputs and history, template
// choice per job, and reference images read only from the input roots.
#include <gtest/gtest.h>
#include <unistd.h>

#include "common/artifacts/artifacts.h"
#include "common/runtime/comfyui_client.h"
#include "common/runtime/comfyui_runtime.h"
#include "tests/support/fake_comfyui.h"
#include "tests/support/spawn.h"

namespace h3pipe::runtime {
namespace {
using namespace h3pipe::runtime::testing;
using config::StageKind;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

using test_support::wait_for;

json node(const char* cls, json inputs) {
  return {{"class_type", cls}, {"inputs", std::move(inputs)}};
}

// Load the latent, decode, and save a video; plus a second, consumed-by-nothing branch that
// scales the frames and saves them as a video too (the final one).  Node "10" sorts before "9".
json two_output_decode() {
  return {{"2", node("H3LoadAVLatent", {{"path", "x"}})},
          {"3", node("VAELoader", {{"vae_name", "pixel_space"}})},
          {"4", node("VAEDecode", {{"samples", {"2", 0}}, {"vae", {"3", 0}}})},
          {"5", node("CreateVideo", {{"images", {"4", 0}}, {"fps", 24}})},
          {"10", node("SaveVideo", {{"video", {"5", 0}},
                                    {"filename_prefix", "early/v"},
                                    {"format", "mp4"},
                                    {"codec", "h264"}})},
          {"6", node("ImageScale", {{"image", {"4", 0}},
                                    {"upscale_method", "bilinear"},
                                    {"width", 64},
                                    {"height", 64},
                                    {"crop", "disabled"}})},
          {"7", node("CreateVideo", {{"images", {"6", 0}}, {"fps", 24}})},
          {"9", node("SaveVideo", {{"video", {"7", 0}},
                                   {"filename_prefix", "final/v"},
                                   {"format", "mp4"},
                                   {"codec", "h264"}})}};
}

json decode_settings(const std::string& url, json wf) {
  return {
      {"url", url},
      {"workflow", std::move(wf)},
      {"inject",
       {{"input", {{"node", "2"}, {"input", "path"}}}, {"fps", {{"node", "5"}, {"input", "fps"}}}}},
      {"poll_ms", 20},
      {"timeout_s", 20}};
}

// A text-to-latent sample workflow of the recording's test nodes, with a reference-image variant.
json sample_wf(bool with_ref) {
  json g = {{"1", node("H3TestAVLatent", {{"prompt", ""},
                                          {"width", 64},
                                          {"height", 64},
                                          {"length", 9},
                                          {"fps", 24},
                                          {"seed", 1},
                                          {"grid", "h3pipe"}})},
            {"2", node("H3SaveAVLatent", {{"samples", {"1", 0}}, {"filename_prefix", "s/lat"}})}};
  if (with_ref) g["3"] = node("LoadImage", {{"image", "placeholder.png"}});
  return g;
}
json sample_inject(bool with_ref) {
  json i = {{"prompt", {{"node", "1"}, {"input", "prompt"}}},
            {"seed", {{"node", "1"}, {"input", "seed"}}}};
  if (with_ref) i["reference_image"] = {{"node", "3"}, {"input", "image"}};
  return i;
}

class ComfyUiRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    latent_ = dir_.path() / "fixture.h3latent";
    ASSERT_TRUE(latent::write_latent(latent_, latent_for(spec_)).ok());
    out_ = dir_.path() / "artifacts" / "run-1" / "job-1" / "out.mp4";
    fs::create_directories(inputs_);
  }
  FakeComfyUiServer::Options opts() {
    FakeComfyUiServer::Options o;
    o.latent = latent_;
    return o;
  }
  StageContext ctx(long long attempt = 1, const fs::path& input = {}) {
    auto c = context(spec_, input.empty() ? latent_ : input, out_);
    c.attempt = attempt;
    c.job_class = "default";
    return c;
  }
  void reset_output() {
    std::error_code ec;
    fs::remove(out_, ec);
    fs::remove(artifacts::sidecar_path(out_), ec);
  }

  TempDir dir_;
  fs::path latent_, out_, inputs_ = dir_.path() / "inputs";
  pb::JobSpec spec_ = small_spec();
};

TEST_F(ComfyUiRecoveryTest, OutputIsTheMostDownstreamNodeNotTheFirstSortedId) {
  FakeComfyUiServer server(dir_.path() / "server", opts());
  ComfyCluster c(StageKind::kDecode, {});
  auto rt = make_comfyui_decode(c.args(decode_settings(server.url(), two_output_decode())));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  auto out = (*rt)->run(ctx());
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(out->settings["output"], "final/v_00001_.mp4");  // node 9, not node "10"
  // Without `output` every node nothing consumes is a target; ComfyUI runs the output nodes.
  EXPECT_EQ(server.recorded("prompt").at(0)["partial_execution_targets"], json({"10", "9"}));
}

TEST_F(ComfyUiRecoveryTest, NamedOutputRunsOnlyItsBranch) {
  FakeComfyUiServer server(dir_.path() / "server", opts());
  auto settings = decode_settings(server.url(), two_output_decode());
  settings["output"] = {{"node", "10"}};
  ComfyCluster c(StageKind::kDecode, {});
  auto out = (*make_comfyui_decode(c.args(settings)))->run(ctx());
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(out->settings["output"], "early/v_00001_.mp4");
  EXPECT_EQ(server.recorded("prompt").at(0)["partial_execution_targets"], json({"10"}));
  EXPECT_FALSE(fs::exists(server.output_dir() / "final")) << "the other branch must not run";
}

TEST_F(ComfyUiRecoveryTest, EachAttemptIsADistinctPromptSoTheCacheNeverServesADeletedFile) {
  FakeComfyUiServer server(dir_.path() / "server", opts());
  auto settings = decode_settings(server.url(), two_output_decode());
  settings["keep_history"] = true;  // the second attempt sees the first one's finished entry
  ComfyCluster c(StageKind::kDecode, {});
  auto rt = std::move(*make_comfyui_decode(c.args(settings)));
  auto first = rt->run(ctx(1));
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  // The file the first attempt fetched is gone from the server (cleaned, or lost with a disk).
  fs::remove(server.output_dir() / "final" / "v_00001_.mp4");
  reset_output();
  auto second = rt->run(ctx(2));
  ASSERT_TRUE(second.ok()) << second.error().to_string();
  auto prompts = server.recorded("prompt");
  ASSERT_EQ(prompts.size(), 2u);
  EXPECT_EQ(prompts[1]["prompt_id"], comfyui::prompt_id_for("run-1", "job-1", "decode", 2));
  EXPECT_NE(prompts[0]["prompt"], prompts[1]["prompt"])
      << "an identical prompt is served from cache";
  EXPECT_EQ(prompts[1]["prompt"]["9"]["inputs"]["h3pipe_attempt"], prompts[1]["prompt_id"]);
  EXPECT_TRUE(fs::exists(server.output_dir() / "final" / "v_00001_.mp4")) << "written afresh";
}

TEST_F(ComfyUiRecoveryTest,
       ARestartedWorkerAdoptsTheEarlierAttemptsPromptInsteadOfQueueingASecond) {
  auto o = opts();
  o.exec_delay_ms = 800;
  FakeComfyUiServer server(dir_.path() / "server", o);
  ComfyCluster c(StageKind::kDecode, {});
  auto settings = decode_settings(server.url(), two_output_decode());
  // Attempt 1 queued its prompt and its worker died (kill -9): the prompt is still running.
  comfyui::Client client(server.url(), {});
  auto g = two_output_decode();
  g["2"]["inputs"]["path"] = latent_.string();
  std::string id1 = comfyui::prompt_id_for("run-1", "job-1", "decode", 1);
  ASSERT_TRUE(client.queue_prompt(g, {"h3pipe-pool-a", id1, {}}).ok());
  auto out = (*make_comfyui_decode(c.args(settings)))->run(ctx(2));
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(out->settings["prompt_id"], id1);
  EXPECT_EQ(out->settings["adopted"], true);
  EXPECT_EQ(server.recorded("prompt").size(), 1u) << "no second prompt was queued";
}

TEST_F(ComfyUiRecoveryTest, APromptThatFinishedBeforeTheRestartIsFetchedNotRunAgain) {
  FakeComfyUiServer server(dir_.path() / "server", opts());
  ComfyCluster c(StageKind::kDecode, {});
  comfyui::Client client(server.url(), {});
  auto g = two_output_decode();
  g["2"]["inputs"]["path"] = latent_.string();
  std::string id1 = comfyui::prompt_id_for("run-1", "job-1", "decode", 1);
  ASSERT_TRUE(client.queue_prompt(g, {"x", id1, {}}).ok());
  ASSERT_TRUE(wait_for(
      [&] {
        auto h = client.history(id1);
        return h.ok() && h->kind == comfyui::PromptState::Kind::kSuccess;
      },
      10));
  auto out = (*make_comfyui_decode(c.args(decode_settings(server.url(), two_output_decode()))))
                 ->run(ctx(3));
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(out->settings["prompt_id"], id1);
  EXPECT_EQ(server.recorded("prompt").size(), 1u);
  EXPECT_EQ(server.recorded("history").size(), 1u) << "its history entry is deleted once fetched";
}

TEST_F(ComfyUiRecoveryTest, ValidationErrorsArePermanentAndQuoteTheNodeErrors) {
  FakeComfyUiServer server(dir_.path() / "server", opts());
  ComfyCluster c(StageKind::kDecode, {});
  auto wf = two_output_decode();
  wf["3"]["inputs"]["vae_name"] = "missing.safetensors";  // value not in list
  auto settings = decode_settings(server.url(), wf);
  settings["inject"]["params.width"] = {{"node", "6"}, {"input", "width"}};
  (*spec_.mutable_params())["width"] = "wide";  // bad int
  auto out = (*make_comfyui_decode(c.args(settings)))->run(ctx());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.permanent.comfyui_rejected");
  const auto& m = out.error().message;
  EXPECT_NE(m.find("node 3 (VAELoader): Value not in list (vae_name: 'missing.safetensors' not in "
                   "['pixel_space'])"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("node 6 (ImageScale): Failed to convert an input value to a INT value (width, "
                   "wide, invalid literal for int() with base 10: 'wide')"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST_F(ComfyUiRecoveryTest, APartlyInvalidWorkflowIsRejectedNotRunWithoutTheFailedOutput) {
  // Only the final branch is invalid: ComfyUI answers 200 with node_errors and would run the
  // early branch alone, whose file would then pass for the artifact.
  FakeComfyUiServer server(dir_.path() / "server", opts());
  ComfyCluster c(StageKind::kDecode, {});
  auto settings = decode_settings(server.url(), two_output_decode());
  settings["inject"]["params.width"] = {{"node", "6"}, {"input", "width"}};
  (*spec_.mutable_params())["width"] = "wide";
  auto out = (*make_comfyui_decode(c.args(settings)))->run(ctx());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.permanent.comfyui_rejected");
  EXPECT_NE(out.error().message.find("rejected part of the workflow"), std::string::npos)
      << out.error().message;
  EXPECT_NE(out.error().message.find("node 6 (ImageScale)"), std::string::npos)
      << out.error().message;
  // Removed from the queue (again, with an interrupt, if the server had started it already: how
  // many deletes that takes depends on timing), and never anything else.
  const auto deletes = server.recorded("queue");
  ASSERT_GE(deletes.size(), 1u);
  for (const auto& d : deletes)
    EXPECT_EQ(d["delete"][0], comfyui::prompt_id_for("run-1", "job-1", "decode", 1)) << d.dump();
  EXPECT_FALSE(fs::exists(out_));
}

TEST_F(ComfyUiRecoveryTest, AnUploadAboveTheServersCapIsPermanentWithTheInputDirHint) {
  auto o = opts();
  o.max_upload_bytes = 1024;  // the latent fixture is larger
  FakeComfyUiServer server(dir_.path() / "server", o);
  ComfyCluster c(StageKind::kDecode, {});
  auto out = (*make_comfyui_decode(c.args(decode_settings(server.url(), two_output_decode()))))
                 ->run(ctx());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.permanent.comfyui_too_large");
  EXPECT_NE(out.error().message.find("HTTP 413"), std::string::npos) << out.error().message;
  EXPECT_NE(out.error().message.find("input_dir"), std::string::npos) << out.error().message;
  EXPECT_EQ(server.recorded("too_large").size(), 1u);
  EXPECT_TRUE(server.recorded("prompt").empty());
  // Known in advance (max_upload_bytes): refused without sending it.
  FakeComfyUiServer other(dir_.path() / "other", opts());
  auto settings = decode_settings(other.url(), two_output_decode());
  settings["max_upload_bytes"] = 1024;
  auto early = (*make_comfyui_decode(c.args(settings)))->run(ctx());
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.error().code, "runtime.permanent.comfyui_too_large");
  EXPECT_TRUE(other.recorded("upload").empty());
}

TEST_F(ComfyUiRecoveryTest, AServerRestartIsLostWithinAPollNotAfterACountOfPolls) {
  auto o = opts();
  o.exec_delay_ms = 30000;
  FakeComfyUiServer server(dir_.path() / "server", o);
  ComfyCluster c(StageKind::kDecode, {});
  auto settings = decode_settings(server.url(), two_output_decode());
  settings["poll_ms"] = 1500;  // slow polling: a count of polls would take many seconds
  settings["timeout_s"] = 60;
  settings["input_dir"] = server.input_dir().string();
  auto rt = std::move(*make_comfyui_decode(c.args(settings)));
  std::thread restarter([&] {
    wait_for([&] { return server.recorded("prompt").size() == 1; }, 10);
    server.restart(std::chrono::milliseconds(2000));  // refused connections for 2 s
  });
  auto t0 = Clock::now();
  auto out = rt->run(ctx());
  restarter.join();
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.comfyui.lost") << out.error().to_string();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 8.0);
}

TEST_F(ComfyUiRecoveryTest, AServerDownLongerThanUnreachableSFailsWithTheConnectionError) {
  auto o = opts();
  o.exec_delay_ms = 30000;
  auto server = std::make_unique<FakeComfyUiServer>(dir_.path() / "server", o);
  ComfyCluster c(StageKind::kDecode, {});
  auto settings = decode_settings(server->url(), two_output_decode());
  settings["unreachable_s"] = 1;
  settings["input_dir"] = server->input_dir().string();
  auto rt = std::move(*make_comfyui_decode(c.args(settings)));
  std::thread killer([&] {
    wait_for([&] { return server->recorded("prompt").size() == 1; }, 10);
    server.reset();
  });
  auto out = rt->run(ctx());
  killer.join();
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.comfyui.unreachable") << out.error().to_string();
  EXPECT_NE(out.error().message.find("while prompt"), std::string::npos) << out.error().message;
}

TEST_F(ComfyUiRecoveryTest, SharedMountsAreCleanedInputsOutputsAndHistory) {
  FakeComfyUiServer server(dir_.path() / "server", opts());
  ComfyCluster c(StageKind::kDecode, {});
  auto settings = decode_settings(server.url(), two_output_decode());
  settings["input_dir"] = server.input_dir().string();
  settings["output_dir"] = server.output_dir().string();
  auto out = (*make_comfyui_decode(c.args(settings)))->run(ctx());
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_TRUE(artifacts::verify(out_).ok());
  EXPECT_FALSE(out->settings.contains("cleanup_errors")) << out->settings.dump();
  EXPECT_FALSE(fs::exists(server.output_dir() / "final" / "v_00001_.mp4"));
  EXPECT_FALSE(fs::exists(server.output_dir() / "early" / "v_00001_.mp4"));
  EXPECT_FALSE(fs::exists(server.input_dir() / "h3pipe_run-1_job-1_decode.h3latent"));
  EXPECT_FALSE(fs::exists(server.input_dir() / "h3pipe_run-1_job-1_decode.h3latent.sha256"));
  comfyui::Client client(server.url(), {});
  auto h = client.history(out->settings["prompt_id"]);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->kind, comfyui::PromptState::Kind::kPending) << "history entry deleted";
}

TEST_F(ComfyUiRecoveryTest, TemplatesAreChosenByJobClassAndReferenceImage) {
  FakeComfyUiServer server(dir_.path() / "server", opts());
  ComfyCluster c(StageKind::kSample, {inputs_}, {"hd"});
  json settings = {
      {"url", server.url()},
      {"poll_ms", 20},
      {"templates",
       {{"default", {{"workflow", sample_wf(false)}, {"inject", sample_inject(false)}}},
        {"reference", {{"workflow", sample_wf(true)}, {"inject", sample_inject(true)}}},
        {"hd", {{"workflow", sample_wf(false)}, {"inject", sample_inject(false)}}}}}};
  auto rt = make_comfyui_sample(c.args(settings));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  auto run = [&](const std::string& cls, bool ref) {
    reset_output();
    spec_.set_reference_image("");
    if (ref) {
      write_text(inputs_ / "r.png", "png");
      spec_.set_reference_image((inputs_ / "r.png").string());
    }
    auto x = ctx();
    x.job_class = cls;
    return (*rt)->run(x);
  };
  auto text = run("default", false);
  ASSERT_TRUE(text.ok()) << text.error().to_string();
  EXPECT_EQ(text->settings["template"], "default");
  auto i2v = run("default", true);
  ASSERT_TRUE(i2v.ok()) << i2v.error().to_string();
  EXPECT_EQ(i2v->settings["template"], "reference");
  EXPECT_EQ(server.recorded("prompt").back()["prompt"]["3"]["inputs"]["image"],
            "h3pipe/h3pipe_run-1_job-1_sample_ref.png");
  auto hd = run("hd", false);
  ASSERT_TRUE(hd.ok()) << hd.error().to_string();
  EXPECT_EQ(hd->settings["template"], "hd");

  // One template that needs an image, and a job without one: refused, not run with the placeholder.
  json only_ref = {
      {"url", server.url()}, {"workflow", sample_wf(true)}, {"inject", sample_inject(true)}};
  auto bad = (*make_comfyui_sample(c.args(only_ref)))->run(ctx());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, "runtime.permanent.comfyui_template");
  EXPECT_NE(bad.error().message.find("has no referenceImage"), std::string::npos)
      << bad.error().message;

  // Checked at start-up: unknown keys and a reference template that does not take the image.
  json wrong = {{"url", server.url()},
                {"templates",
                 {{"default", {{"workflow", sample_wf(false)}}},
                  {"sd", {{"workflow", sample_wf(false)}}},
                  {"reference", {{"workflow", sample_wf(true)}}}}}};
  auto made = make_comfyui_sample(c.args(wrong));
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.error().message.find(
                "/templates/sd: \"sd\" is neither default, reference, nor a job class"),
            std::string::npos)
      << made.error().message;
  EXPECT_NE(
      made.error().message.find(
          "/templates/reference/inject: a template for jobs with a reference image must inject"),
      std::string::npos)
      << made.error().message;
}

TEST_F(ComfyUiRecoveryTest, AReferenceImageOutsideTheInputRootsIsNeverUploaded) {
  FakeComfyUiServer server(dir_.path() / "server", opts());
  ComfyCluster c(StageKind::kSample, {inputs_});
  json settings = {{"url", server.url()},
                   {"workflow", sample_wf(true)},
                   {"inject", sample_inject(true)},
                   {"poll_ms", 20}};
  auto rt = std::move(*make_comfyui_sample(c.args(settings)));
  fs::create_symlink("/etc/passwd", inputs_ / "link.png");
  for (std::string ref : {std::string("/etc/passwd"), (inputs_ / "link.png").string(),
                          (inputs_ / ".." / "x.png").string(), std::string("/proc/self/environ")}) {
    spec_.set_reference_image(ref);
    auto out = rt->run(ctx());
    ASSERT_FALSE(out.ok()) << ref;
    EXPECT_EQ(out.error().code, "runtime.permanent.input") << ref;
    EXPECT_NE(out.error().message.find("referenceImage"), std::string::npos) << out.error().message;
  }
  EXPECT_TRUE(server.recorded("upload").empty());
  EXPECT_TRUE(server.recorded("prompt").empty());
}

// Issue #36 item 4: the last frame (and likewise the voice) is a job input of its own: injected
// from the job's lastFrameImage beneath the input roots, refused naming that field outside them,
// and a template that injects it refuses a job without one rather than load its placeholder.
TEST_F(ComfyUiRecoveryTest, TheLastFrameIsAJobInputConfinedAsTheReferenceImage) {
  FakeComfyUiServer server(dir_.path() / "server", opts());
  ComfyCluster c(StageKind::kSample, {inputs_});
  json wf = sample_wf(false);
  wf["4"] = node("LoadImage", {{"image", "last_frame.png"}});
  json inject = sample_inject(false);
  inject["last_frame_image"] = {{"node", "4"}, {"input", "image"}};
  json settings = {{"url", server.url()}, {"workflow", wf}, {"inject", inject}, {"poll_ms", 20}};
  auto made = make_comfyui_sample(c.args(settings));
  ASSERT_TRUE(made.ok()) << made.error().to_string();
  auto rt = std::move(*made);

  auto none = rt->run(ctx());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, "runtime.permanent.comfyui_template");
  EXPECT_NE(none.error().message.find("has no lastFrameImage"), std::string::npos)
      << none.error().message;

  for (std::string bad : {std::string("/etc/passwd"), (inputs_ / ".." / "x.png").string()}) {
    spec_.set_last_frame_image(bad);
    auto out = rt->run(ctx());
    ASSERT_FALSE(out.ok()) << bad;
    EXPECT_EQ(out.error().code, "runtime.permanent.input") << bad;
    EXPECT_NE(out.error().message.find("lastFrameImage"), std::string::npos) << out.error().message;
  }
  EXPECT_TRUE(server.recorded("upload").empty());
  EXPECT_TRUE(server.recorded("prompt").empty());

  write_text(inputs_ / "end.png", "the last frame");
  spec_.set_last_frame_image("end.png");
  auto ok = rt->run(ctx());
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  ASSERT_EQ(server.recorded("upload").size(), 1u);
  EXPECT_EQ(server.recorded("upload")[0]["bytes"], 14);
  EXPECT_EQ(server.recorded("prompt").back()["prompt"]["4"]["inputs"]["image"],
            "h3pipe/h3pipe_run-1_job-1_sample_last.png");
}

// Issue #22 item 1: the upload is the file beneath the root at the time of use: a relative path
// is never the service's working directory's file, and a symlink swapped in after submission is
// refused (runtime.permanent.input naming the path) with nothing uploaded.
TEST_F(ComfyUiRecoveryTest, AReferenceImageIsReadBeneathTheRootAtTheTimeOfUse) {
  FakeComfyUiServer server(dir_.path() / "server", opts());
  ComfyCluster c(StageKind::kSample, {inputs_});
  json settings = {{"url", server.url()},
                   {"workflow", sample_wf(true)},
                   {"inject", sample_inject(true)},
                   {"poll_ms", 20}};
  auto rt = std::move(*make_comfyui_sample(c.args(settings)));
  write_text(inputs_ / "r.png", "the picture beneath the root");
  fs::create_directories(dir_.path() / "cwd");
  write_text(dir_.path() / "cwd" / "r.png", "cwd");
  write_text(dir_.path() / "secret.png", "a secret outside the roots");
  const fs::path old_cwd = fs::current_path();
  fs::current_path(dir_.path() / "cwd");
  spec_.set_reference_image("r.png");
  auto out = rt->run(ctx());
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  ASSERT_EQ(server.recorded("upload").size(), 1u);
  EXPECT_EQ(server.recorded("upload")[0]["bytes"], 28) << "the root's file was uploaded";
  reset_output();
  fs::remove(inputs_ / "r.png");
  fs::create_symlink(dir_.path() / "secret.png", inputs_ / "r.png");
  for (std::string ref : {std::string("r.png"), (inputs_ / "r.png").string()}) {
    spec_.set_reference_image(ref);
    auto refused = rt->run(ctx(2));
    ASSERT_FALSE(refused.ok()) << ref;
    EXPECT_EQ(refused.error().code, "runtime.permanent.input") << ref;
    EXPECT_NE(refused.error().message.find((inputs_ / "r.png").string()), std::string::npos)
        << refused.error().message;
  }
  fs::current_path(old_cwd);
  EXPECT_EQ(server.recorded("upload").size(), 1u) << "nothing more was uploaded";
}

TEST(ComfyUiClientTest, PromptIdsAreUuidShapedAndDifferPerAttempt) {
  auto a = comfyui::prompt_id_for("run", "job", "sample", 1);
  EXPECT_EQ(a, comfyui::prompt_id_for("run", "job", "sample", 1));
  EXPECT_NE(a, comfyui::prompt_id_for("run", "job", "sample", 2));
  EXPECT_NE(a, comfyui::prompt_id_for("run", "job", "decode", 1));
  ASSERT_EQ(a.size(), 36u);
  EXPECT_EQ(a[8], '-');
  EXPECT_EQ(a[14], '5');
}

TEST(ComfyUiClientTest, RejectionsAndExecutionErrorsLoseComfyUisTrailingNewlines) {
  auto err =
      json::parse(R"({"status_str": "error", "messages": [["execution_error", {"node_id": "1",
      "node_type": "H3LoadAVLatent", "exception_type": "FileNotFoundError",
      "exception_message": "[Errno 2] No such file or directory: 'x'\n"}]]})");
  EXPECT_EQ(
      comfyui::describe_execution_error(err),
      "node 1 (H3LoadAVLatent) raised FileNotFoundError: [Errno 2] No such file or directory: 'x'");
  auto rej = json::parse(
      R"({"error": {"type": "prompt_outputs_failed_validation", "message": "Prompt outputs failed validation",
      "details": "Required input is missing: seed\n"}, "node_errors": {"1": {"errors": [
      {"message": "Required input is missing", "details": "seed"}, {"message": "Required input is missing", "details": "fps"}],
      "class_type": "H3TestAVLatent"}}})");
  EXPECT_EQ(comfyui::describe_rejection(rej),
            "Prompt outputs failed validation; node 1 (H3TestAVLatent): Required input is missing "
            "(seed), "
            "Required input is missing (fps)");
}

// A decode template on core LoadLatent (stock nodes, a video-only model): the job's .h3latent
// reaches the server as ComfyUI's own .latent at the top of its input folder, by name, which
// LoadLatent's list holds; a profile with audio is refused with the hint (docs/latent.md).
TEST_F(ComfyUiRecoveryTest, StockLoadLatentGetsComfyUisOwnLatentForAVideoOnlyProfile) {
  FakeComfyUiServer server(dir_.path() / "server", opts());
  json wf = two_output_decode();
  wf["2"] = node("LoadLatent", {{"latent", "x.latent"}});
  auto settings = decode_settings(server.url(), wf);
  settings["inject"]["input"] = {{"node", "2"}, {"input", "latent"}};
  ComfyCluster c(StageKind::kDecode, {});
  auto rt = make_comfyui_decode(c.args(settings));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  auto refused = (*rt)->run(ctx());  // the fixture is builtin: video + audio
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, "runtime.permanent.input");
  EXPECT_NE(refused.error().message.find("H3LoadLatent"), std::string::npos)
      << refused.error().message;

  const latent::LatentProfile wan = *latent::find_builtin_profile("wan2.1");
  const fs::path in = dir_.path() / "wan.h3latent";
  ASSERT_TRUE(latent::write_latent(in, latent::make_latent(wan, {64, 64, 9, 24})).ok());
  auto wctx = ctx(1, in);
  wctx.latent_profile = wan;
  auto out = (*rt)->run(wctx);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  int comfy_files = 0;
  for (const auto& e : fs::directory_iterator(server.input_dir())) {
    if (e.path().extension() != ".latent") continue;
    auto l = latent::read_latent(e.path(), nullptr);
    ASSERT_TRUE(l.ok()) << l.error().to_string();
    EXPECT_EQ(l->container, latent::Container::kComfy);
    EXPECT_EQ(l->geometry.video, latent::expected_geometry(wan, {64, 64, 9, 24}).video);
    ++comfy_files;
  }
  EXPECT_EQ(comfy_files, 1);
}

// The node pack's save node writes a .sha256 beside the latent and lists only the latent: with a
// shared output_dir both go (a real server kept one sidecar per job).
TEST_F(ComfyUiRecoveryTest, SharedOutputCleanupTakesTheSaveNodesSidecarToo) {
  FakeComfyUiServer server(dir_.path() / "server", opts());
  ComfyCluster c(StageKind::kSample, {});
  json settings = {{"url", server.url()},
                   {"poll_ms", 20},
                   {"workflow", sample_wf(false)},
                   {"inject", sample_inject(false)},
                   {"output_dir", server.output_dir().string()}};
  auto out = (*make_comfyui_sample(c.args(settings)))->run(ctx());
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_FALSE(out->settings.contains("cleanup_errors")) << out->settings.dump();
  std::vector<std::string> left;
  for (const auto& e : fs::recursive_directory_iterator(server.output_dir()))
    if (e.is_regular_file()) left.push_back(e.path().string());
  EXPECT_TRUE(left.empty()) << fmt::format("{}", fmt::join(left, ", "));
}

// A named output node that writes another kind of file than the stage's is the template's
// fault: permanent, naming the node, not retried max_deliveries times (seen on a real server).
TEST_F(ComfyUiRecoveryTest, ANamedOutputOfTheWrongKindIsAPermanentTemplateError) {
  FakeComfyUiServer server(dir_.path() / "server", opts());
  json wf = two_output_decode();
  wf["9"] = node("SaveImage", {{"images", {"6", 0}}, {"filename_prefix", "final/png"}});
  auto settings = decode_settings(server.url(), wf);
  settings["output"] = {{"node", "9"}};
  ComfyCluster c(StageKind::kDecode, {});
  auto out = (*make_comfyui_decode(c.args(settings)))->run(ctx());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.permanent.comfyui_template");
  EXPECT_NE(out.error().message.find("output node 9 wrote final/png_00001_.png, not a .mp4"),
            std::string::npos)
      << out.error().message;
  EXPECT_FALSE(fs::exists(out_));
}

}  // namespace
}  // namespace h3pipe::runtime
