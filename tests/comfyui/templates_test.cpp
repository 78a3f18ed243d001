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
    auto r = ObjectInfo::parse(read(kSource / "tests/comfyui/recorded_object_info_v0.3.64.json"));
    EXPECT_TRUE(r.ok());
    return std::move(*r);
  }();
  return oi;
}

Json json_of(const char* name) {
  return read(kSource / "tests/comfyui" / name);
}

// ComfyUI validates a prompt against its classes' inputs with every Autogrow input expanded to
// its slots ("ref_images" -> "ref_images.ref_image_0" .. "ref_images.ref_image_8": comfy_api
// latest/_io.py, Autogrow._expand_schema_for_dynamic); the same here, so that the checks below
// see the slots a template links.
Json expand_autogrow(Json j) {
  for (auto& c : j) {
    if (!c.is_object() || !c.contains("input")) continue;
    Json& input = c["input"];
    Json slots_required = Json::object(), slots_optional = Json::object();
    for (const char* section : {"required", "optional"}) {
      if (!input.contains(section)) continue;
      Json kept = Json::object();
      for (auto it = input[section].begin(); it != input[section].end(); ++it) {
        const Json& spec = it.value();
        if (!(spec.is_array() && spec[0] == "COMFY_AUTOGROW_V3")) {
          kept[it.key()] = spec;
          continue;
        }
        const Json& t = spec[1]["template"];
        bool template_required = t["input"].contains("required");
        const Json& slot =
            (template_required ? t["input"]["required"] : t["input"]["optional"]).begin().value();
        for (int i = 0; i < t["max"].get<int>(); ++i) {
          std::string name = it.key() + "." + t["prefix"].get<std::string>() + std::to_string(i);
          (i < t["min"].get<int>() && template_required ? slots_required : slots_optional)[name] =
              slot;
        }
      }
      input[section] = kept;
    }
    if (!slots_required.empty()) input["required"].update(slots_required);
    if (!slots_optional.empty()) input["optional"].update(slots_optional);
    c.erase("input_order");
  }
  return j;
}

// The pack's save and load nodes as it declares them now: its profile combos are its
// latent_profiles.json (the recorded answer predates the minimax-h3 profile).
Json pack_nodes() {
  Json j = json_of("recorded_object_info_h3pipe_nodes.json");
  Json table = read(kSource / "integrations/comfyui/h3pipe_nodes/latent_profiles.json");
  std::vector<std::string> names;
  for (const auto& p : table["profiles"]) names.push_back(p["name"].get<std::string>());
  for (auto it = j.begin(); it != j.end(); ++it) {
    for (const char* section : {"required", "optional"}) {
      Json& in = it.value()["input"];
      if (!in.contains(section) || !in[section].contains("profile")) continue;
      Json& choices = in[section]["profile"][0];
      Json fixed = Json::array();
      for (const auto& c : choices)
        if (c == "auto" || c == "none" || c == "file") fixed.push_back(c);
      for (const auto& n : names) fixed.push_back(n);
      choices = fixed;
    }
  }
  return j;
}

ObjectInfo parsed(const Json& j) {
  auto r = ObjectInfo::parse(j);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return std::move(*r);
}

// Core plus h3pipe's node pack as a real 0.3.64 server with the pack installed answered.
const ObjectInfo& with_pack() {
  static ObjectInfo oi = [] {
    Json j = json_of("recorded_object_info_v0.3.64.json");
    j.update(pack_nodes());
    return parsed(j);
  }();
  return oi;
}

// A ComfyUI with the MiniMax H3 core nodes (since Aug 2026), its classes written from ComfyUI's
// source (object_info_minimax_h3_from_source.json, README.md here): what the H3 templates are
// checked against, class by class and input by input.
const ObjectInfo& h3_core() {
  static ObjectInfo oi =
      parsed(expand_autogrow(json_of("object_info_minimax_h3_from_source.json")));
  return oi;
}

// That server with h3pipe's pack, and, for minimax_h3_two_host, Raylight and the multi-GPU CLIP
// loader as their source declares them (object_info_raylight_h3_from_source.json).
const ObjectInfo& h3_with_packs() {
  static ObjectInfo oi = [] {
    Json j = expand_autogrow(json_of("object_info_minimax_h3_from_source.json"));
    j.update(pack_nodes());
    j.update(json_of("object_info_raylight_h3_from_source.json"));
    return parsed(j);
  }();
  return oi;
}

bool is_h3(const std::string& name) {
  return name.rfind("minimax_h3_", 0) == 0;
}

// Classes not in ComfyUI core, per template (the folder's README says the same).
const std::map<std::string, std::set<std::string>> kNotCore = {
    {"minimax_h3_two_host",
     {"H3SaveLatent", "H3LoadLatent", "H3MultiGPUCLIPLoader", "RayInitializer", "RayUNETLoader",
      "RayLoraLoader", "RayMiniMaxH3SigmaShift", "RayBasicScheduler", "RayBasicGuider",
      "XFuserSamplerCustomAdvanced"}},
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
                                   "ltxv_t2v",         "minimax_h3_fl2v",     "minimax_h3_ref2va",
                                   "minimax_h3_t2v",   "minimax_h3_two_host", "wan2.1_i2v",
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
    o.object_info = !core ? nullptr : is_h3(name) ? &h3_core() : &recorded();
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
    if (name.find("i2v") != std::string::npos || name == "minimax_h3_two_host" ||
        name == "minimax_h3_fl2v" || name == "minimax_h3_ref2va")
      EXPECT_TRUE(r->inject["sample"].contains("reference_image"));
    else
      EXPECT_FALSE(r->inject["sample"].contains("reference_image"));
    // Never h3pipe's own builtin profile: each template's latent is a ComfyUI model's.
    EXPECT_NE(r->profile, "builtin");
    EXPECT_EQ(r->snippet["latent_profile"], r->profile);
  }
}

// The seeds' per-job inputs beyond the reference image: ref2va's voice (LoadAudio) is the job's
// reference_audio, the first/last-frame template's last frame (the LoadImage feeding
// MiniMaxH3ImageToVideo.last_frame) the job's last_frame_image, its first frame the
// reference_image; no other template injects them.
TEST(Templates, TheVoiceAndTheLastFrameAreJobInputs) {
  for (const auto& name : template_names()) {
    SCOPED_TRACE(name);
    const Json inject = read(kTemplates / name / "inject.json")["sample"];
    if (name == "minimax_h3_ref2va") {
      EXPECT_EQ(inject["reference_audio"], Json({{"node", "17"}, {"input", "audio"}}));
      EXPECT_EQ(inject["reference_image"], Json({{"node", "16"}, {"input", "image"}}));
    } else {
      EXPECT_FALSE(inject.contains("reference_audio"));
    }
    if (name == "minimax_h3_fl2v") {
      EXPECT_EQ(inject["last_frame_image"], Json({{"node", "17"}, {"input", "image"}}));
      EXPECT_EQ(inject["reference_image"], Json({{"node", "16"}, {"input", "image"}}));
    } else {
      EXPECT_FALSE(inject.contains("last_frame_image"));
    }
  }
  const Json sample = read(kTemplates / "minimax_h3_ref2va" / "sample.api.json");
  EXPECT_EQ(sample["17"]["class_type"], "LoadAudio");
  const Json fl = read(kTemplates / "minimax_h3_fl2v" / "sample.api.json");
  EXPECT_EQ(fl["6"]["inputs"]["last_frame"], Json({"17", 0}));
}

// The H3 templates as ComfyUI core decodes an H3 AV latent: one NestedTensor LATENT, saved whole
// (profile minimax-h3, the job's geometry), given whole to VAEDecode (its first tensor) and to
// VAEDecodeAudio (its last), CreateVideo with the audio at 24 fps, SaveVideo mp4.
TEST(Templates, MiniMaxH3DecodesTheNestedLatentAsComfyUIDoes) {
  for (const auto& name : template_names()) {
    if (!is_h3(name)) continue;
    SCOPED_TRACE(name);
    fs::path d = kTemplates / name;
    Json sample = read(d / "sample.api.json"), decode = read(d / "decode.api.json");
    std::string load;
    for (auto it = decode.begin(); it != decode.end(); ++it)
      if (it.value()["class_type"] == "H3LoadLatent") load = it.key();
    ASSERT_FALSE(load.empty());
    int decoders = 0;
    for (auto it = decode.begin(); it != decode.end(); ++it) {
      const Json& n = it.value();
      if (n["class_type"] == "VAEDecode" || n["class_type"] == "VAEDecodeAudio") {
        EXPECT_EQ(n["inputs"]["samples"], Json::array({load, 0})) << it.key();
        ++decoders;
      }
      if (n["class_type"] == "CreateVideo") {
        EXPECT_TRUE(n["inputs"].contains("audio"));
        EXPECT_EQ(n["inputs"]["fps"], 24.0);
      }
      if (n["class_type"] == "SaveVideo") {
        EXPECT_EQ(n["inputs"]["format"], "mp4");
      }
    }
    EXPECT_EQ(decoders, 2);
    bool saved = false;
    for (const auto& n : sample)
      if (n["class_type"] == "H3SaveLatent") {
        saved = true;
        EXPECT_EQ(n["inputs"]["profile"], "minimax-h3");
        EXPECT_FALSE(n["inputs"].contains("audio"));  // the audio is inside the nested latent
        EXPECT_EQ(n["inputs"]["width"], 736);
        EXPECT_EQ(n["inputs"]["height"], 416);
        EXPECT_EQ(n["inputs"]["frames"], 124);
        EXPECT_EQ(n["inputs"]["fps"], 24);
      }
    EXPECT_TRUE(saved);
    EXPECT_EQ(read(d / "config.snippet.json")["latent_profile"], "minimax-h3");
  }
}

// Input by input: every input a node of an H3 template gives is one its class declares (ComfyUI
// ignores others silently, so a misspelt input would be lost without an error), Autogrow slots
// by their expanded names.
TEST(Templates, MiniMaxH3InputsAreTheClassesOwn) {
  for (const auto& name : template_names()) {
    if (!is_h3(name)) continue;
    for (const char* file : {"workflow.api.json", "sample.api.json", "decode.api.json"}) {
      SCOPED_TRACE(name + "/" + file);
      Json g = read(kTemplates / name / file);
      for (auto it = g.begin(); it != g.end(); ++it) {
        std::string cls = it.value()["class_type"];
        const auto* ci = h3_with_packs().find(cls);
        ASSERT_NE(ci, nullptr) << cls << " is not in the source-written object_info";
        for (auto in = it.value()["inputs"].begin(); in != it.value()["inputs"].end(); ++in)
          EXPECT_NE(ci->input(in.key()), nullptr)
              << "node " << it.key() << " (" << cls << ") gives input \"" << in.key()
              << "\", which the class does not declare";
      }
    }
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
      const ObjectInfo& against = is_h3(name) ? h3_with_packs() : with_pack();
      for (const auto& issue : check_workflow(g, against, o)) ADD_FAILURE() << issue.message;
      // Which classes are not core: only h3pipe's nodes, except where the README says otherwise.
      std::set<std::string> missing;
      for (const auto& c : classes_of(g))
        if (!(is_h3(name) ? h3_core() : recorded()).find(c)) missing.insert(c);
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
  // MiniMax H3 ones (minimax_h3_*) against the classes written from ComfyUI's source.
  std::vector<fs::path> files;
  for (const auto& name : template_names())
    if (!kNotCore.count(name)) files.push_back(kTemplates / name / "workflow.api.json");
  for (const auto& e : fs::directory_iterator(kSource / "tests/comfyui/workflows"))
    if (e.path().string().size() > 9 &&
        e.path().string().substr(e.path().string().size() - 9) == ".api.json")
      files.push_back(e.path());
  ASSERT_GE(files.size(), 25u);
  for (const auto& f : files) {
    SCOPED_TRACE(f.string());
    CheckOptions o;
    o.skip_empty_file_lists = true;
    bool h3 = is_h3(f.filename().string()) || is_h3(f.parent_path().filename().string());
    for (const auto& issue : check_workflow(read(f), h3 ? h3_core() : recorded(), o))
      ADD_FAILURE() << issue.message;
  }
}

TEST(TemplateCheck, FindsWhatPostPromptWouldReject) {
  Json g = read(kTemplates / "wan2.1_i2v" / "sample.api.json");
  Json oi_json = read(kSource / "tests/comfyui/recorded_object_info_v0.3.64.json");
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
