// `comfyui split` at its limits (issue #35): a link's output slot that is not 0..2^31-1 is
// refused by name instead of wrapping (D11: 4294967296 became slot 0), and a workflow with
// 20,000 extra nodes splits in linear time (D8: 8,000 took 29.7 s).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "common/comfyui/split.h"
#include "common/comfyui/ui_workflow.h"

namespace fs = std::filesystem;
using namespace h3pipe::comfyui;

namespace {

const fs::path kDir = fs::path(H3PIPE_SOURCE_DIR) / "tests" / "comfyui";

Json read(const fs::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in) << p;
  return Json::parse(in);
}

TEST(SplitLimits, ALinkSlotOutsideZeroToTwoToThe31IsRefusedNotWrapped) {
  const Json wan = read(kDir / "workflows" / "wan2.1_t2v.api.json");
  for (const Json& slot :
       {Json(4294967296ll), Json(2147483648ll), Json(-1), Json(18446744073709551615ull)}) {
    Json g = wan;
    g["8"]["inputs"]["samples"] = Json::array({"3", slot});
    SplitOptions o;
    auto r = split_workflow(g, o);
    ASSERT_FALSE(r.ok()) << slot.dump();
    EXPECT_EQ(r.error().code, "comfyui.workflow.node");
    EXPECT_NE(r.error().message.find(
                  "node 8 (VAEDecode, \"VAE Decode\"): input \"samples\" names output slot " +
                  slot.dump() + ", which is not a slot number (0 to 2147483647)"),
              std::string::npos)
        << r.error().message;
  }
  // The largest slot is a slot (the graph then fails later for what it is, not for the number).
  Json g = wan;
  g["8"]["inputs"]["samples"] = Json::array({"3", 2147483647});
  auto r = split_workflow(g, {});
  if (!r.ok()) {
    EXPECT_EQ(r.error().message.find("not a slot number"), std::string::npos);
  }
}

TEST(SplitLimits, AUiLinkSlotOutsideTheRangeIsRefused) {
  auto oi = ObjectInfo::parse(read(kDir / "recorded_object_info_v0.3.64.json"));
  ASSERT_TRUE(oi.ok());
  Json ui = read(kDir / "workflows" / "wan2.1_t2v.ui.json");
  ui["links"][0][2] = 4294967296ll;
  auto r = ui_to_api(ui, *oi);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, "comfyui.ui.link");
  EXPECT_NE(r.error().message.find("[1,37,4294967296,48,0,\"MODEL\"] is not [id, from, slot, to, "
                                   "slot, type] with integer ids and an output slot 0 to "
                                   "2147483647"),
            std::string::npos)
      << r.error().message;
}

TEST(SplitLimits, TwentyThousandExtraNodesSplitInLinearTime) {
  Json g = read(kDir / "workflows" / "wan2.1_t2v.api.json");
  SplitOptions o;
  o.workflow_dir = ".";
  auto small = split_workflow(g, o);
  ASSERT_TRUE(small.ok()) << small.error().message;
  // 10,000 nodes in one chain and 10,000 on their own, none reaching the sampler or a decoder:
  // every one is ordered, traced and left out of both sides.
  for (int i = 0; i < 20000; ++i) {
    Json in = Json::object();
    if (i > 0 && i < 10000) in["a"] = Json::array({std::to_string(100000 + i - 1), 0});
    g[std::to_string(100000 + i)] = {{"class_type", "StringConcatenate"}, {"inputs", in}};
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto big = split_workflow(g, o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(big.ok()) << big.error().message;
  // The same cut (the new save/load nodes take ids after the extra ones).
  EXPECT_EQ(big->sample.size(), small->sample.size());
  EXPECT_EQ(big->decode.size(), small->decode.size());
  for (const auto* side : {&big->sample, &big->decode})
    for (auto it = side->begin(); it != side->end(); ++it)
      EXPECT_TRUE(small->sample.contains(it.key()) || small->decode.contains(it.key()) ||
                  it.key() == big->save_node || it.key() == big->load_node)
          << it.key();
  // Linear: well under a second here; the bound is for a loaded 2-core machine.  The quadratic
  // order took minutes.
  EXPECT_LT(s, 15.0) << s << " s";
  std::cout << "split of " << g.size() << " nodes: " << s << " s\n";
}

}  // namespace
