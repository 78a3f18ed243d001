// configs/comfyui/templates: each template is what the splitter makes of its whole workflow
// (so the halves stay consistent), and each half passes the checks ComfyUI 0.3.64 applies at
// POST /prompt, against the recorded /object_info, for every class that is core.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/comfyui/split.h"
#include "common/comfyui/template_check.h"
#include "common/runtime/comfyui_workflow.h"

namespace fs = std::filesystem;
using namespace h3pipe::comfyui;

namespace {

const fs::path kSource = H3PIPE_SOURCE_DIR;
const fs::path kTemplates = kSource / "configs" / "comfyui" / "templates";

Json read(const fs::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in) << p;
  return Json::parse(in);
}

const ObjectInfo& recorded() {
  static ObjectInfo oi = [] {
    auto r =
        ObjectInfo::parse(read(kSource / "tests/comfyui_split/recorded_object_info_v0.3.64.json"));
    EXPECT_TRUE(r.ok());
    return std::move(*r);
  }();
  return oi;
}

// Core plus h3pipe's node pack as a real 0.3.64 server with the pack installed answered.
const ObjectInfo& with_pack() {
  static ObjectInfo oi = [] {
    Json j = read(kSource / "tests/comfyui_split/recorded_object_info_v0.3.64.json");
    j.update(read(kSource / "tests/comfyui_split/recorded_object_info_h3pipe_nodes.json"));
    auto r = ObjectInfo::parse(j);
    EXPECT_TRUE(r.ok());
    return std::move(*r);
  }();
  return oi;
}

// Classes not in ComfyUI core, per template (the folder's README says the same).
const std::map<std::string, std::set<std::string>> kNotCore = {
    {"minimax_h3_two_host",
     {"H3SaveLatent", "H3LoadLatent", "H3MultiGPUCLIPLoader", "MiniMaxH3ImageToVideo",
      "RayInitializer", "RayUNETLoader", "RayLoraLoader", "RayMiniMaxH3SigmaShift",
      "RayBasicScheduler", "RayBasicGuider", "XFuserSamplerCustomAdvanced"}},
};

std::vector<std::string> template_names() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(kTemplates))
    if (e.is_directory()) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Templates, TheSetUsersAskFor) {
  std::vector<std::string> want = {"hunyuanvideo_i2v", "hunyuanvideo_t2v",    "ltxv_i2v",
                                   "ltxv_t2v",         "minimax_h3_two_host", "wan2.1_i2v",
                                   "wan2.1_t2v",       "wan2.2_14b_i2v",      "wan2.2_5b_i2v",
                                   "wan2.2_5b_t2v"};
  EXPECT_EQ(template_names(), want);
}

TEST(Templates, EachIsTheSplitOfItsWorkflow) {
  for (const auto& name : template_names()) {
    SCOPED_TRACE(name);
    fs::path d = kTemplates / name;
    SplitOptions o;
    bool core = !kNotCore.count(name);
    o.object_info = core ? &recorded() : nullptr;
    o.workflow_dir = "configs/comfyui/templates/" + name;
    if (name == "minimax_h3_two_host")
      o.decode_url = "http://127.0.0.1:8192";  // the seeds' decode host
    auto r = split_workflow(read(d / "workflow.api.json"), o);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->sample, read(d / "sample.api.json"));
    EXPECT_EQ(r->decode, read(d / "decode.api.json"));
    EXPECT_EQ(r->inject, read(d / "inject.json"));
    EXPECT_EQ(r->snippet, read(d / "config.snippet.json"));
    // Every job parameter a template should take is wired.
    for (const char* p : {"prompt", "seed", "width", "height", "frames", "filename_prefix"})
      EXPECT_TRUE(r->inject["sample"].contains(p)) << p;
    for (const char* p : {"input", "fps", "filename_prefix"})
      EXPECT_TRUE(r->inject["decode"].contains(p)) << p;
    if (name.find("i2v") != std::string::npos || name == "minimax_h3_two_host")
      EXPECT_TRUE(r->inject["sample"].contains("reference_image"));
    else
      EXPECT_FALSE(r->inject["sample"].contains("reference_image"));
  }
}

TEST(Templates, ClassesAndInputsValidAgainstRecordedObjectInfo) {
  for (const auto& name : template_names()) {
    fs::path d = kTemplates / name;
    Json inject = read(d / "inject.json");
    for (const char* side : {"sample", "decode"}) {
      SCOPED_TRACE(name + " " + side);
      Json g = read(d / (std::string(side) + ".api.json"));
      CheckOptions o;
      o.injected = injected_inputs(inject[side]);
      o.skip_unknown_classes = true;
      o.skip_empty_file_lists = true;  // the recording server has no model files
      for (const auto& issue : check_workflow(g, with_pack(), o)) ADD_FAILURE() << issue.message;
      // Which classes are not core: only h3pipe's nodes, except where the README says otherwise.
      std::set<std::string> missing;
      for (const auto& c : classes_of(g))
        if (!recorded().find(c)) missing.insert(c);
      std::set<std::string> allowed = {"H3SaveLatent", "H3LoadLatent"};
      if (kNotCore.count(name)) allowed = kNotCore.at(name);
      for (const auto& c : missing) EXPECT_TRUE(allowed.count(c)) << c << " is not in core";
    }
  }
}

// The snippet's settings are what the comfyui runtime accepts: every inject target exists, is a
// widget, and every parameter is one the runtime knows (runtime::comfyui::Workflow::parse).
TEST(Templates, SnippetsParseAsRuntimeSettings) {
  for (const auto& name : template_names()) {
    SCOPED_TRACE(name);
    Json snip = read(kTemplates / name / "config.snippet.json");
    for (const char* stage : {"sample", "decode"}) {
      const Json& s = snip["stages"][stage]["runtime"]["settings"];
      EXPECT_EQ(s["workflow"], "configs/comfyui/templates/" + name + "/" + stage + ".api.json");
      Json graph = read(kSource / s["workflow"].get<std::string>());
      h3pipe::config::Errors e;
      auto w = h3pipe::runtime::comfyui::Workflow::parse(graph, &s["inject"], &s["output"],
                                                         std::string("/stages/") + stage, e);
      EXPECT_TRUE(w.has_value()) << e.joined();
    }
    EXPECT_EQ(snip["stages"]["encode"]["runtime"]["settings"]["fused"], true);
  }
}

// The whole workflows the templates and tests start from use core classes and inputs as ComfyUI
// 0.3.64 declares them (the shapes of its example workflows).
TEST(Templates, WholeWorkflowsAreRealShaped) {
  std::vector<fs::path> files;
  for (const auto& name : template_names())
    if (!kNotCore.count(name)) files.push_back(kTemplates / name / "workflow.api.json");
  for (const auto& e : fs::directory_iterator(kSource / "tests/comfyui_split/workflows"))
    if (e.path().string().size() > 9 &&
        e.path().string().substr(e.path().string().size() - 9) == ".api.json")
      files.push_back(e.path());
  ASSERT_GE(files.size(), 19u);
  for (const auto& f : files) {
    SCOPED_TRACE(f.string());
    CheckOptions o;
    o.skip_empty_file_lists = true;
    for (const auto& issue : check_workflow(read(f), recorded(), o)) ADD_FAILURE() << issue.message;
  }
}

TEST(TemplateCheck, FindsWhatPostPromptWouldReject) {
  Json g = read(kTemplates / "wan2.1_i2v" / "sample.api.json");
  Json oi_json = read(kSource / "tests/comfyui_split/recorded_object_info_v0.3.64.json");
  // A server with models: the VAE list names one file, not the template's.
  oi_json["VAELoader"]["input"]["required"]["vae_name"][0] = Json::array({"other_vae.safetensors"});
  auto oi = ObjectInfo::parse(oi_json);
  ASSERT_TRUE(oi.ok());
  g["3"]["inputs"]["sampler_name"] = "euler_fast";            // not a sampler ComfyUI has
  g["3"]["inputs"]["steps"] = 0;                              // below min 1
  g["3"]["inputs"].erase("cfg");                              // required
  g["3"]["inputs"]["latent_image"] = Json::array({"38", 0});  // a CLIP where a LATENT goes
  EXPECT_TRUE(
      check_workflow(read(kTemplates / "wan2.1_i2v" / "sample.api.json"), *oi, {{}, true, true})
          .size() == 1);  // only the VAE file
  auto issues = check_workflow(g, *oi);
  std::map<std::string, IssueKind> got;
  for (const auto& i : issues) got[i.node + "/" + i.input] = i.kind;
  EXPECT_EQ(got["3/sampler_name"], IssueKind::kBadValue);
  EXPECT_EQ(got["3/steps"], IssueKind::kBadValue);
  EXPECT_EQ(got["3/cfg"], IssueKind::kMissingInput);
  EXPECT_EQ(got["3/latent_image"], IssueKind::kBadLink);
  EXPECT_EQ(got["39/vae_name"], IssueKind::kMissingModelFile);
  EXPECT_EQ(got["57/"], IssueKind::kUnknownClass);  // H3SaveLatent: no node pack on that server
  bool named = false;
  for (const auto& i : issues)
    named |= i.message.find(
                 "node 39 (VAELoader, \"Load VAE\"): input \"vae_name\": model file "
                 "\"wan_2.1_vae.safetensors\" is not on the server (it has: "
                 "other_vae.safetensors)") != std::string::npos;
  EXPECT_TRUE(named);
}

}  // namespace
