// End to end through the real local stack (`h3pipe start`: private redis-server and the service
// processes) with the sample and decode stages on the comfyui runtime, against FakeComfyUiServer
// (faithful to a real ComfyUI 0.3.64: validation, caching, the upload cap; ComfyUI itself needs
// model weights that cannot be had here).  A Wan 2.1 image-to-video graph of core nodes samples,
// a latent-load / VAE-decode / CreateVideo / SaveVideo graph decodes.  Label: e2e.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/latent/latent.h"
#include "common/queue/keys.h"
#include "common/queue/redis.h"
#include "common/runtime/comfyui_client.h"
#include "tests/support/fake_comfyui.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
namespace fs = std::filesystem;
using nlohmann::json;
using runtime::testing::FakeComfyUiServer;

namespace {

json node(const char* cls, json inputs) {
  return {{"class_type", cls}, {"inputs", std::move(inputs)}};
}

const std::vector<std::string> kModels = {"diffusion_models/wan2.1_i2v_480p_14B_fp16.safetensors",
                                          "text_encoders/umt5_xxl_fp8_e4m3fn_scaled.safetensors",
                                          "vae/wan_2.1_vae.safetensors"};

json sample_runtime(const std::string& url) {
  json g = {
      {"1", node("UNETLoader", {{"unet_name", "wan2.1_i2v_480p_14B_fp16.safetensors"},
                                {"weight_dtype", "default"}})},
      {"2", node("CLIPLoader",
                 {{"clip_name", "umt5_xxl_fp8_e4m3fn_scaled.safetensors"}, {"type", "wan"}})},
      {"3", node("CLIPTextEncode", {{"text", ""}, {"clip", {"2", 0}}})},
      {"4", node("CLIPTextEncode", {{"text", "blurry"}, {"clip", {"2", 0}}})},
      {"5", node("VAELoader", {{"vae_name", "wan_2.1_vae.safetensors"}})},
      {"6", node("LoadImage", {{"image", "placeholder.png"}})},
      {"7", node("WanImageToVideo", {{"positive", {"3", 0}},
                                     {"negative", {"4", 0}},
                                     {"vae", {"5", 0}},
                                     {"width", 832},
                                     {"height", 480},
                                     {"length", 81},
                                     {"batch_size", 1},
                                     {"start_image", {"6", 0}}})},
      {"8", node("KSampler", {{"model", {"1", 0}},
                              {"seed", 0},
                              {"steps", 20},
                              {"cfg", 6.0},
                              {"sampler_name", "uni_pc"},
                              {"scheduler", "simple"},
                              {"positive", {"7", 0}},
                              {"negative", {"7", 1}},
                              {"latent_image", {"7", 2}},
                              {"denoise", 1.0}})},
      {"9", node("H3SaveAVLatent", {{"samples", {"8", 0}}, {"filename_prefix", "h3pipe/latent"}})}};
  json inject = {{"prompt", {{"node", "3"}, {"input", "text"}}},
                 {"width", {{"node", "7"}, {"input", "width"}}},
                 {"height", {{"node", "7"}, {"input", "height"}}},
                 {"frames", {{"node", "7"}, {"input", "length"}}},
                 {"seed", {{"node", "8"}, {"input", "seed"}}},
                 {"steps", {{"node", "8"}, {"input", "steps"}}},
                 {"params.sampler", {{"node", "8"}, {"input", "sampler_name"}}},
                 {"reference_image", {{"node", "6"}, {"input", "image"}}},
                 {"filename_prefix", {{"node", "9"}, {"input", "filename_prefix"}}}};
  return {{"name", "comfyui"},
          {"settings",
           {{"url", url},
            {"workflow", g},
            {"inject", inject},
            {"output", {{"node", "9"}}},
            {"poll_ms", 50}}}};
}

json decode_runtime(const std::string& url) {
  json g = {{"1", node("H3LoadAVLatent", {{"path", "latent.h3latent"}})},
            {"2", node("VAELoader", {{"vae_name", "wan_2.1_vae.safetensors"}})},
            {"3", node("VAEDecode", {{"samples", {"1", 0}}, {"vae", {"2", 0}}})},
            {"4", node("CreateVideo", {{"images", {"3", 0}}, {"fps", 24.0}})},
            {"5", node("SaveVideo", {{"video", {"4", 0}},
                                     {"filename_prefix", "h3pipe/video"},
                                     {"format", "mp4"},
                                     {"codec", "h264"}})}};
  json inject = {{"input", {{"node", "1"}, {"input", "path"}}},
                 {"fps", {{"node", "4"}, {"input", "fps"}}},
                 {"filename_prefix", {{"node", "5"}, {"input", "filename_prefix"}}}};
  return {{"name", "comfyui"},
          {"settings", {{"url", url}, {"workflow", g}, {"inject", inject}, {"poll_ms", 50}}}};
}

// A fake ComfyUI serving both stages and a local stack configured for it.
class ComfyStack {
 public:
  explicit ComfyStack(FakeComfyUiServer::Options o = {}) {
    // The latent the fake "samples" (the job geometry: 128x96, 25 frames at 12 fps) and the MP4
    // it "decodes" to (H.264 + AAC, made by ffmpeg).
    latent::Latent l = latent::make_latent(latent::builtin_profile(), {128, 96, 25, 12});
    l.video.assign(l.geometry.video_elems(), 0.25f);
    l.audio.assign(l.geometry.audio_elems(), 0.1f);
    o.latent = dir_.path() / "fake.h3latent";
    EXPECT_TRUE(latent::write_latent(o.latent, l).ok());
    o.mp4 = dir_.path() / "fake.mp4";
    EXPECT_EQ(ts::sh("ffmpeg -v error -f lavfi -i testsrc=s=128x96:r=12:d=2.0834 -f lavfi -i "
                     "sine=r=48000:d=2.0834 "
                     "-frames:v 25 -c:v libx264 -pix_fmt yuv420p -c:a aac -ac 2 -shortest " +
                     o.mp4.string())
                  .first,
              0);
    o.models = kModels;
    server_ = std::make_unique<FakeComfyUiServer>(dir_.path() / "comfy", o);
    json cfg = json::parse(R"({
      "name": "comfy-e2e", "queue": {"lease_ms": 3000, "renew_ms": 500, "sweep_ms": 200, "block_ms": 50, "max_deliveries": 3},
      "hosts": [{"name": "local"}],
      "pools": [
        {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
        {"name": "s0", "host": "local", "stage": "sample"},
        {"name": "dec", "host": "local", "stage": "decode"}]})");
    cfg["stages"] = {{"sample", {{"runtime", sample_runtime(server_->url())}}},
                     {"decode", {{"runtime", decode_runtime(server_->url())}}}};
    cfg["state_dir"] = state().string();
    config_ = dir_.path() / "cluster.json";
    std::ofstream(config_) << cfg.dump(2);
    EXPECT_EQ(ts::sh(cli() + " start >/dev/null 2>&1").first, 0) << log("supervisor.log");
    // Reference images come from the state dir's inputs/ (the default limits.input_roots).
    fs::create_directories(state() / "inputs");
    ref_ = state() / "inputs" / "reference.png";
    EXPECT_EQ(ts::sh("ffmpeg -v error -f lavfi -i color=c=red:s=64x64 -frames:v 1 " + ref_.string())
                  .first,
              0);
  }
  ~ComfyStack() { ts::sh(cli() + " stop >/dev/null 2>&1"); }

  std::string cli() const { return ts::bin("h3pipe") + " --config " + config_.string(); }
  fs::path state() const { return dir_.path() / "state"; }
  FakeComfyUiServer& server() { return *server_; }
  std::string job(const std::string& id, const std::string& extra = "") const {
    return fmt::format(
               R"({{"jobId":"{}","prompt":"clip {}","width":128,"height":96,"frames":25,"fps":12,"seed":7,)"
               R"("referenceImage":"{}"{}}})",
               id, id, ref_.string(), extra) +
           "\n";
  }
  // {exit code, the run id}; the run's stderr when it fails.
  std::pair<int, std::string> submit(const std::string& text) {
    std::ofstream(dir_.path() / "b.jsonl") << text;
    std::string base = cli() + " run " + (dir_.path() / "b.jsonl").string() + " --background";
    auto r = ts::sh(base + " 2>/dev/null");
    if (r.first != 0) return {r.first, ts::sh(base + " 2>&1").second};
    return {r.first, r.second.substr(0, r.second.find('\n'))};
  }
  int wait(const std::string& run, int timeout_s = 120) {
    return ts::sh(cli() + " wait " + run + " --timeout " + std::to_string(timeout_s) +
                  " >/dev/null 2>&1")
        .first;
  }
  json status(const std::string& run) {
    return json::parse(ts::sh(cli() + " status " + run + " --json").second);
  }
  std::string log(const std::string& name) const {
    std::ifstream in(state() / "logs" / name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  json stack() const {
    json j;
    std::ifstream(state() / "stack.json") >> j;
    return j;
  }
  int pid_of(const std::string& name) const {
    const json s = stack();
    for (const auto& p : s["processes"])
      if (p["name"] == name) return p["pid"];
    return -1;
  }
  std::unique_ptr<queue::Redis> redis() const {
    return std::move(queue::Redis::connect(ts::stack_redis(stack())).value());
  }
  std::string field(const std::string& run, const std::string& job, const std::string& f) const {
    return queue::reply_str(redis()->command({"HGET", keys::job(run, job), f})->get());
  }
  // Prompts the fake accepted or rejected, by h3pipe's prompt id.
  std::map<std::string, int> prompts_by_id() const {
    std::map<std::string, int> n;
    for (const auto& p : server_->recorded("prompt")) ++n[p.value("prompt_id", std::string("?"))];
    return n;
  }

 private:
  ts::TempDir dir_;
  std::unique_ptr<FakeComfyUiServer> server_;
  fs::path config_, ref_;
};

json ffprobe(const fs::path& mp4) {
  auto [rc, out] =
      ts::sh("ffprobe -v error -show_entries stream=codec_name,codec_type,width,height -of json " +
             mp4.string());
  return rc == 0 ? json::parse(out) : json();
}

}  // namespace

TEST(ComfyUiStack, ABatchSamplesAndDecodesOnComfyUiIntoValidMp4s) {
  ComfyStack st;
  auto [rc, run] = st.submit(st.job("c0") + st.job("c1") + st.job("c2"));
  ASSERT_EQ(rc, 0) << run;
  ASSERT_EQ(st.wait(run), 0) << st.log("sampler-s0.log") << st.log("decoder-dec.log");
  for (int i = 0; i < 3; ++i) {
    std::string j = fmt::format("c{}", i);
    json r;
    std::ifstream(st.state() / "outputs" / run / (j + ".pipeline.json")) >> r;
    EXPECT_EQ(r["stages"][1]["runtime"], "comfyui");
    EXPECT_EQ(r["stages"][2]["runtime"], "comfyui");
    auto probe = ffprobe(st.state() / "outputs" / run / (j + ".mp4"));
    ASSERT_EQ(probe["streams"].size(), 2u) << j;
    EXPECT_EQ(probe["streams"][0]["codec_name"], "h264");
    EXPECT_EQ(probe["streams"][1]["codec_name"], "aac");
  }
  // Six prompts, each under its own h3pipe prompt id, once; the uploaded reference image reached
  // the sampler graph.
  auto ids = st.prompts_by_id();
  EXPECT_EQ(ids.size(), 6u);
  for (const auto& [id, n] : ids) EXPECT_EQ(n, 1) << id;
  EXPECT_EQ(ids.count(runtime::comfyui::prompt_id_for(run, "c0", "sample", 1)), 1u);
  bool saw_ref = false;
  for (const auto& p : st.server().recorded("prompt"))
    if (p["prompt"].contains("6"))
      saw_ref |=
          p["prompt"]["6"]["inputs"]["image"] == "h3pipe/h3pipe_" + run + "_c0_sample_ref.png";
  EXPECT_TRUE(saw_ref);
}

TEST(ComfyUiStack, AReferenceImageOutsideTheInputRootsIsRefusedAtSubmissionOnEveryDoor) {
  ComfyStack st;
  auto text =
      fmt::format(
          R"({{"jobId":"x","prompt":"p","width":128,"height":96,"frames":25,"referenceImage":"/etc/passwd"}})") +
      "\n";
  auto [rc, out] = st.submit(text);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("referenceImage: /etc/passwd is not under an input root"), std::string::npos)
      << out;
  // Straight into the submission stream: the job fails with the same reason, nothing is uploaded.
  auto r = st.redis();
  ASSERT_TRUE(
      r->command(
           {"XADD", keys::submit(), "*", "run", "viaredis", "spec",
            R"({"jobId":"y","prompt":"p","width":64,"height":64,"frames":9,"referenceImage":"/etc/shadow"})"})
          .ok());
  ASSERT_TRUE(ts::wait_for([&] { return st.status("viaredis").value("failed", 0) == 1; }, 20));
  auto s = st.status("viaredis");
  EXPECT_NE(s["jobs"][0]["error"].get<std::string>().find(
                "referenceImage: /etc/shadow is not under an input root"),
            std::string::npos)
      << s.dump();
  EXPECT_TRUE(st.server().recorded("upload").empty());
}

TEST(ComfyUiStack, AWorkerKilledMidPromptIsRetriedWithoutQueueingASecondPrompt) {
  FakeComfyUiServer::Options o;
  o.exec_delay_ms = 4000;
  ComfyStack st(o);
  auto [rc, run] = st.submit(st.job("k0"));
  ASSERT_EQ(rc, 0) << run;
  std::string first = runtime::comfyui::prompt_id_for(run, "k0", "sample", 1);
  ASSERT_TRUE(ts::wait_for([&] { return st.prompts_by_id().count(first) == 1; }, 30));
  int pid = st.pid_of("sampler-s0");
  ASSERT_GT(pid, 0) << st.stack().dump();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);  // mid-prompt: the fake is still "sampling"
  ASSERT_EQ(st.wait(run), 0) << st.log("sampler-s0.log");
  EXPECT_EQ(st.field(run, "k0", "attempts:sample"), "2") << "the killed delivery and its retry";
  int sample_prompts = 0;
  for (const auto& p : st.server().recorded("prompt")) sample_prompts += p["prompt"].contains("9");
  EXPECT_EQ(sample_prompts, 1) << "the retry adopted the running prompt";
  for (const auto& [id, n] : st.prompts_by_id()) EXPECT_EQ(n, 1) << id;
  json r;
  std::ifstream(st.state() / "outputs" / run / "k0.pipeline.json") >> r;
  auto reported = json::parse(r["stages"][1].value("settingsJson", std::string("{}")));
  EXPECT_EQ(reported["runtime_reported"]["prompt_id"], first) << r["stages"][1].dump();
  EXPECT_EQ(reported["runtime_reported"]["adopted"], true);
}

TEST(ComfyUiStack, AValidationErrorIsDeadLetteredAtOnce) {
  ComfyStack st;
  auto [rc, run] =
      st.submit(st.job("good") + st.job("bad", R"(,"params":{"sampler":"no_such_sampler"})"));
  ASSERT_EQ(rc, 0) << run;
  EXPECT_EQ(st.wait(run), 1);
  auto s = st.status(run);
  EXPECT_EQ(s["done"], 1);
  EXPECT_EQ(s["failed"], 1);
  EXPECT_EQ(st.field(run, "bad", "attempts:sample"), "1") << "permanent: no retry";
  std::string err;
  for (const auto& j : s["jobs"])
    if (j["job_id"] == "bad") err = j.value("error", "");
  EXPECT_NE(err.find("runtime.permanent.comfyui_rejected"), std::string::npos) << err;
  EXPECT_NE(
      err.find("node 8 (KSampler): Value not in list (sampler_name: 'no_such_sampler' not in"),
      std::string::npos)
      << err;
  auto r = st.redis();
  EXPECT_EQ(queue::reply_int(r->command({"XLEN", keys::dead_letter()})->get()), 1);
}

TEST(ComfyUiStack, AnUploadAboveTheServersCapIsPermanent) {
  FakeComfyUiServer::Options o;
  o.max_upload_bytes = 8192;  // the reference image fits, the latent does not
  ComfyStack st(o);
  auto [rc, run] = st.submit(st.job("big"));
  ASSERT_EQ(rc, 0) << run;
  EXPECT_EQ(st.wait(run), 1);
  EXPECT_EQ(st.field(run, "big", "attempts:decode"), "1");
  auto s = st.status(run);
  std::string err = s["jobs"][0].value("error", "");
  EXPECT_NE(err.find("runtime.permanent.comfyui_too_large"), std::string::npos) << err;
  EXPECT_NE(err.find("HTTP 413"), std::string::npos) << err;
  EXPECT_NE(err.find("input_dir"), std::string::npos) << err;
  EXPECT_EQ(st.server().recorded("too_large").size(), 1u);
}
