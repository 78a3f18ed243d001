// The comfyui runtime against FakeComfyUiServer: encode, sample and decode through the production
// HTTP client with the shipped workflow templates, job parameters injected into named nodes,
// inputs staged by copy or upload, outputs fetched through /view and validated; failures (an
// execution error in /history, a rejected workflow, an invalid output, a lost prompt, a timeout,
// a server that is down) and settings validated at construction.  comfyui_recovery_test.cpp has
// the behaviours measured against a real server (prompt ids, cache, restarts, cleanup, 413).
#include "common/runtime/comfyui_runtime.h"

#include <gtest/gtest.h>

#include "common/artifacts/artifacts.h"
#include "common/runtime/comfyui_client.h"
#include "tests/support/fake_comfyui.h"

namespace h3pipe::runtime {
namespace {
using namespace h3pipe::runtime::testing;
using config::StageKind;
using Clock = std::chrono::steady_clock;

const fs::path kSource = H3PIPE_SOURCE_DIR;

nlohmann::json sample_settings(const std::string& url) {
  return {
      {"url", url},
      {"workflow", (kSource / "configs/comfyui/sample_av_latent.api.json").string()},
      {"inject",
       {{"prompt", {{"title", "Prompt"}, {"input", "prompt"}}},
        {"width", {{"title", "Prompt"}, {"input", "width"}}},
        {"height", {{"title", "Prompt"}, {"input", "height"}}},
        {"frames", {{"title", "Prompt"}, {"input", "length"}}},
        {"seed", {{"title", "Sampler"}, {"input", "noise_seed"}}},
        {"steps", {{"node", "9"}, {"input", "steps"}}},
        {"reference_image", {{"title", "Reference Image"}, {"input", "image"}}},
        {"filename_prefix", {{"title", "Save MiniMax H3 AV Latent"}, {"input", "filename_prefix"}}},
        {"params.lora", {{"title", "Turbo LoRA"}, {"input", "strength_model"}}}}},
      {"output", {{"title", "Save MiniMax H3 AV Latent"}}},
      {"poll_ms", 20},
      {"timeout_s", 15}};
}

nlohmann::json decode_settings(const std::string& url) {
  return {{"url", url},
          {"workflow", (kSource / "configs/comfyui/decode_av_latent.api.json").string()},
          {"inject",
           {{"input", {{"title", "Load MiniMax H3 AV Latent"}, {"input", "path"}}},
            {"fps", {{"title", "Video Combine"}, {"input", "fps"}}},
            {"filename_prefix", {{"title", "Save Video"}, {"input", "filename_prefix"}}}}},
          {"poll_ms", 20},
          {"timeout_s", 15}};
}

// A separate encode workflow (inline): text encoder, then a node that saves the conditioning.
nlohmann::json encode_settings(const std::string& url) {
  nlohmann::json wf = {{"1",
                        {{"class_type", "CLIPLoader"},
                         {"inputs", {{"clip_name", "umt5_xxl.safetensors"}, {"type", "wan"}}}}},
                       {"2",
                        {{"class_type", "CLIPTextEncode"},
                         {"_meta", {{"title", "Prompt"}}},
                         {"inputs", {{"text", ""}, {"clip", {"1", 0}}}}}},
                       {"3",
                        {{"class_type", "H3SaveConditioning"},
                         {"inputs", {{"conditioning", {"2", 0}}, {"filename_prefix", "cond"}}}}}};
  return {{"url", url},
          {"workflow", wf},
          {"inject",
           {{"prompt", {{"title", "Prompt"}, {"input", "text"}}},
            {"filename_prefix", {{"node", "3"}, {"input", "filename_prefix"}}}}},
          {"poll_ms", 20},
          {"timeout_s", 15}};
}

// The model files the shipped templates name: the faithful fake checks them against models/.
const std::vector<std::string> kTemplateModels = {
    "vae/minimax_h3_video_vae_fp16.safetensors",
    "vae/minimax_h3_video_vae_int8_convrot.safetensors",
    "vae/minimax_h3_audio_vae_fp32.safetensors"};

class ComfyUiRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    latent_ = dir_.path() / "fixture.h3latent";
    ASSERT_TRUE(latent::write_latent(latent_, latent_for(spec_)).ok());
    out_ = dir_.path() / "artifacts" / "run-1" / "job-1" / "artifact";
    fs::create_directories(inputs_);
  }

  FakeComfyUiServer::Options server_options(std::string mode = "ok") {
    FakeComfyUiServer::Options o;
    o.mode = std::move(mode);
    o.latent = latent_;
    o.packs = "seeds";
    o.models = kTemplateModels;
    return o;
  }

  // A reference image in the input root; the sample template loads one.
  void give_reference() {
    write_text(inputs_ / "ref.png", "not really a png, the fake only checks that it exists");
    spec_.set_reference_image((inputs_ / "ref.png").string());
  }

  TempDir dir_;
  fs::path latent_, out_, inputs_ = dir_.path() / "inputs";
  pb::JobSpec spec_ = small_spec();
};

TEST_F(ComfyUiRuntimeTest, SampleQueuesTheTemplateWithTheJobAndFetchesTheLatent) {
  FakeComfyUiServer server(dir_.path() / "server", server_options());
  give_reference();
  (*spec_.mutable_params())["lora"] = "0.75";
  auto settings = sample_settings(server.url());
  ComfyCluster c(StageKind::kSample, {inputs_});
  auto rt = make_comfyui_sample(c.args(settings));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  auto out = (*rt)->run(context(spec_, dir_.path() / "cond.safetensors", out_));
  ASSERT_TRUE(out.ok()) << out.error().to_string();

  EXPECT_EQ(read_text(out_), read_text(latent_));
  auto verified = artifacts::verify(out_);
  ASSERT_TRUE(verified.ok());
  EXPECT_EQ(*verified, out->sha256);
  EXPECT_EQ(out->device, "comfyui@" + server.url().substr(7));
  // h3pipe's own prompt id for (run, job, stage, attempt 1), kept by the server.
  EXPECT_EQ(out->settings["prompt_id"], comfyui::prompt_id_for("run-1", "job-1", "sample", 1));
  EXPECT_EQ(out->settings["workflow_sha256"].get<std::string>().size(), 64u);

  auto prompts = server.recorded("prompt");
  ASSERT_EQ(prompts.size(), 1u);
  const auto& g = prompts[0]["prompt"];
  EXPECT_EQ(prompts[0]["client_id"], "h3pipe-pool-a");
  EXPECT_EQ(prompts[0]["prompt_id"], out->settings["prompt_id"]);
  // Only the stage's output runs, and it carries the attempt's nonce (cache key, unused input).
  EXPECT_EQ(prompts[0]["partial_execution_targets"], nlohmann::json({"13"}));
  EXPECT_EQ(g["13"]["inputs"]["h3pipe_attempt"], out->settings["prompt_id"]);
  EXPECT_EQ(g["4"]["inputs"]["prompt"], spec_.prompt());
  EXPECT_EQ(g["4"]["inputs"]["width"], 64);
  EXPECT_EQ(g["4"]["inputs"]["height"], 64);
  EXPECT_EQ(g["4"]["inputs"]["length"], 9);
  EXPECT_EQ(g["12"]["inputs"]["noise_seed"], 1234567);
  EXPECT_EQ(g["9"]["inputs"]["steps"], 4);
  EXPECT_EQ(g["7"]["inputs"]["strength_model"], 0.75);  // params string -> number
  EXPECT_EQ(g["13"]["inputs"]["filename_prefix"], "h3pipe/run-1/job-1_sample");
  EXPECT_EQ(g["12"]["inputs"]["guider"], nlohmann::json({"10", 0}));  // links untouched
  EXPECT_EQ(g["3"]["inputs"]["image"], "h3pipe/h3pipe_run-1_job-1_sample_ref.png");
  EXPECT_TRUE(fs::exists(server.input_dir() / "h3pipe" / "h3pipe_run-1_job-1_sample_ref.png"));
  // The history entry is dropped once the output is fetched.
  auto deleted = server.recorded("history");
  ASSERT_EQ(deleted.size(), 1u);
  EXPECT_EQ(deleted[0]["delete"][0], out->settings["prompt_id"]);
}

TEST_F(ComfyUiRuntimeTest, EncodeRunsAnInlineWorkflowAndChecksTheTensorFile) {
  auto cond = dir_.path() / "cond.safetensors";
  latent::TensorF32 t{{1, 4, 8}, std::vector<float>(32, 0.25f)};
  ASSERT_TRUE(latent::write_tensors(cond, {{"cond", t}}, {}).ok());
  auto o = server_options();
  o.conditioning = cond;
  o.models.push_back("text_encoders/umt5_xxl.safetensors");
  FakeComfyUiServer server(dir_.path() / "server", o);
  auto settings = encode_settings(server.url());
  ClusterFixture c(StageKind::kEncode);
  auto rt = make_comfyui_encode(c.args(settings));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  auto out = (*rt)->run(context(spec_, {}, out_));
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(read_text(out_), read_text(cond));
  EXPECT_EQ(out->settings["workflow"], "inline");
  EXPECT_EQ(server.recorded("prompt").at(0)["prompt"]["2"]["inputs"]["text"], spec_.prompt());
}

TEST_F(ComfyUiRuntimeTest, FusedEncodeWritesAMarkerWithoutQueueing) {
  FakeComfyUiServer server(dir_.path() / "server", server_options());
  nlohmann::json settings = {{"url", server.url()}, {"fused", true}};
  ClusterFixture c(StageKind::kEncode);
  auto rt = make_comfyui_encode(c.args(settings));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  auto out = (*rt)->run(context(spec_, {}, out_));
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  std::map<std::string, std::string> meta;
  auto tensors = latent::read_tensors(out_, &meta);
  ASSERT_TRUE(tensors.ok());
  EXPECT_EQ(meta["mode"], "fused");
  EXPECT_TRUE(artifacts::verify(out_).ok());
  EXPECT_TRUE(server.recorded("prompt").empty());
}

TEST_F(ComfyUiRuntimeTest, DecodeCopiesTheLatentIntoInputDirAndRemovesItAfterwards) {
  FakeComfyUiServer server(dir_.path() / "server", server_options());
  auto settings = decode_settings(server.url());
  settings["input_dir"] = server.input_dir().string();
  ClusterFixture c(StageKind::kDecode);
  auto rt = make_comfyui_decode(c.args(settings));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  auto out = (*rt)->run(context(spec_, latent_, out_));
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_TRUE(artifacts::verify(out_).ok());
  auto copy = server.input_dir() / "h3pipe_run-1_job-1_decode.h3latent";
  auto g = server.recorded("prompt").at(0)["prompt"];
  EXPECT_EQ(g["1"]["inputs"]["path"], copy.string());
  EXPECT_EQ(g["6"]["inputs"]["fps"], 24);
  EXPECT_FALSE(fs::exists(copy));
  EXPECT_TRUE(server.recorded("upload").empty());
}

TEST_F(ComfyUiRuntimeTest, DecodeUploadsTheLatentWhenThereIsNoInputDir) {
  FakeComfyUiServer server(dir_.path() / "server", server_options());
  auto settings = decode_settings(server.url());
  ClusterFixture c(StageKind::kDecode);
  auto rt = make_comfyui_decode(c.args(settings));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  auto out = (*rt)->run(context(spec_, latent_, out_));
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_TRUE(artifacts::verify(out_).ok());
  EXPECT_EQ(server.recorded("prompt").at(0)["prompt"]["1"]["inputs"]["path"],
            "h3pipe/h3pipe_run-1_job-1_decode.h3latent");
  EXPECT_EQ(read_text(server.input_dir() / "h3pipe" / "h3pipe_run-1_job-1_decode.h3latent"),
            read_text(latent_));
}

TEST_F(ComfyUiRuntimeTest, ExecutionErrorInHistoryFailsTheTaskWithTheNodeAndException) {
  FakeComfyUiServer server(dir_.path() / "server", server_options("fail"));
  give_reference();
  auto settings = sample_settings(server.url());
  ComfyCluster c(StageKind::kSample, {inputs_});
  auto out = (*make_comfyui_sample(c.args(settings)))->run(context(spec_, {}, out_));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.comfyui.execution");
  const auto& m = out.error().message;
  EXPECT_NE(m.back(), '\n') << "ComfyUI's exception text ends in a newline; the reason must not";
  EXPECT_NE(m.find(server.url()), std::string::npos) << m;
  EXPECT_NE(m.find("node 13 (H3SaveAVLatent)"), std::string::npos) << m;
  // The exception's class, not its module (for a custom node, a path on the server).
  EXPECT_NE(m.find("raised OutOfMemoryError: "), std::string::npos) << m;
  EXPECT_EQ(m.find("torch."), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(out_));
  EXPECT_EQ(temporaries_of(out_), std::vector<std::string>{});
}

TEST_F(ComfyUiRuntimeTest, AnImageTheServerLacksIsAPermanentValidationErrorNamingTheNode) {
  FakeComfyUiServer server(dir_.path() / "server", server_options());
  nlohmann::json wf = {
      {"3", {{"class_type", "LoadImage"}, {"inputs", {{"image", "not-uploaded.png"}}}}},
      {"4",
       {{"class_type", "ImageScale"},
        {"inputs",
         {{"image", {"3", 0}},
          {"upscale_method", "nearest-exact"},
          {"width", 64},
          {"height", 64},
          {"crop", "disabled"}}}}},
      {"5", {{"class_type", "CreateVideo"}, {"inputs", {{"images", {"4", 0}}, {"fps", 24}}}}},
      {"6",
       {{"class_type", "SaveVideo"},
        {"inputs",
         {{"video", {"5", 0}}, {"filename_prefix", "x"}, {"format", "mp4"}, {"codec", "h264"}}}}}};
  nlohmann::json settings = {{"url", server.url()}, {"workflow", wf}, {"poll_ms", 20}};
  ClusterFixture c(StageKind::kDecode);
  auto out = (*make_comfyui_decode(c.args(settings)))->run(context(spec_, latent_, out_));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.permanent.comfyui_rejected");
  EXPECT_NE(out.error().message.find("node 3 (LoadImage): Custom validation failed for node "
                                     "(image - Invalid image file: not-uploaded.png)"),
            std::string::npos)
      << out.error().message;
  EXPECT_EQ(server.recorded_status("prompt"), std::vector<int>({400}));
}

TEST_F(ComfyUiRuntimeTest, ServerDownGivesAClearErrorNamingTheUrl) {
  std::string url = "http://127.0.0.1:" + std::to_string(closed_port());
  auto settings = decode_settings(url);
  ClusterFixture c(StageKind::kDecode);
  auto rt = make_comfyui_decode(c.args(settings));
  ASSERT_TRUE(rt.ok()) << "construction must not need the server: " << rt.error().to_string();
  auto t0 = Clock::now();
  auto out = (*rt)->run(context(spec_, latent_, out_));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.comfyui.unreachable");
  EXPECT_NE(out.error().message.find("ComfyUI server at " + url + " is unreachable"),
            std::string::npos)
      << out.error().message;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
}

TEST_F(ComfyUiRuntimeTest, RejectedWorkflowIsPermanent) {
  FakeComfyUiServer server(dir_.path() / "server", server_options());
  nlohmann::json wf = {
      {"1", {{"class_type", "NoSuchNode"}, {"inputs", nlohmann::json::object()}}},
      {"2",
       {{"class_type", "SaveVideo"}, {"inputs", {{"video", {"1", 0}}, {"filename_prefix", "x"}}}}}};
  nlohmann::json settings = {{"url", server.url()}, {"workflow", wf}, {"poll_ms", 20}};
  ClusterFixture c(StageKind::kDecode);
  auto out = (*make_comfyui_decode(c.args(settings)))->run(context(spec_, latent_, out_));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.permanent.comfyui_rejected");
  EXPECT_NE(out.error().message.find("NoSuchNode"), std::string::npos) << out.error().message;
}

TEST_F(ComfyUiRuntimeTest, LatentOfTheWrongGeometryIsRejected) {
  auto other = small_spec();
  other.set_height(128);
  auto wrong = dir_.path() / "wrong.h3latent";
  ASSERT_TRUE(latent::write_latent(wrong, latent_for(other)).ok());
  auto o = server_options();
  o.latent = wrong;
  FakeComfyUiServer server(dir_.path() / "server", o);
  give_reference();
  auto settings = sample_settings(server.url());
  ComfyCluster c(StageKind::kSample, {inputs_});
  auto strict = (*make_comfyui_sample(c.args(settings)))->run(context(spec_, {}, out_));
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.error().code, "runtime.invalid_output");
  EXPECT_FALSE(fs::exists(out_));
  EXPECT_EQ(temporaries_of(out_), std::vector<std::string>{});
  settings["check_geometry"] = false;  // the escape hatch is gone (docs/latent.md)
  auto rt = make_comfyui_sample(c.args(settings));
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.error().message.find("check_geometry: unknown key"), std::string::npos)
      << rt.error().message;
}

TEST_F(ComfyUiRuntimeTest, APromptTheServerForgetsIsReportedLost) {
  FakeComfyUiServer server(dir_.path() / "server", server_options("forget"));
  auto settings = decode_settings(server.url());
  settings["poll_ms"] = 10;
  ClusterFixture c(StageKind::kDecode);
  auto out = (*make_comfyui_decode(c.args(settings)))->run(context(spec_, latent_, out_));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.comfyui.lost");
}

TEST_F(ComfyUiRuntimeTest, TimeoutAndCancellationStopThePromptOnTheServer) {
  auto o = server_options();
  o.exec_delay_ms = 10000;
  FakeComfyUiServer server(dir_.path() / "server", o);
  auto settings = decode_settings(server.url());
  settings["timeout_s"] = 0.5;
  ClusterFixture c(StageKind::kDecode);
  auto t0 = Clock::now();
  auto out = (*make_comfyui_decode(c.args(settings)))->run(context(spec_, latent_, out_));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.timeout");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  EXPECT_EQ(server.recorded("interrupt").size(), 1u);  // it was running: interrupted

  // The next attempt waits behind the interrupted one, or runs: either way cancel removes it.
  settings["timeout_s"] = 30;
  auto ctx = context(spec_, latent_, out_);
  ctx.attempt = 2;
  auto t1 = Clock::now();
  ctx.cancelled = [t1] { return Clock::now() - t1 > std::chrono::milliseconds(300); };
  auto cancelled = (*make_comfyui_decode(c.args(settings)))->run(ctx);
  ASSERT_FALSE(cancelled.ok());
  EXPECT_EQ(cancelled.error().code, "runtime.cancelled");
  EXPECT_EQ(server.recorded("queue").size(), 2u);  // one delete per stopped prompt
}

TEST(ComfyUiSettingsTest, ErrorsNameTheSettingsPathAndTheNode) {
  nlohmann::json wf = {
      {"1",
       {{"class_type", "CLIPTextEncode"},
        {"_meta", {{"title", "Text"}}},
        {"inputs", {{"text", ""}, {"clip", {"2", 0}}}}}},
      {"2",
       {{"class_type", "CLIPLoader"},
        {"_meta", {{"title", "Text"}}},
        {"inputs", {{"clip_name", "a"}}}}},
      {"3", {{"class_type", "SaveVideo"}, {"inputs", {{"filename_prefix", "x"}}}}}};
  auto with = [&](nlohmann::json inject) {
    return nlohmann::json{
        {"url", "http://127.0.0.1:8188"}, {"workflow", wf}, {"inject", std::move(inject)}};
  };
  const std::string p = "/stages/sample/runtime/settings";
  struct Case {
    nlohmann::json settings;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{{"workflow", wf}}, p + "/url: required but missing"},
      {{{"url", "127.0.0.1:8188"}, {"workflow", wf}},
       p + "/url: \"127.0.0.1:8188\": expected http://host:port"},
      {{{"url", "http://h:1"}}, p + "/workflow: required but missing"},
      {{{"url", "http://h:1"}, {"workflow", "/nonexistent/wf.json"}},
       p + "/workflow: cannot read workflow file"},
      {{{"url", "http://h:1"},
        {"workflow", {{"nodes", nlohmann::json::array()}, {"links", nlohmann::json::array()}}}},
       "UI-format workflow"},
      {{{"url", "http://h:1"}, {"workflow", wf}, {"polling", 1}}, p + "/polling: unknown key"},
      {with({{"prompt", {{"node", "9"}, {"input", "text"}}}}),
       p + "/inject/prompt/node: no node \"9\""},
      {with({{"prompt", {{"title", "Text"}, {"input", "text"}}}}),
       p + "/inject/prompt/title: title \"Text\" is ambiguous (nodes 1, 2)"},
      {with({{"prompt", {{"node", "1"}, {"input", "txt"}}}}),
       p + "/inject/prompt/input: node \"1\" (CLIPTextEncode) has no input \"txt\"; it has: clip, "
           "text"},
      {with({{"prompt", {{"node", "1"}, {"input", "clip"}}}}),
       p + "/inject/prompt/input: input \"clip\" of node \"1\" is linked"},
      {with({{"colour", {{"node", "1"}, {"input", "text"}}}}),
       p + "/inject/colour: unknown parameter"},
      {with({{"prompt", {{"node", "1"}}}}), p + "/inject/prompt/input: required but missing"},
      {{{"url", "http://h:1"}, {"workflow", wf}, {"fused", true}},
       p + "/fused: only the encode stage"},
      {{{"url", "http://h:1"}, {"workflow", wf}, {"input_ref", "path"}},
       p + "/input_ref: \"path\" needs input_dir"},
      {{{"url", "http://h:1"}, {"workflow", wf}, {"input_dir", "/nonexistent/h3pipe"}},
       p + "/input_dir: \"/nonexistent/h3pipe\" is not a directory"},
      {{{"url", "http://h:1"}, {"workflow", wf}, {"output", {{"node", "7"}}}},
       p + "/output/node: no node \"7\""},
  };
  ClusterFixture c(StageKind::kSample);
  for (const auto& k : cases) {
    auto rt = make_comfyui_sample(c.args(k.settings));
    ASSERT_FALSE(rt.ok()) << k.settings.dump();
    EXPECT_EQ(rt.error().code, "runtime.settings");
    EXPECT_NE(rt.error().message.find(k.expect), std::string::npos)
        << "want: " << k.expect << "\ngot: " << rt.error().message;
  }
}

TEST(ComfyUiSettingsTest, TheExampleConfigLoadsAndItsRuntimesConstruct) {
  auto c = config::load_file(kSource / "configs/comfyui/two_host_comfyui.json");
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  TempDir input;
  for (const auto& pool : c->pools) {
    const auto& rt = c->runtime_for(pool);
    ASSERT_EQ(rt.name, "comfyui") << pool.name;
    nlohmann::json s = rt.settings;
    // Paths in the example are relative to the repository root and the decode host's folders.
    if (s.contains("workflow"))
      s["workflow"] = (kSource / s["workflow"].get<std::string>()).string();
    if (s.contains("input_dir")) s["input_dir"] = input.path().string();
    FactoryArgs a{&*c, &pool, &s, 0};
    Status made;
    switch (pool.stage) {
      case StageKind::kEncode:
        if (auto r = make_comfyui_encode(a); !r.ok()) made = r.error();
        break;
      case StageKind::kSample:
        if (auto r = make_comfyui_sample(a); !r.ok()) made = r.error();
        break;
      case StageKind::kDecode:
        if (auto r = make_comfyui_decode(a); !r.ok()) made = r.error();
        break;
    }
    EXPECT_TRUE(made.ok()) << pool.name << ": " << made.error().to_string();
  }
}

TEST(ComfyUiClientTest, DescribesExecutionErrorsAndInterruptions) {
  auto err = nlohmann::json::parse(R"({"status_str": "error", "completed": false, "messages": [
      ["execution_start", {"prompt_id": "p"}],
      ["execution_error", {"node_id": "4", "node_type": "VAEDecode", "exception_type": "RuntimeError",
                           "exception_message": "boom"}]]})");
  EXPECT_EQ(comfyui::describe_execution_error(err), "node 4 (VAEDecode) raised RuntimeError: boom");
  auto intr = nlohmann::json::parse(R"({"status_str": "error", "messages": [
      ["execution_interrupted", {"node_id": "12", "node_type": "XFuserSamplerCustomAdvanced"}]]})");
  EXPECT_EQ(comfyui::describe_execution_error(intr),
            "interrupted at node 12 (XFuserSamplerCustomAdvanced)");
}

}  // namespace
}  // namespace h3pipe::runtime
