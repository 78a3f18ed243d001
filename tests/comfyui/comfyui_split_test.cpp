// `h3pipe comfyui split` on real-shaped workflows of ComfyUI 0.3.64's core video models: the cut
// graphs, inject maps and config snippets checked exactly against the files under expected/,
// the UI format converted with the recorded /object_info, and every way a workflow cannot be
// split answered with the node and the reason.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "common/comfyui/split.h"
#include "common/comfyui/split_files.h"
#include "common/comfyui/ui_workflow.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using namespace h3pipe::comfyui;

namespace {

const fs::path kDir = fs::path(H3PIPE_SOURCE_DIR) / "tests" / "comfyui";

Json read(const fs::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in) << p;
  return Json::parse(in);
}

const ObjectInfo& recorded() {
  static ObjectInfo oi = [] {
    auto r = ObjectInfo::parse(read(kDir / "recorded_object_info_v0.3.64.json"));
    EXPECT_TRUE(r.ok());
    return std::move(*r);
  }();
  return oi;
}

SplitResult split_ok(const Json& g, const ObjectInfo* oi, const std::string& dir) {
  SplitOptions o;
  o.object_info = oi;
  o.workflow_dir = dir;
  auto r = split_workflow(g, o);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? std::move(*r) : SplitResult{};
}

h3pipe::Error split_error(const Json& g, const ObjectInfo* oi = nullptr) {
  SplitOptions o;
  o.object_info = oi;
  auto r = split_workflow(g, o);
  EXPECT_FALSE(r.ok());
  return r.ok() ? h3pipe::Error{} : r.error();
}

struct Case {
  std::string name, sampler, profile;
  Layout layout;
};

class SplitGolden : public ::testing::TestWithParam<Case> {};

TEST_P(SplitGolden, MatchesExpectedGraphsAndInjectMaps) {
  const Case& c = GetParam();
  Json g = read(kDir / "workflows" / (c.name + ".api.json"));
  fs::path exp = kDir / "expected" / c.name;
  std::string dir = "tests/comfyui/expected/" + c.name;
  // With the server's /object_info and without it (output names from the built-in tables):
  // the same split.
  for (const ObjectInfo* oi : {&recorded(), static_cast<const ObjectInfo*>(nullptr)}) {
    SCOPED_TRACE(oi ? "with object_info" : "without object_info");
    SplitResult r = split_ok(g, oi, dir);
    EXPECT_EQ(r.sampler, c.sampler);
    EXPECT_EQ(r.profile, c.profile);
    EXPECT_EQ(r.layout, c.layout);
    EXPECT_EQ(r.sample, read(exp / "sample.api.json")) << r.sample.dump(1);
    EXPECT_EQ(r.decode, read(exp / "decode.api.json")) << r.decode.dump(1);
    EXPECT_EQ(r.inject, read(exp / "inject.json")) << r.inject.dump(1);
    EXPECT_EQ(r.snippet, read(exp / "config.snippet.json")) << r.snippet.dump(1);
    // Original ids kept: every node of each side is the input's node, or the save/load node.
    for (const Json* side : {&r.sample, &r.decode})
      for (auto it = side->begin(); it != side->end(); ++it) {
        if (it.key() == r.save_node || it.key() == r.load_node) continue;
        ASSERT_TRUE(g.contains(it.key())) << it.key();
        EXPECT_EQ(it.value()["class_type"], g[it.key()]["class_type"]);
      }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Workflows, SplitGolden,
    ::testing::Values(Case{"wan2.1_t2v", "3", "wan2.1", Layout::kVideo},
                      Case{"wan2.1_i2v", "3", "wan2.1", Layout::kVideo},
                      Case{"wan2.2_14b_i2v", "58", "wan2.1", Layout::kVideo},
                      Case{"wan2.2_5b_ti2v", "3", "wan2.2-5b", Layout::kVideo},
                      Case{"hunyuanvideo_t2v", "13", "hunyuanvideo", Layout::kVideo},
                      Case{"hunyuanvideo_i2v", "13", "hunyuanvideo", Layout::kVideo},
                      Case{"ltxv_t2v", "72", "ltxv", Layout::kVideo},
                      Case{"ltxv_i2v", "72", "ltxv", Layout::kVideo},
                      Case{"wan2.1_t2v_with_audio", "3", "wan2.1", Layout::kVideoAudio}),
    [](const auto& info) {
      std::string n = info.param.name;
      for (auto& ch : n)
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

TEST(Split, KeyFactsOfTheCut) {
  // Read the expected files once more as a person would: the boundary and the rewiring.
  auto r = split_ok(read(kDir / "workflows" / "wan2.1_t2v_with_audio.api.json"), &recorded(), ".");
  const Json& save = r.sample[r.save_node];
  EXPECT_EQ(save["class_type"], "H3SaveLatent");
  EXPECT_EQ(save["inputs"]["samples"], Json::array({"3", 0}));
  EXPECT_EQ(save["inputs"]["audio"], Json::array({"66", 0}));
  EXPECT_EQ(r.decode["8"]["inputs"]["samples"], Json::array({r.load_node, 0}));
  EXPECT_EQ(r.decode["67"]["inputs"]["samples"], Json::array({r.load_node, 1}));
  EXPECT_FALSE(r.sample.contains("8"));  // no decode on the sample side
  EXPECT_FALSE(r.decode.contains("3"));  // no sampler on the decode side
  EXPECT_FALSE(r.decode.contains("6"));  // nor its text encoders
  // The audio sampler gets the job's seed but keeps its own prompt and steps.
  EXPECT_EQ(r.inject["sample"]["seed"],
            Json::parse(R"([{"node":"3","input":"seed"},{"node":"66","input":"seed"}])"));
  EXPECT_EQ(r.inject["sample"]["prompt"], Json::parse(R"({"node":"6","input":"text"})"));

  // Wan 2.2 14B: the two chained KSamplerAdvanced both stay upstream; steps are not injected.
  auto w = split_ok(read(kDir / "workflows" / "wan2.2_14b_i2v.api.json"), &recorded(), ".");
  EXPECT_TRUE(w.sample.contains("57"));
  EXPECT_FALSE(w.inject["sample"].contains("steps"));
  // i2v: positive/negative found through WanImageToVideo's outputs; the image is injectable.
  EXPECT_EQ(w.inject["sample"]["negative_prompt"], Json::parse(R"({"node":"7","input":"text"})"));
  EXPECT_EQ(w.inject["sample"]["reference_image"], Json::parse(R"({"node":"52","input":"image"})"));
}

TEST(Split, UiFormatConvertsWithRecordedObjectInfo) {
  Json ui = read(kDir / "workflows" / "wan2.1_t2v.ui.json");
  ASSERT_TRUE(is_ui_format(ui));
  auto api = ui_to_api(ui, recorded());
  ASSERT_TRUE(api.ok()) << api.error().message;
  // Reroute resolved, bypassed LoRA passed through, muted preview and note dropped, the seed's
  // control_after_generate value skipped, the PrimitiveNode's width written in.
  EXPECT_EQ(*api, read(kDir / "workflows" / "wan2.1_t2v.api.json")) << api->dump(1);
  auto r = split_ok(*api, &recorded(), "tests/comfyui/expected/wan2.1_t2v");
  EXPECT_EQ(r.sample, read(kDir / "expected" / "wan2.1_t2v" / "sample.api.json"));
  EXPECT_EQ(r.decode, read(kDir / "expected" / "wan2.1_t2v" / "decode.api.json"));
}

TEST(Split, UiFormatErrors) {
  Json ui = read(kDir / "workflows" / "wan2.1_t2v.ui.json");
  // Without object_info the splitter refuses the UI file and says how to convert it.
  auto e = split_error(ui);
  EXPECT_EQ(e.code, "comfyui.workflow.ui_format");
  EXPECT_NE(e.message.find("--server"), std::string::npos);
  // A class the server does not know.
  Json sub = ui;
  sub["definitions"] = {{"subgraphs", Json::array({{{"id", "a1b2"}, {"nodes", Json::array()}}})}};
  sub["nodes"][3]["type"] = "a1b2";
  auto s = ui_to_api(sub, recorded());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, "comfyui.ui.subgraph");
  EXPECT_NE(s.error().message.find("node 90 (a1b2) is a subgraph"), std::string::npos)
      << s.error().message;
  ui["nodes"][0]["type"] = "WanVideoModelLoader";
  auto r = ui_to_api(ui, recorded());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, "comfyui.split.unknown_class");
  EXPECT_NE(r.error().message.find("node 37 (WanVideoModelLoader)"), std::string::npos);
}

TEST(Split, CustomDecoderKnownFromObjectInfo) {
  // A custom pack's decoder (LATENT + VAE in, IMAGE out): found through /object_info.
  Json j = read(kDir / "recorded_object_info_v0.3.64.json");
  j["KJTiledVideoDecode"] = j["VAEDecodeTiled"];
  j["KJTiledVideoDecode"]["name"] = "KJTiledVideoDecode";
  j["KJTiledVideoDecode"]["python_module"] = "custom_nodes.kj";
  auto oi = ObjectInfo::parse(j);
  ASSERT_TRUE(oi.ok());
  Json g = read(kDir / "workflows" / "hunyuanvideo_t2v.api.json");
  g["73"]["class_type"] = "KJTiledVideoDecode";
  auto r = split_ok(g, &*oi, ".");
  EXPECT_EQ(r.sampler, "13");
  EXPECT_EQ(r.decode["73"]["inputs"]["samples"], Json::array({r.load_node, 0}));
  // Without object_info the class means nothing: no decoder.
  EXPECT_EQ(split_error(g).code, "comfyui.split.no_decoder");
}

TEST(Split, TwoSamplersAreAmbiguousAndNameBoth) {
  auto e = split_error(read(kDir / "workflows" / "two_seeds_unsplittable.api.json"), &recorded());
  EXPECT_EQ(e.code, "comfyui.split.ambiguous");
  EXPECT_NE(e.message.find("node 3 (KSampler, \"KSampler seed A\")"), std::string::npos)
      << e.message;
  EXPECT_NE(e.message.find("node 4 (KSampler, \"KSampler seed B\")"), std::string::npos)
      << e.message;
}

TEST(Split, GraphsThatCannotBeSplit) {
  Json wan = read(kDir / "workflows" / "wan2.1_t2v.api.json");
  struct Bad {
    std::function<void(Json&)> edit;
    std::string code, says;
  };
  const std::vector<Bad> cases = {
      {[](Json& g) {
         g = Json::array({1, 2});
       },
       "comfyui.workflow.not_graph", "non-empty JSON object"},
      {[](Json& g) { g = Json::object(); }, "comfyui.workflow.not_graph", "empty object"},
      {[](Json& g) { g["6"].erase("class_type"); }, "comfyui.workflow.node",
       "node \"6\" has no \"class_type\""},
      {[](Json& g) {
         g["8"]["inputs"]["vae"] = Json::array({"99", 0});
       },
       "comfyui.workflow.missing_node", "input \"vae\" links to node \"99\""},
      {[](Json& g) {
         g["48"]["inputs"]["model"] = Json::array({"3", 0});
       },
       "comfyui.workflow.cycle", "nodes 3, 48"},
      {[](Json& g) {
         g.erase("8");
         g.erase("28");
         g.erase("49");
         g.erase("50");
         g["51"] = {{"class_type", "SaveLatent"},
                    {"inputs", {{"samples", {"3", 0}}, {"filename_prefix", "x"}}}};
       },
       "comfyui.split.no_decoder", "no VAE decode node"},
      {[](Json& g) {
         g["60"] = {{"class_type", "LoadLatent"}, {"inputs", {{"latent", "x.latent"}}}};
         g["8"]["inputs"]["samples"] = Json::array({"60", 0});
       },
       "comfyui.split.no_sampler",
       "node 8 (VAEDecode, \"VAE Decode\") decodes the latent of node 60 (LoadLatent)"},
      {[](Json& g) {
         g.erase("28");
         g.erase("49");
         g.erase("50");
       },
       "comfyui.split.no_output", "reaches no output node"},
  };
  for (const auto& c : cases) {
    Json g = wan;
    c.edit(g);
    auto e = split_error(g);
    EXPECT_EQ(e.code, c.code) << e.message;
    EXPECT_NE(e.message.find(c.says), std::string::npos) << e.message;
  }
  // A class that is not in the server's object_info, named with its node.
  Json g = wan;
  g["48"]["class_type"] = "WanVideoSampler";
  auto e = split_error(g, &recorded());
  EXPECT_EQ(e.code, "comfyui.split.unknown_class");
  EXPECT_NE(e.message.find("node 48 (WanVideoSampler"), std::string::npos) << e.message;
  // Audio only: a latent of the Stable Audio branch alone.
  Json a = read(kDir / "workflows" / "wan2.1_t2v_with_audio.api.json");
  a.erase("8");
  a["49"]["inputs"].erase("images");
  e = split_error(a);
  EXPECT_EQ(e.code, "comfyui.split.audio_only") << e.message;
}

TEST(Split, AvLatentThroughASeparateNodeIsOneNestedLatent) {
  // LTX-2 (newer ComfyUI): one AV LATENT, split on the decode side by LTXVSeparateAVLatent.
  Json g = Json::parse(R"({
    "1": {"class_type": "EmptyLTXVLatentVideo", "inputs": {"width": 768, "height": 512, "length": 97, "batch_size": 1}},
    "2": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
    "3": {"class_type": "SamplerCustomAdvanced", "inputs": {"noise": ["4", 0], "guider": ["5", 0], "sampler": ["2", 0], "sigmas": ["6", 0], "latent_image": ["1", 0]}},
    "4": {"class_type": "RandomNoise", "inputs": {"noise_seed": 7}},
    "5": {"class_type": "BasicGuider", "inputs": {"model": ["9", 0], "conditioning": ["10", 0]}},
    "6": {"class_type": "LTXVScheduler", "inputs": {"steps": 20, "max_shift": 2.05, "base_shift": 0.95, "stretch": true, "terminal": 0.1}},
    "7": {"class_type": "LTXVSeparateAVLatent", "inputs": {"av_latent": ["3", 0]}},
    "8": {"class_type": "VAEDecode", "inputs": {"samples": ["7", 0], "vae": ["9", 2]}},
    "9": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "ltx-2.safetensors"}},
    "10": {"class_type": "CLIPTextEncode", "inputs": {"text": "rain", "clip": ["9", 1]}},
    "11": {"class_type": "LTXVAudioVAEDecode", "inputs": {"samples": ["7", 1], "audio_vae": ["9", 2]}},
    "12": {"class_type": "CreateVideo", "inputs": {"images": ["8", 0], "audio": ["11", 0], "fps": 25.0}},
    "13": {"class_type": "SaveVideo", "inputs": {"video": ["12", 0], "filename_prefix": "v", "format": "mp4", "codec": "h264"}}})");
  auto r = split_ok(g, nullptr, ".");
  EXPECT_EQ(r.layout, Layout::kAvNested);
  EXPECT_EQ(r.sample[r.save_node]["inputs"]["samples"], Json::array({"3", 0}));
  EXPECT_FALSE(r.sample[r.save_node]["inputs"].contains("audio"));
  EXPECT_EQ(r.decode["7"]["inputs"]["av_latent"], Json::array({r.load_node, 0}));
  EXPECT_EQ(r.inject["sample"]["seed"], Json::parse(R"({"node":"4","input":"noise_seed"})"));
  EXPECT_EQ(r.inject["sample"]["prompt"], Json::parse(R"({"node":"10","input":"text"})"));
}

// MiniMax H3 as ComfyUI core ships it (comfy_extras/nodes_minimax_h3.py), held-out workflows
// that are not the templates: each splits with profile minimax-h3, the node that decided it
// named, the nested AV latent saved whole and given whole to both decoders.
const ObjectInfo& h3_source() {
  static ObjectInfo oi = [] {
    auto r = ObjectInfo::parse(read(kDir / "object_info_minimax_h3_from_source.json"));
    EXPECT_TRUE(r.ok());
    return std::move(*r);
  }();
  return oi;
}

void expect_h3_cut(const SplitResult& r, const std::string& sampler, int width, int height,
                   int frames) {
  EXPECT_EQ(r.profile, "minimax-h3");
  EXPECT_EQ(r.snippet["latent_profile"], "minimax-h3");
  EXPECT_EQ(r.layout, Layout::kAvNested);
  EXPECT_EQ(r.sampler, sampler);
  const Json& save = r.sample[r.save_node]["inputs"];
  EXPECT_EQ(save["samples"], Json::array({sampler, 0}));
  EXPECT_FALSE(save.contains("audio"));
  EXPECT_EQ(save["profile"], "minimax-h3");
  EXPECT_EQ(save["width"], width);
  EXPECT_EQ(save["height"], height);
  EXPECT_EQ(save["frames"], frames);
  EXPECT_EQ(save["fps"], 24);
  int decoders = 0;
  for (auto it = r.decode.begin(); it != r.decode.end(); ++it)
    if (it.value()["class_type"] == "VAEDecode" || it.value()["class_type"] == "VAEDecodeAudio") {
      EXPECT_EQ(it.value()["inputs"]["samples"], Json::array({r.load_node, 0})) << it.key();
      ++decoders;
    }
  EXPECT_EQ(decoders, 2);
  bool noted = false;
  for (const auto& n : r.notes)
    noted |= n.find("both take the loader's output 0") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(SplitMiniMaxH3, TextToVideoWithCfgGuider) {
  Json g = read(kDir / "workflows" / "minimax_h3_t2v_cfg.api.json");
  for (const ObjectInfo* oi : {&h3_source(), static_cast<const ObjectInfo*>(nullptr)}) {
    SCOPED_TRACE(oi ? "with object_info" : "without object_info");
    auto r = split_ok(g, oi, ".");
    expect_h3_cut(r, "112", 1344, 768, 362);
    EXPECT_EQ(r.profile_node, "106");  // MiniMaxH3ImageToVideo, whose output 1 is the LATENT
    EXPECT_EQ(r.inject["sample"]["prompt"], Json::parse(R"({"node":"106","input":"prompt"})"));
    EXPECT_EQ(r.inject["sample"]["negative_prompt"],
              Json::parse(R"({"node":"107","input":"text"})"));
    EXPECT_EQ(r.inject["sample"]["frames"],
              Json::parse(R"([{"node":"106","input":"length"},{"node":"117","input":"frames"}])"));
    EXPECT_EQ(r.inject["sample"]["seed"], Json::parse(R"({"node":"109","input":"noise_seed"})"));
    EXPECT_FALSE(r.decode.contains("106"));
  }
}

TEST(SplitMiniMaxH3, FirstFrameOnlyWithKSamplerAndAnOffGridLength) {
  auto r =
      split_ok(read(kDir / "workflows" / "minimax_h3_fl2v_first_only.api.json"), &h3_source(), ".");
  // length 121 makes 124 frames (ComfyUI snaps it up to 17k+5): the save node checks 124.
  expect_h3_cut(r, "7", 544, 960, 124);
  EXPECT_EQ(r.profile_node, "6");
  EXPECT_EQ(r.inject["sample"]["reference_image"], Json::parse(R"({"node":"12","input":"image"})"));
  bool snapped = false;
  for (const auto& n : r.notes)
    snapped |= n.find("length 121 makes 124 frames") != std::string::npos;
  EXPECT_TRUE(snapped);
}

TEST(SplitMiniMaxH3, ReferenceToVideoWithTwoPicturesAndAnEmptyAvLatent) {
  Json g = read(kDir / "workflows" / "minimax_h3_ref2va_two_pictures.api.json");
  for (const ObjectInfo* oi : {&h3_source(), static_cast<const ObjectInfo*>(nullptr)}) {
    SCOPED_TRACE(oi ? "with object_info" : "without object_info");
    auto r = split_ok(g, oi, ".");
    expect_h3_cut(r, "44", 1344, 768, 124);
    EXPECT_EQ(r.profile_node, "31");  // EmptyMiniMaxH3LatentAV makes the sampler's latent
    // The prompt is behind MiniMaxH3AddGuide, which only adds a guide to the conditioning.
    EXPECT_EQ(r.inject["sample"]["prompt"], Json::parse(R"({"node":"30","input":"prompt"})"));
    EXPECT_TRUE(r.sample.contains("22"));  // the voice (LoadAudio) stays with the sampler
    EXPECT_EQ(r.sample["30"]["inputs"]["ref_images.ref_image_1"], Json::array({"21", 0}));
  }
}

TEST(SplitMiniMaxH3, UiFormatWorkflow) {
  // The same t2v as the UI saves it (nodes/links, widgets_values), converted with the
  // source-written /object_info.
  Json ui = read(kDir / "workflows" / "minimax_h3_t2v.ui.json");
  auto api = ui_to_api(ui, h3_source());
  ASSERT_TRUE(api.ok()) << api.error().message;
  auto r = split_ok(*api, &h3_source(), ".");
  expect_h3_cut(r, "11", 736, 416, 124);
  EXPECT_EQ(r.profile_node, "6");
  EXPECT_EQ((*api)["2"]["inputs"]["type"], "minimax");
}

// A graph that does not tell its latent profile is refused, naming --profile and the profiles;
// --profile NAME splits it with that profile.
TEST(SplitProfile, UnknownLatentSourceIsRefusedAndProfileFlagDecides) {
  Json g = read(kDir / "workflows" / "wan2.1_t2v.api.json");
  g["60"] = {{"class_type", "LoadLatent"}, {"inputs", {{"latent", "start.latent"}}}};
  g["3"]["inputs"]["latent_image"] = Json::array({"60", 0});
  auto e = split_error(g);
  EXPECT_EQ(e.code, "comfyui.split.profile") << e.message;
  EXPECT_NE(e.message.find("--profile NAME"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("minimax-h3"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("wan2.1"), std::string::npos) << e.message;
  EXPECT_EQ(e.message.find("builtin"), std::string::npos) << e.message;
  SplitOptions o;
  o.profile = "wan2.1";
  auto r = split_workflow(g, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->profile, "wan2.1");
  EXPECT_EQ(r->profile_node, "");
  EXPECT_EQ(r->snippet["latent_profile"], "wan2.1");
  o.profile = "builtin";  // h3pipe's own model's latent: never a ComfyUI graph's
  EXPECT_EQ(split_workflow(g, o).error().code, "comfyui.split.profile");
  // An H3 graph whose latent comes from a file: MiniMaxH3SigmaShift still names the model.
  Json h = read(kDir / "workflows" / "minimax_h3_fl2v_first_only.api.json");
  h["60"] = {{"class_type", "LoadLatent"}, {"inputs", {{"latent", "start.latent"}}}};
  h["7"]["inputs"]["latent_image"] = Json::array({"60", 0});
  auto hr = split_ok(h, nullptr, ".");
  EXPECT_EQ(hr.profile, "minimax-h3");
  EXPECT_EQ(hr.profile_node, "5");
  // --profile wins over what the graph says, and says so.
  o.profile = "ltx2";
  auto forced = split_workflow(read(kDir / "workflows" / "minimax_h3_t2v_cfg.api.json"), o);
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(forced->profile, "ltx2");
  bool said = false;
  for (const auto& n : forced->notes)
    said |= n.find("makes a minimax-h3 latent; latent_profile ltx2 as --profile asks") !=
            std::string::npos;
  EXPECT_TRUE(said);
}

TEST(SplitFiles, AllOrNothingAndNeverOutsideTheFolder) {
  const h3pipe::test_support::TempDir tmp_dir("h3split");
  const fs::path& tmp = tmp_dir.path();
  auto r = split_ok(read(kDir / "workflows" / "ltxv_t2v.api.json"), &recorded(), ".");
  auto files = split_files(r);
  ASSERT_TRUE(write_files(tmp / "out", files, false).ok());
  for (const auto& f : files) EXPECT_EQ(read(tmp / "out" / f.name), Json::parse(f.content));
  // A second run without --force: refused, the files untouched, no temporaries left.
  auto before = fs::last_write_time(tmp / "out" / "sample.api.json");
  auto again = write_files(tmp / "out", files, false);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, "comfyui.split.exists");
  EXPECT_EQ(fs::last_write_time(tmp / "out" / "sample.api.json"), before);
  // A symlink planted at one of the names is not followed and not replaced.
  fs::create_directories(tmp / "elsewhere");
  fs::create_directories(tmp / "out2");
  fs::create_symlink(tmp / "elsewhere" / "victim.json", tmp / "out2" / "inject.json");
  auto planted = write_files(tmp / "out2", files, true);
  ASSERT_FALSE(planted.ok());
  EXPECT_FALSE(fs::exists(tmp / "elsewhere" / "victim.json"));
  EXPECT_FALSE(fs::exists(tmp / "out2" / "sample.api.json"));  // nothing half-written
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(tmp / "out2")) n += !e.is_symlink();
  EXPECT_EQ(n, 0u);
}

// The CLI: a UI file without a server is refused and nothing is written.
TEST(SplitCli, UiFileWithoutServerWritesNothing) {
  const h3pipe::test_support::TempDir tmp_dir("h3splitcli");
  const fs::path& tmp = tmp_dir.path();
  std::string cmd = std::string(H3PIPE_BIN_DIR) + "/h3pipe comfyui split " +
                    (kDir / "workflows" / "wan2.1_t2v.ui.json").string() + " -o " +
                    (tmp / "out").string() + " 2>" + (tmp.string() + ".err");
  int st = std::system(cmd.c_str());
  EXPECT_EQ(WEXITSTATUS(st), 2);
  EXPECT_FALSE(fs::exists(tmp / "out"));
  std::ifstream err(tmp.string() + ".err");
  std::stringstream ss;
  ss << err.rdbuf();
  EXPECT_NE(ss.str().find("--server URL or --object-info FILE"), std::string::npos) << ss.str();
  fs::remove(tmp.string() + ".err");
  // With the recorded object_info it splits, and the files are those of the API workflow.
  cmd = std::string(H3PIPE_BIN_DIR) + "/h3pipe comfyui split " +
        (kDir / "workflows" / "wan2.1_t2v.ui.json").string() + " -o " + (tmp / "out").string() +
        " --workflow-dir tests/comfyui/expected/wan2.1_t2v --object-info " +
        (kDir / "recorded_object_info_v0.3.64.json").string() + " >/dev/null";
  ASSERT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 0);
  for (const char* f : {"sample.api.json", "decode.api.json", "inject.json", "config.snippet.json"})
    EXPECT_EQ(read(tmp / "out" / f), read(kDir / "expected" / "wan2.1_t2v" / f)) << f;
}

std::string run_cli(const std::string& args, int& rc) {
  fs::path out = fs::temp_directory_path() / ("h3splitcli_out_" + std::to_string(::getpid()));
  std::string cmd =
      std::string(H3PIPE_BIN_DIR) + "/h3pipe comfyui split " + args + " >" + out.string() + " 2>&1";
  rc = WEXITSTATUS(std::system(cmd.c_str()));
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  fs::remove(out);
  return ss.str();
}

// The CLI prints which node decided the profile; a graph that does not tell is refused with
// nothing written, and --profile NAME splits it.
TEST(SplitCli, ProfileFromTheGraphOrFromTheFlag) {
  const h3pipe::test_support::TempDir tmp_dir("h3splitprof");
  const fs::path& tmp = tmp_dir.path();
  fs::create_directories(tmp);
  int rc = 0;
  std::string said =
      run_cli((kDir / "workflows" / "minimax_h3_ref2va_two_pictures.api.json").string() + " -o " +
                  (tmp / "h3").string(),
              rc);
  EXPECT_EQ(rc, 0) << said;
  EXPECT_NE(said.find("latent profile minimax-h3 (from node 31 EmptyMiniMaxH3LatentAV)"),
            std::string::npos)
      << said;
  Json g = read(kDir / "workflows" / "wan2.1_t2v.api.json");
  g["60"] = {{"class_type", "LoadLatent"}, {"inputs", {{"latent", "start.latent"}}}};
  g["3"]["inputs"]["latent_image"] = Json::array({"60", 0});
  std::ofstream(tmp / "unknown.api.json") << g.dump();
  said = run_cli((tmp / "unknown.api.json").string() + " -o " + (tmp / "unknown").string(), rc);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(said.find("pass --profile NAME"), std::string::npos) << said;
  EXPECT_FALSE(fs::exists(tmp / "unknown"));
  said = run_cli((tmp / "unknown.api.json").string() + " -o " + (tmp / "unknown").string() +
                     " --profile wan2.1",
                 rc);
  EXPECT_EQ(rc, 0) << said;
  EXPECT_NE(said.find("latent profile wan2.1 (from --profile)"), std::string::npos) << said;
  EXPECT_EQ(read(tmp / "unknown" / "config.snippet.json")["latent_profile"], "wan2.1");
}

}  // namespace
