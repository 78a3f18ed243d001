// `h3pipe preflight` row comfyui.templates: every class and model file of each comfyui pool's
// templates asked of that pool's server.  The server is this test's own (FakeComfyUiObjectInfo):
// it answers GET /object_info/<class> with the entries recorded from a real ComfyUI 0.3.64 (core
// plus h3pipe's node pack), with the model lists the test gives it, and {} for other classes,
// as the real one does.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/config/config.h"
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

using FakeComfyUiObjectInfo = h3pipe::testing::ObjectInfoServer;

// A server with core, h3pipe's pack, and the model files of the wan2.1_t2v template.
json server_classes() {
  json j = read(kSource / "tests/comfyui/recorded_object_info_v0.3.64.json");
  j.update(read(kSource / "tests/comfyui/recorded_object_info_h3pipe_nodes.json"));
  j["UNETLoader"]["input"]["required"]["unet_name"][0] = {"wan2.1_t2v_1.3B_fp16.safetensors"};
  j["CLIPLoader"]["input"]["required"]["clip_name"][0] = {"umt5_xxl_fp8_e4m3fn_scaled.safetensors"};
  j["VAELoader"]["input"]["required"]["vae_name"][0] = {"pixel_space", "wan_2.1_vae.safetensors"};
  return j;
}

std::vector<preflight::CheckResult> template_rows(const std::string& sample_url,
                                                  const std::string& decode_url) {
  fs::path tdir = kSource / "configs/comfyui/templates/wan2.1_t2v";
  json inject = read(tdir / "inject.json");
  const test_support::TempDir tmp("h3pf_tpl");
  const fs::path state = tmp.path() / "state";
  json j = {
      {"name", "pf-templates"},
      {"state_dir", state.string()},
      {"redis", {{"host", "127.0.0.1"}, {"port", 1}, {"embedded", false}}},
      {"hosts", json::array({{{"name", "a"}, {"address", "127.0.0.1"}, {"bind", "127.0.0.1"}}})},
      {"pools", json::array({{{"name", "s0"},
                              {"host", "a"},
                              {"stage", "sample"},
                              {"runtime",
                               {{"name", "comfyui"},
                                {"settings",
                                 {{"url", sample_url},
                                  {"workflow", (tdir / "sample.api.json").string()},
                                  {"inject", inject["sample"]}}}}}},
                             {{"name", "d0"},
                              {"host", "a"},
                              {"stage", "decode"},
                              {"runtime",
                               {{"name", "comfyui"},
                                {"settings",
                                 {{"url", decode_url},
                                  {"workflow", (tdir / "decode.api.json").string()},
                                  {"inject", inject["decode"]}}}}}},
                             {{"name", "e0"}, {"host", "a"}, {"stage", "encode"}}})}};
  auto c = config::parse(j, state);
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
  preflight::Options o;
  o.nvml_library = "libnvidia-ml-h3pipe-absent.so.1";
  o.timeout = std::chrono::milliseconds(2000);
  std::vector<preflight::CheckResult> out;
  for (auto& r : preflight::run_checks(*c, o))
    if (r.check == "comfyui.templates") out.push_back(r);
  return out;
}

TEST(PreflightTemplates, EveryClassAndModelFileOnThePoolsServer) {
  FakeComfyUiObjectInfo good(server_classes());
  auto rows = template_rows(good.url(), good.url());
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& r : rows)
    EXPECT_EQ(r.outcome, preflight::Outcome::kPass) << r.target << ": " << r.detail;
  EXPECT_NE(rows[0].detail.find("7 classes and 2 model file(s)"), std::string::npos)
      << rows[0].detail;
  EXPECT_NE(rows[1].detail.find("5 classes and 1 model file(s)"), std::string::npos)
      << rows[1].detail;

  // The decode server: no VAE file, and no h3pipe node pack.
  json missing = server_classes();
  missing["VAELoader"]["input"]["required"]["vae_name"][0] = {"pixel_space"};
  missing.erase("H3LoadLatent");
  FakeComfyUiObjectInfo bad(missing);
  rows = template_rows(good.url(), bad.url());
  std::vector<std::string> fails;
  for (const auto& r : rows)
    if (r.outcome == preflight::Outcome::kFail)
      fails.push_back(r.target + " " + r.detail + " | " + r.fix);
  ASSERT_EQ(fails.size(), 2u);
  EXPECT_NE(fails[0].find("d0@a template "), std::string::npos) << fails[0];
  EXPECT_NE(
      fails[0].find("decode.api.json: node 39 (VAELoader, \"Load VAE\"): input \"vae_name\": model "
                    "file \"wan_2.1_vae.safetensors\" is not on the server (it has: pixel_space)"),
      std::string::npos)
      << fails[0];
  EXPECT_NE(fails[1].find(
                "node 52 (H3LoadLatent, \"Load h3pipe latent\"): class \"H3LoadLatent\" is not on "
                "the server"),
            std::string::npos)
      << fails[1];
  EXPECT_NE(fails[1].find("h3pipe comfyui install-nodes"), std::string::npos) << fails[1];
  // The sample pool's row still passes: each pool is judged against its own server.
  int pass = 0;
  for (const auto& r : rows) pass += r.outcome == preflight::Outcome::kPass && r.target == "s0@a";
  EXPECT_EQ(pass, 1);
}

}  // namespace
