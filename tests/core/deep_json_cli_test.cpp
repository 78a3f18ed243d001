// Deeply nested JSON from a user's files (issue #35 D2): a config whose runtime settings nest
// 300,000 levels made `plan`, `start`, `preflight` and every service exit 139; so did `comfyui
// split` of such a workflow or --object-info.  Now each exits 2 naming the file and the JSON
// pointer where the limit (128 levels) was passed.  The real h3pipe CLI under timeout(1).
#include <gtest/gtest.h>

#include <fstream>

#include "common/config/config.h"
#include "tests/support/test_support.h"

namespace {
namespace fs = std::filesystem;

std::string deep(std::size_t levels) {
  return std::string(levels, '[') + std::string(levels, ']');
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

std::pair<int, std::string> cli(const std::string& args) {
  return ts::sh("timeout 60 " + ts::bin("h3pipe") + " " + args + " 2>&1 </dev/null");
}

TEST(DeepJsonCli, ConfigWithDeepRuntimeSettingsExitsTwoNamingThePath) {
  ts::TempDir dir;
  const fs::path cfg = dir.path() / "deep.json";
  write(cfg, R"({"hosts":[{"name":"a"}],"pools":[{"name":"s","host":"a","stage":"sample",)"
             R"("runtime":{"name":"sim","settings":{"x":)" +
                 deep(300000) +
                 R"(}}},{"name":"d","host":"a","stage":"decode"},)"
                 R"({"name":"e","host":"a","stage":"encode"}]})");
  auto c = h3pipe::config::load_file(cfg);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, h3pipe::errc::config::kJson.id);
  auto [rc, out] = cli("--config " + cfg.string() + " plan");
  EXPECT_EQ(rc, 2) << out.substr(0, 400);
  EXPECT_NE(out.find(cfg.string() + ": not valid JSON: nesting deeper than 128 levels at "
                                    "/pools/0/runtime/settings/x/0/...(116 more levels)..."),
            std::string::npos)
      << out.substr(0, 400);
}

TEST(DeepJsonCli, SplitOfADeepWorkflowOrObjectInfoExitsTwoNamingThePath) {
  ts::TempDir dir;
  const fs::path wf = dir.path() / "deep.api.json";
  write(wf, R"({"1": {"class_type": "KSampler", "inputs": {"seed": )" + deep(300000) + "}}}");
  auto [rc, out] = cli("comfyui split " + wf.string() + " -o " + (dir.path() / "a").string());
  EXPECT_EQ(rc, 2) << out.substr(0, 400);
  EXPECT_NE(out.find("workflow " + wf.string() +
                     " is not valid JSON: nesting deeper than 128 levels at /1/inputs/seed/0/"),
            std::string::npos)
      << out.substr(0, 400);

  const fs::path oi = dir.path() / "object_info.json";
  write(oi, R"({"KSampler": {"input": {"required": )" + deep(300000) + "}}}");
  const std::string ok_wf =
      ts::source("tests/comfyui/workflows/minimax_h3_ref2va_two_pictures.api.json");
  auto [rc2, out2] = cli("comfyui split " + ok_wf + " --object-info " + oi.string() + " -o " +
                         (dir.path() / "b").string());
  EXPECT_EQ(rc2, 2) << out2.substr(0, 400);
  EXPECT_NE(out2.find("object_info file " + oi.string() +
                      " is not valid JSON: nesting deeper than 128 levels at "
                      "/KSampler/input/required/0/"),
            std::string::npos)
      << out2.substr(0, 400);
}

}  // namespace
