// End to end through the real local stack with the sample stage on the comfyui runtime, against
// FakeComfyUiServer (ComfyUI itself needs Python packages and model weights that cannot be had
// here; the fake speaks the same endpoints and JSON, and the client path is the production one).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/latent/latent.h"
#include "common/queue/redis.h"
#include "tests/runtime_comfyui/fake_comfyui.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
namespace fs = std::filesystem;
using nlohmann::json;

TEST(ComfyUiStackWithFakeServer, BatchSamplesThroughComfyUiAndDecodes) {
  ts::TempDir dir;
  // The latent the fake ComfyUI "samples": the job geometry (128x96, 25 frames at 12 fps).
  latent::Latent l = latent::make_latent(latent::builtin_profile(), {128, 96, 25, 12});
  l.video.assign(l.geometry.video_elems(), 0.25f);
  l.audio.assign(l.geometry.audio_elems(), 0.1f);
  fs::path lat = dir.path() / "fake.h3latent";
  ASSERT_TRUE(latent::write_latent(lat, l).ok());
  runtime::testing::FakeComfyUiServer::Options fo;
  fo.latent = lat;
  runtime::testing::FakeComfyUiServer server(dir.path() / "comfy", fo);

  json cfg = json::parse(R"({
    "name": "comfy-e2e", "queue": {"lease_ms": 3000, "renew_ms": 500, "sweep_ms": 200, "block_ms": 50},
    "hosts": [{"name": "local"}],
    "pools": [
      {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
      {"name": "s0", "host": "local", "stage": "sample"},
      {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}}]})");
  json two_host;
  std::ifstream(ts::source("configs/comfyui/two_host_comfyui.json")) >> two_host;
  json sample_rt = two_host["stages"]["sample"]["runtime"];
  sample_rt["settings"]["url"] = server.url();
  sample_rt["settings"]["workflow"] = ts::source("configs/comfyui/sample_av_latent.api.json");
  cfg["stages"] = {{"sample", {{"runtime", sample_rt}}}};
  cfg["state_dir"] = (dir.path() / "state").string();
  fs::path cfg_file = dir.path() / "cluster.json";
  std::ofstream(cfg_file) << cfg.dump(2);
  std::string cli = ts::bin("h3pipe") + " --config " + cfg_file.string();
  ASSERT_EQ(ts::sh(cli + " start >/dev/null 2>&1").first, 0);
  // The seeds' REF2VA workflow takes a reference image (uploaded through /upload/image).
  fs::path ref = dir.path() / "reference.png";
  ASSERT_EQ(ts::sh("ffmpeg -v error -f lavfi -i color=c=red:s=64x64 -frames:v 1 " + ref.string()).first, 0);
  std::string batch;
  for (int i = 0; i < 3; ++i)
    batch += fmt::format(R"({{"jobId":"c{}","prompt":"clip {}","width":128,"height":96,"frames":25,"fps":12,"seed":{},"referenceImage":"{}"}})",
                         i, i, i, ref.string()) + "\n";
  std::ofstream(dir.path() / "b.jsonl") << batch;
  auto [rc, out] = ts::sh(cli + " run " + (dir.path() / "b.jsonl").string() + " --background 2>/dev/null");
  ASSERT_EQ(rc, 0);
  std::string run = out.substr(0, out.find('\n'));
  int wrc = ts::sh(cli + " wait " + run + " --timeout 120 >/dev/null 2>&1").first;
  std::ifstream slog(dir.path() / "state" / "logs" / "sampler-s0.log");
  std::stringstream ss;
  ss << slog.rdbuf();
  ts::sh(cli + " stop >/dev/null 2>&1");
  ASSERT_EQ(wrc, 0) << ss.str();
  for (int i = 0; i < 3; ++i) {
    json r;
    std::ifstream(dir.path() / "state" / "outputs" / run / fmt::format("c{}.pipeline.json", i)) >> r;
    EXPECT_EQ(r["stages"][1]["runtime"], "comfyui");
    EXPECT_TRUE(fs::exists(dir.path() / "state" / "outputs" / run / fmt::format("c{}.mp4", i)));
  }
}
