// preflight's comfyui.templates row for a template that needs a core class its server is too old
// for: the FAIL names the class and the first ComfyUI release that has it (core_classes.h).  The
// server answers with the /object_info recorded from a real ComfyUI 0.3.64 (plus h3pipe's node
// pack), which predates MiniMax H3's core nodes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/config/config.h"
#include "common/preflight/core_classes.h"
#include "common/preflight/preflight.h"
#include "tests/support/object_info_server.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace h3pipe;

namespace {

const fs::path kSource = H3PIPE_SOURCE_DIR;

json read(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

json recorded_classes() {
  json j = read(kSource / "tests/comfyui/recorded_object_info_v0.3.64.json");
  j.update(read(kSource / "tests/comfyui/recorded_object_info_h3pipe_nodes.json"));
  return j;
}

json node(const char* cls, json inputs) {
  return {{"class_type", cls}, {"inputs", std::move(inputs)}};
}

// A core-H3 sample half in miniature: the empty AV latent, a guide on it, saved by core SaveLatent.
json h3_graph() {
  return {{"1", node("EmptyMiniMaxH3LatentAV", {{"width", 736}, {"height", 416}, {"length", 124}})},
          {"2", node("MiniMaxH3AddGuide", {{"latent", {"1", 0}}, {"frame_idx", 0}})},
          {"3", node("SaveLatent", {{"samples", {"1", 0}}, {"filename_prefix", "h3pipe/x"}})}};
}

std::vector<preflight::CheckResult> template_rows(const std::string& url) {
  const test_support::TempDir tmp("h3pf_core");
  const fs::path state = tmp.path() / "state";
  json j = {
      {"name", "pf-core"},
      {"state_dir", state.string()},
      {"redis", {{"host", "127.0.0.1"}, {"port", 1}, {"embedded", false}}},
      {"hosts", json::array({{{"name", "a"}, {"address", "127.0.0.1"}, {"bind", "127.0.0.1"}}})},
      {"pools", json::array({{{"name", "s0"},
                              {"host", "a"},
                              {"stage", "sample"},
                              {"runtime",
                               {{"name", "comfyui"},
                                {"settings", {{"url", url}, {"workflow", h3_graph()}}}}}},
                             {{"name", "e0"}, {"host", "a"}, {"stage", "encode"}},
                             {{"name", "d0"}, {"host", "a"}, {"stage", "decode"}}})}};
  auto c = config::parse(j, state);
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
  std::vector<preflight::CheckResult> out;
  if (!c.ok()) return out;
  preflight::Options o;
  o.nvml_library = "libnvidia-ml-h3pipe-absent.so.1";
  o.timeout = std::chrono::milliseconds(2000);
  for (auto& r : preflight::run_checks(*c, o))
    if (r.check == "comfyui.templates" && r.outcome == preflight::Outcome::kFail) out.push_back(r);
  return out;
}

const preflight::CheckResult* row_naming(const std::vector<preflight::CheckResult>& rows,
                                         const std::string& cls) {
  for (const auto& r : rows)
    if (r.detail.find("class \"" + cls + "\"") != std::string::npos) return &r;
  return nullptr;
}

TEST(PreflightCoreClasses, AnOldServerFailsNamingTheClassAndTheFirstReleaseThatHasIt) {
  h3pipe::testing::ObjectInfoServer old(recorded_classes(), "0.3.64");
  auto rows = template_rows(old.url());
  const auto* empty = row_naming(rows, "EmptyMiniMaxH3LatentAV");
  ASSERT_NE(empty, nullptr) << "no FAIL row names EmptyMiniMaxH3LatentAV";
  EXPECT_NE(
      empty->detail.find("node 1 (EmptyMiniMaxH3LatentAV): class \"EmptyMiniMaxH3LatentAV\" is "
                         "not on the server; it is core ComfyUI since 0.30.0 (MiniMax H3, "
                         "comfy_extras/nodes_minimax_h3.py); the server is ComfyUI 0.3.64"),
      std::string::npos)
      << empty->detail;
  EXPECT_EQ(empty->fix,
            "upgrade ComfyUI on " + old.url() +
                " to 0.30.0 or later (a node pack does not provide EmptyMiniMaxH3LatentAV)");
  const auto* guide = row_naming(rows, "MiniMaxH3AddGuide");
  ASSERT_NE(guide, nullptr);
  EXPECT_NE(guide->detail.find("core ComfyUI since 0.34.0"), std::string::npos) << guide->detail;
  EXPECT_EQ(row_naming(rows, "SaveLatent"), nullptr);
}

TEST(PreflightCoreClasses, AServerNewEnoughThatLacksTheClassPointsAtItsLog) {
  h3pipe::testing::ObjectInfoServer odd(recorded_classes(), "0.34.5");
  auto rows = template_rows(odd.url());
  const auto* empty = row_naming(rows, "EmptyMiniMaxH3LatentAV");
  ASSERT_NE(empty, nullptr);
  EXPECT_NE(empty->detail.find("the server is ComfyUI 0.34.5"), std::string::npos) << empty->detail;
  EXPECT_NE(empty->fix.find("import error in comfy_extras/nodes_minimax_h3.py"), std::string::npos)
      << empty->fix;
}

TEST(PreflightCoreClasses, ReleasesCompareNumerically) {
  EXPECT_EQ(preflight::compare_versions("0.3.64", "0.30.0"), -1);
  EXPECT_EQ(preflight::compare_versions("0.30.0", "0.30"), 0);
  EXPECT_EQ(preflight::compare_versions("0.34.5", "0.34.0"), 1);
  EXPECT_EQ(preflight::compare_versions("v1", "0.30.0"), std::nullopt);
  for (const auto& c : preflight::core_classes()) EXPECT_EQ(preflight::find_core_class(c.cls), &c);
  EXPECT_EQ(preflight::find_core_class("KSampler"), nullptr);
}

}  // namespace
