// A split core MiniMax H3 text-to-video workflow end to end through the real local stack
// (`h3pipe start`: private redis-server and the service processes), its sample and decode stages
// on the comfyui runtime against FakeComfyUiServer in --exec-python-nodes mode: h3pipe's node pack
// runs unchanged, the H3 core classes are weight-free stand-ins with the specs of ComfyUI's source
// (tests/runtime/h3_standin_*.py): MiniMaxH3ImageToVideo makes ComfyUI's
// NestedTensor((video, audio)) of ComfyUI's shapes, the stand-in sampler is a deterministic
// function of its inputs, VAEDecode / VAEDecodeAudio take unbind()[0] / unbind()[-1], SaveVideo
// writes a real H.264 + AAC MP4.  The workflow is
// configs/comfyui/templates/minimax_h3_t2v/workflow.api.json, cut by `h3pipe comfyui split` as a
// user would.  The ref2va and first/last-frame templates run the same way with the job's own
// voice (a LoadAudio stand-in as comfy_extras/nodes_audio.py's) and frames (#36 item 4).
// Label: e2e.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/core/sha256.h"
#include "tests/support/fake_comfyui.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
namespace fs = std::filesystem;
using nlohmann::json;
using runtime::testing::FakeComfyUiServer;

namespace {

const fs::path kTemplate = fs::path(H3PIPE_SOURCE_DIR) / "configs/comfyui/templates/minimax_h3_t2v";
const fs::path kObjectInfo =
    fs::path(H3PIPE_SOURCE_DIR) / "tests/comfyui/object_info_minimax_h3_from_source.json";

json read_json(const fs::path& p) {
  json j;
  std::ifstream(p) >> j;
  return j;
}

// ComfyUI's H3 rules (comfy_extras/nodes_minimax_h3.py temporal_shape), written here on their own
// so that the test does not check h3pipe against itself.
struct H3Shape {
  std::vector<long> video, audio;
};
H3Shape comfy_h3_shape(int width, int height, int frames) {
  long t = frames <= 5 ? 2 : (frames - 5) / 17 * 5 + 2;
  long a = std::lround(frames / 24.0 * 40.0);
  return {{1, 24, t, height / 16, width / 16}, {1, 32, 2, a}};
}

// The model files the template names, so the fake's loader lists hold them.
std::vector<std::string> models_of(const json& wf) {
  const std::map<std::string, std::pair<std::string, std::string>> folder = {
      {"UNETLoader", {"unet_name", "diffusion_models"}},
      {"CLIPLoader", {"clip_name", "text_encoders"}},
      {"VAELoader", {"vae_name", "vae"}}};
  std::vector<std::string> out;
  for (const auto& [id, n] : wf.items())
    if (auto f = folder.find(n["class_type"]); f != folder.end())
      out.push_back(f->second.second + "/" + n["inputs"][f->second.first].get<std::string>());
  return out;
}

std::string file_sha(const fs::path& p) {
  auto s = sha256_file(p);
  return s.ok() ? *s : "unreadable: " + p.string();
}

class H3Stack {
 public:
  explicit H3Stack(const fs::path& tmpl = kTemplate) {
    FakeComfyUiServer::Options o;
    o.exec_python_nodes = "h3pipe_nodes,h3_standins";
    o.models = models_of(read_json(tmpl / "workflow.api.json"));
    server_ = std::make_unique<FakeComfyUiServer>(dir_.path() / "comfy", o);
    auto [rc, out] =
        ts::sh(ts::bin("h3pipe") + " comfyui split " + (tmpl / "workflow.api.json").string() +
               " -o " + split().string() + " --object-info " + kObjectInfo.string() +
               " --sample-url " + server_->url() + " 2>&1");
    EXPECT_EQ(rc, 0) << out;
    split_log_ = out;
    snippet_ = read_json(split() / "config.snippet.json");
    json cfg = json::parse(R"({
      "name": "comfy-h3-e2e", "queue": {"lease_ms": 5000, "renew_ms": 500, "sweep_ms": 200, "block_ms": 50, "max_deliveries": 2},
      "hosts": [{"name": "local"}],
      "pools": [{"name": "enc", "host": "local", "stage": "encode"},
                {"name": "s0", "host": "local", "stage": "sample"},
                {"name": "dec", "host": "local", "stage": "decode"}]})");
    cfg["latent_profile"] = snippet_["latent_profile"];
    cfg["stages"] = snippet_["stages"];
    for (auto& [stage, s] : cfg["stages"].items())
      if (s["runtime"]["settings"].contains("workflow")) s["runtime"]["settings"]["poll_ms"] = 50;
    cfg["state_dir"] = state().string();
    fs::create_directories(inputs());
    cfg["limits"]["input_roots"] = {inputs().string()};
    config_ = dir_.path() / "cluster.json";
    std::ofstream(config_) << cfg.dump(2);
    EXPECT_EQ(ts::sh(cli() + " start >/dev/null 2>&1").first, 0) << log("supervisor.log");
  }
  ~H3Stack() { ts::sh(cli() + " stop >/dev/null 2>&1"); }

  fs::path split() const { return dir_.path() / "split"; }
  fs::path state() const { return dir_.path() / "state"; }
  fs::path inputs() const { return dir_.path() / "inputs"; }  // limits.input_roots
  const json& snippet() const { return snippet_; }
  const std::string& split_log() const { return split_log_; }
  FakeComfyUiServer& server() { return *server_; }
  std::string cli() const { return ts::bin("h3pipe") + " --config " + config_.string(); }

  // {exit code, the run id or the error}
  std::pair<int, std::string> submit(const std::string& text) {
    std::ofstream(dir_.path() / "b.jsonl") << text;
    const std::string base = cli() + " run " + (dir_.path() / "b.jsonl").string() + " --background";
    auto r = ts::sh(base + " 2>/dev/null");
    if (r.first != 0) return {r.first, ts::sh(base + " 2>&1").second};
    return {r.first, r.second.substr(0, r.second.find('\n'))};
  }
  std::pair<int, std::string> wait(const std::string& run, int timeout_s = 240) {
    return ts::sh(cli() + " wait " + run + " --timeout " + std::to_string(timeout_s) + " 2>&1");
  }
  std::string log(const std::string& name) const {
    std::ifstream in(state() / "logs" / name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  ts::TempDir dir_;
  std::unique_ptr<FakeComfyUiServer> server_;
  fs::path config_;
  json snippet_;
  std::string split_log_;
};

struct Job {
  std::string id;
  int width, height, frames, seed;
};

std::string job_line(const Job& j) {
  return json({{"jobId", j.id},
               {"prompt", "a red paper kite, take " + j.id},
               {"width", j.width},
               {"height", j.height},
               {"frames", j.frames},
               {"fps", 24},
               {"seed", j.seed},
               {"steps", 4}})
             .dump() +
         "\n";
}

json ffprobe(const fs::path& mp4) {
  auto [rc, out] = ts::sh(
      "ffprobe -v error -count_frames -show_entries "
      "stream=codec_type,codec_name,width,height,nb_read_frames,sample_rate,channels "
      "-of json " +
      mp4.string());
  return rc == 0 ? json::parse(out) : json();
}

}  // namespace

TEST(ComfyUiH3Stack, ASplitCoreH3WorkflowRunsEndToEndWithComfyUisShapesAndAnIntactShaChain) {
  H3Stack st;
  // The split chose the profile from the graph, and cut at the sampler's one AV latent.
  ASSERT_EQ(st.snippet().value("latent_profile", ""), "minimax-h3") << st.split_log();
  // The decode half feeds the loader's whole AV latent (output 0) to both decoders, as ComfyUI's
  // own graph does; the sample half saves the sampler's output with the H3 profile.
  std::map<std::string, json> by_class;
  const json halves = {read_json(st.split() / "sample.api.json"),
                       read_json(st.split() / "decode.api.json")};
  for (const auto& half : halves)
    for (const auto& [id, n] : half.items()) by_class[n["class_type"].get<std::string>()] = n;
  ASSERT_EQ(by_class.count("H3LoadLatent"), 1u);
  EXPECT_EQ(by_class["VAEDecode"]["inputs"]["samples"][1], 0);
  EXPECT_EQ(by_class["VAEDecodeAudio"]["inputs"]["samples"][1], 0);
  EXPECT_EQ(by_class["VAEDecode"]["inputs"]["samples"][0],
            by_class["VAEDecodeAudio"]["inputs"]["samples"][0]);
  EXPECT_EQ(by_class["H3SaveLatent"]["inputs"]["profile"], "minimax-h3");

  // The fake's H3 classes answer /object_info with the specs written from ComfyUI's source.
  const json source = read_json(kObjectInfo);
  for (const char* cls :
       {"MiniMaxH3ImageToVideo", "MiniMaxH3SigmaShift", "EmptyMiniMaxH3LatentAV"}) {
    auto [rc, out] = ts::sh("curl -sf " + st.server().url() + "/object_info/" + cls);
    ASSERT_EQ(rc, 0) << cls;
    EXPECT_EQ(json::parse(out)[cls]["input"], source[cls]["input"]) << cls;
    EXPECT_EQ(json::parse(out)[cls]["output"], source[cls]["output"]) << cls;
  }

  const std::vector<Job> jobs = {{"t0", 256, 160, 22, 7},
                                 {"t1", 256, 160, 22, 8},
                                 {"t2", 256, 160, 22, 7},
                                 {"long", 736, 416, 124, 11}};
  std::string text;
  for (const auto& j : jobs) text += job_line(j);
  auto [rc, run] = st.submit(text);
  ASSERT_EQ(rc, 0) << run;
  auto [wrc, wout] = st.wait(run);
  ASSERT_EQ(wrc, 0) << wout << st.log("sampler-s0.log") << st.log("decoder-dec.log");

  std::map<std::string, std::string> latent_sha, mp4_sha;
  for (const auto& j : jobs) {
    SCOPED_TRACE(j.id);
    const fs::path out = st.state() / "outputs" / run;
    const json r = read_json(out / (j.id + ".pipeline.json"));
    ASSERT_EQ(r["stages"].size(), 3u) << r.dump(1);
    const json &enc = r["stages"][0], &smp = r["stages"][1], &dec = r["stages"][2];
    EXPECT_EQ(enc["stage"], "STAGE_ENCODE");
    EXPECT_EQ(smp["stage"], "STAGE_SAMPLE");
    EXPECT_EQ(dec["stage"], "STAGE_DECODE");
    for (const auto* s : {&enc, &smp, &dec}) EXPECT_EQ((*s)["runtime"], "comfyui");

    // The chain conditioning -> latent -> mp4: every hash is the file's, each stage's input is
    // the previous stage's output.
    for (const auto* s : {&enc, &smp, &dec})
      EXPECT_EQ((*s)["outputSha256"], file_sha((*s)["outputPath"].get<std::string>()))
          << (*s)["stage"];
    EXPECT_EQ(smp["inputSha256"], enc["outputSha256"]);
    EXPECT_EQ(dec["inputSha256"], smp["outputSha256"]);
    EXPECT_EQ(r["mp4Sha256"], dec["outputSha256"]);
    EXPECT_EQ(r["mp4Sha256"], file_sha(out / (j.id + ".mp4")));
    const fs::path latent = smp["outputPath"].get<std::string>();

    // The latent is the file ComfyUI's save node wrote, byte for byte, and the decode prompt
    // loaded the same bytes.
    const json reported =
        json::parse(smp.value("settingsJson", std::string("{}")))["runtime_reported"];
    const fs::path saved = st.server().output_dir() / reported.value("output", std::string("?"));
    EXPECT_EQ(file_sha(saved), smp["outputSha256"]) << saved;
    std::string staged;
    for (const auto& p : st.server().recorded("prompt"))
      for (const auto& [id, n] : p["prompt"].items())
        if (n["class_type"] == "H3LoadLatent" && n["inputs"]["path"].get<std::string>().find(
                                                     "_" + j.id + "_decode") != std::string::npos)
          staged = n["inputs"]["path"];
    ASSERT_FALSE(staged.empty());
    EXPECT_EQ(file_sha(fs::path(staged).is_absolute() ? fs::path(staged)
                                                      : st.server().input_dir() / staged),
              smp["outputSha256"]);

    // ComfyUI's shapes and the nested layout, as h3pipe reads them.
    const std::string geometry = fmt::format("{}x{}x{}@24", j.width, j.height, j.frames);
    auto [irc, inspect] =
        ts::sh(ts::bin("h3pipe") + " latent inspect --json --profile minimax-h3 --geometry " +
               geometry + " " + latent.string() + " 2>&1");
    ASSERT_EQ(irc, 0) << inspect;
    const json li = json::parse(inspect);
    EXPECT_EQ(li["layout"], "av_nested");
    EXPECT_EQ(li["profile"], "minimax-h3");
    const H3Shape want = comfy_h3_shape(j.width, j.height, j.frames);
    std::map<std::string, std::vector<long>> shapes;
    for (const auto& t : li["tensors"]) shapes[t["name"]] = t["shape"].get<std::vector<long>>();
    EXPECT_EQ(shapes["video"], want.video);
    EXPECT_EQ(shapes["audio"], want.audio);

    // The movie: the job's size and frame count, H.264 and an AAC stream.
    const json probe = ffprobe(out / (j.id + ".mp4"));
    ASSERT_EQ(probe["streams"].size(), 2u) << probe.dump();
    for (const auto& s : probe["streams"]) {
      if (s["codec_type"] == "video") {
        EXPECT_EQ(s["codec_name"], "h264");
        EXPECT_EQ(s["width"], j.width);
        EXPECT_EQ(s["height"], j.height);
        EXPECT_EQ(s["nb_read_frames"], std::to_string(j.frames));
      } else {
        EXPECT_EQ(s["codec_type"], "audio");
        EXPECT_EQ(s["codec_name"], "aac");
        EXPECT_EQ(s["channels"], 2);
      }
    }
    latent_sha[j.id] = smp["outputSha256"];
    mp4_sha[j.id] = r["mp4Sha256"];
  }
  // The stand-in sampler is a function of its inputs: another seed, another latent and movie.
  EXPECT_NE(latent_sha["t0"], latent_sha["t1"]);
  EXPECT_NE(mp4_sha["t0"], mp4_sha["t1"]);
  EXPECT_NE(latent_sha["t0"], latent_sha["t2"]) << "same seed, other prompt";

  // What the sample prompts carried: the job's geometry into ComfyUI's H3 node, its seed into
  // RandomNoise.
  int sample_prompts = 0;
  for (const auto& p : st.server().recorded("prompt")) {
    for (const auto& [id, n] : p["prompt"].items()) {
      if (n["class_type"] != "MiniMaxH3ImageToVideo") continue;
      ++sample_prompts;
      const bool known = std::any_of(jobs.begin(), jobs.end(), [&](const Job& j) {
        return n["inputs"]["width"] == j.width && n["inputs"]["height"] == j.height &&
               n["inputs"]["length"] == j.frames;
      });
      EXPECT_TRUE(known) << n.dump();
    }
  }
  EXPECT_EQ(sample_prompts, static_cast<int>(jobs.size()));
}

TEST(ComfyUiH3Stack, AFrameCountOffTheH3GridIsRefusedAtSubmission) {
  H3Stack st;
  auto [rc, out] = st.submit(job_line({"off", 256, 160, 24, 1}));
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("17k+5 frames (e.g. 39), got 24"), std::string::npos)
      << out;  // the rule, the next count
  EXPECT_TRUE(st.server().recorded("prompt").empty());
}

// The seeds' ref2va template with the job's own picture and voice (referenceImage,
// referenceAudio): `comfyui split` injects the voice into its LoadAudio, the sampler host uploads
// the job's file (from the input roots) and the sample prompt loads it through the LoadAudio
// stand-in (comfy_extras/nodes_audio.py's answers: AUDIO waveform [1, C, L], the file's rate); the
// movie carries an AAC stream.  Another voice makes another latent (the stand-in's conditioning
// takes the references' contents), and a voice outside the input roots is refused at submission
// naming referenceAudio.
TEST(ComfyUiH3Stack, Ref2vaTakesTheJobsVoiceAndPictureEndToEnd) {
  H3Stack st(fs::path(H3PIPE_SOURCE_DIR) / "configs/comfyui/templates/minimax_h3_ref2va");
  ASSERT_EQ(st.snippet().value("latent_profile", ""), "minimax-h3") << st.split_log();
  ASSERT_EQ(st.snippet()["stages"]["sample"]["runtime"]["settings"]["inject"]["reference_audio"],
            json({{"node", "17"}, {"input", "audio"}}))
      << st.split_log();
  auto gen = [&](const std::string& args) {
    auto [rc, out] = ts::sh("ffmpeg -v error -y " + args + " 2>&1");
    ASSERT_EQ(rc, 0) << out;
  };
  gen("-f lavfi -i testsrc=size=256x160:rate=1 -frames:v 1 " + (st.inputs() / "ref.png").string());
  gen("-f lavfi -i sine=frequency=440:sample_rate=16000:duration=1 -ac 1 " +
      (st.inputs() / "voice_a.wav").string());
  gen("-f lavfi -i sine=frequency=660:sample_rate=16000:duration=1 -ac 1 " +
      (st.inputs() / "voice_b.wav").string());

  auto line = [](const std::string& id, const std::string& voice) {
    return json({{"jobId", id},
                 {"prompt", "<Picture 1> says, in the voice of <Audio 1>: hello"},
                 {"referenceImage", "ref.png"},
                 {"referenceAudio", voice},
                 {"width", 256},
                 {"height", 160},
                 {"frames", 22},
                 {"fps", 24},
                 {"seed", 5},
                 {"steps", 4}})
               .dump() +
           "\n";
  };
  // A voice outside the input roots: refused before anything runs, naming the field.
  auto [brc, bout] = st.submit(line("bad", "/etc/passwd"));
  EXPECT_EQ(brc, 2) << bout;
  EXPECT_NE(bout.find("referenceAudio"), std::string::npos) << bout;
  EXPECT_NE(bout.find("not under an input root"), std::string::npos) << bout;
  auto [erc, eout] = st.submit(line("esc", "../inputs/voice_a.wav"));
  EXPECT_EQ(erc, 2) << eout;
  EXPECT_NE(eout.find("referenceAudio"), std::string::npos) << eout;
  EXPECT_TRUE(st.server().recorded("prompt").empty());

  auto [rc, run] = st.submit(line("va", "voice_a.wav") + line("vb", "voice_b.wav"));
  ASSERT_EQ(rc, 0) << run;
  auto [wrc, wout] = st.wait(run);
  ASSERT_EQ(wrc, 0) << wout << st.log("sampler-s0.log") << st.log("decoder-dec.log");

  std::map<std::string, std::string> latent_sha;
  for (const char* id : {"va", "vb"}) {
    SCOPED_TRACE(id);
    const fs::path out = st.state() / "outputs" / run;
    const json r = read_json(out / (std::string(id) + ".pipeline.json"));
    ASSERT_EQ(r["stages"].size(), 3u) << r.dump(1);
    latent_sha[id] = r["stages"][1]["outputSha256"];
    const json probe = ffprobe(out / (std::string(id) + ".mp4"));
    int audio = 0;
    for (const auto& s : probe["streams"])
      if (s["codec_type"] == "audio") ++audio;
    EXPECT_EQ(audio, 1) << probe.dump();
    // The sample prompt's LoadAudio loaded the job's own voice, uploaded byte for byte.
    const std::string voice = std::string(id) == "va" ? "voice_a.wav" : "voice_b.wav";
    std::string staged;
    for (const auto& p : st.server().recorded("prompt"))
      for (const auto& [nid, n] : p["prompt"].items())
        if (n["class_type"] == "LoadAudio" &&
            n["inputs"]["audio"].get<std::string>().find(std::string("_") + id + "_sample") !=
                std::string::npos)
          staged = n["inputs"]["audio"];
    ASSERT_FALSE(staged.empty());
    EXPECT_EQ(file_sha(st.server().input_dir() / staged), file_sha(st.inputs() / voice));
  }
  EXPECT_NE(latent_sha["va"], latent_sha["vb"]) << "another voice, same prompt, seed, picture";
}

// The seeds' first/last-frame template with the job's own frames (referenceImage as the first,
// lastFrameImage as the last): each LoadImage of the sample prompt loads the job's file, uploaded
// byte for byte, and the movie is made.  A last frame outside the input roots is refused at
// submission naming lastFrameImage.
TEST(ComfyUiH3Stack, Fl2vTakesTheJobsFirstAndLastFrameEndToEnd) {
  H3Stack st(fs::path(H3PIPE_SOURCE_DIR) / "configs/comfyui/templates/minimax_h3_fl2v");
  ASSERT_EQ(st.snippet()["stages"]["sample"]["runtime"]["settings"]["inject"]["last_frame_image"],
            json({{"node", "17"}, {"input", "image"}}))
      << st.split_log();
  for (const char* name : {"first.png", "last.png"}) {
    auto [rc, out] = ts::sh(
        "ffmpeg -v error -y -f lavfi -i " + std::string(name[0] == 'f' ? "testsrc" : "smptebars") +
        "=size=256x160:rate=1 -frames:v 1 " + (st.inputs() / name).string() + " 2>&1");
    ASSERT_EQ(rc, 0) << out;
  }
  auto line = [](const std::string& id, const std::string& last) {
    return json({{"jobId", id},
                 {"prompt", "a red paper kite glides through a clear blue sky"},
                 {"referenceImage", "first.png"},
                 {"lastFrameImage", last},
                 {"width", 256},
                 {"height", 160},
                 {"frames", 22},
                 {"fps", 24},
                 {"seed", 3},
                 {"steps", 4}})
               .dump() +
           "\n";
  };
  auto [brc, bout] = st.submit(line("bad", "/etc/hostname"));
  EXPECT_EQ(brc, 2) << bout;
  EXPECT_NE(bout.find("lastFrameImage"), std::string::npos) << bout;

  auto [rc, run] = st.submit(line("kite", "last.png"));
  ASSERT_EQ(rc, 0) << run;
  auto [wrc, wout] = st.wait(run);
  ASSERT_EQ(wrc, 0) << wout << st.log("sampler-s0.log") << st.log("decoder-dec.log");
  const json probe = ffprobe(st.state() / "outputs" / run / "kite.mp4");
  ASSERT_FALSE(probe["streams"].empty()) << probe.dump();
  std::map<std::string, std::string> loaded;  // node id -> staged file
  for (const auto& p : st.server().recorded("prompt"))
    for (const auto& [nid, n] : p["prompt"].items())
      if (n["class_type"] == "LoadImage") loaded[nid] = n["inputs"]["image"];
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_EQ(file_sha(st.server().input_dir() / loaded["16"]), file_sha(st.inputs() / "first.png"));
  EXPECT_EQ(file_sha(st.server().input_dir() / loaded["17"]), file_sha(st.inputs() / "last.png"));
}
