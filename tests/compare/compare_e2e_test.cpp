// `h3pipe compare` end to end: a real local stack (builtin encode/sample/decode) makes the
// latents; the command decodes them again with the builtin decoder at several settings (the same
// settings twice, int8 decoder weights, an exec decoder handing back a decoded MP4 with a planted
// black and a planted saturated frame) and its HTML page is rendered by headless Chromium.
// Label: e2e.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/compare/frames.h"
#include "common/core/sha256.h"
#include "common/media/media.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Small enough for a 2-core machine, the builtin model's real networks all the same.
const json kModel = {{"width", 64}, {"depth", 2}, {"heads", 1}, {"text_layers", 1}, {"threads", 2}};
constexpr int kPlantedBlack = 3, kPlantedSaturated = 7;

json base_config(const fs::path& state) {
  json c = {{"name", "cmp"},
            {"state_dir", state.string()},
            {"queue", {{"lease_ms", 3000}, {"renew_ms", 500}, {"block_ms", 50}}},
            {"hosts", json::array({{{"name", "local"}}})},
            {"stages",
             {{"encode", {{"runtime", {{"name", "builtin"}, {"settings", kModel}}}}},
              {"sample", {{"runtime", {{"name", "builtin"}, {"settings", kModel}}}}},
              {"decode", {{"runtime", {{"name", "builtin"}, {"settings", kModel}}}}}}},
            {"pools", json::array()}};
  for (const char* stage : {"encode", "sample", "decode"})
    c["pools"].push_back({{"name", std::string(stage).substr(0, 3)},
                          {"host", "local"},
                          {"stage", stage},
                          {"profiles", {{"default", {{"kind", "fixed"}, {"seconds", 0.1}}}}}});
  return c;
}

json decode_pool(const std::string& name, const json& runtime) {
  return {{"name", name},
          {"host", "local"},
          {"stage", "decode"},
          {"runtime", runtime},
          {"profiles", {{"default", {{"kind", "fixed"}, {"seconds", 0.1}}}}}};
}

json builtin(json extra = json::object()) {
  json s = kModel;
  s.merge_patch(extra);
  return {{"name", "builtin"}, {"settings", s}};
}

// A copy of `in` with frame kPlantedBlack all black and kPlantedSaturated all white, the audio
// kept: what a decoder that overflows on two frames would hand back.
void plant(const fs::path& in, const fs::path& out) {
  auto r = compare::VideoReader::open(in);
  ASSERT_TRUE(r.ok()) << r.error().message;
  media::VideoParams vp{(*r)->width(), (*r)->height(), 12};
  auto w = media::Mp4Writer::open(out, vp, media::AudioParams{});
  ASSERT_TRUE(w.ok()) << w.error().message;
  std::vector<std::uint8_t> rgb;
  for (int i = 0;; ++i) {
    auto got = (*r)->next(rgb);
    ASSERT_TRUE(got.ok());
    if (!*got) break;
    if (i == kPlantedBlack) std::fill(rgb.begin(), rgb.end(), 0);
    if (i == kPlantedSaturated) std::fill(rgb.begin(), rgb.end(), 255);
    ASSERT_TRUE((*w)->add_frame(rgb).ok());
  }
  auto pcm = compare::read_audio(in);
  ASSERT_TRUE(pcm.ok());
  ASSERT_TRUE((*w)->add_audio(pcm->samples).ok());
  ASSERT_TRUE((*w)->finish().ok());
}

const json& result_of(const json& job, const std::string& decoder) {
  for (const auto& r : job["results"])
    if (r["decoder"] == decoder) return r;
  static const json none;
  ADD_FAILURE() << "no result for " << decoder;
  return none;
}

}  // namespace

TEST(CompareE2E, BuiltinDecoderAtTwoSettingsPlantedFramesAndTheHtmlPage) {
  ts::TempDir dir;
  const json cfg = base_config(dir.path());
  std::ofstream(dir.path() / "cluster.json") << cfg.dump(2);
  const std::string cli = ts::bin("h3pipe") + " --config " + (dir.path() / "cluster.json").string();
  auto [src, sout] = ts::sh(cli + " start 2>&1");
  ASSERT_EQ(src, 0) << sout;
  struct Stop {
    std::string cli;
    ~Stop() { ts::sh(cli + " stop >/dev/null 2>&1"); }
  } stop{cli};
  std::ofstream(dir.path() / "batch.jsonl")
      << R"({"jobId":"j00","prompt":"a red dress","width":128,"height":96,"frames":25,"fps":12,"steps":2,"seed":1})"
         "\n"
      << R"({"jobId":"j01","prompt":"overalls","width":128,"height":96,"frames":25,"fps":12,"steps":2,"seed":2})"
         "\n";
  auto [rrc, rout] =
      ts::sh(cli + " run " + (dir.path() / "batch.jsonl").string() + " --run-id r1 2>&1");
  ASSERT_EQ(rrc, 0) << rout;
  const fs::path run_mp4 = dir.path() / "outputs" / "r1" / "j00.mp4";
  const std::string run_sha = *sha256_file(run_mp4);

  // The candidates: not in production, so in a copy of the config (same state dir and Redis).
  json cmp = cfg;
  cmp["pools"].push_back(decode_pool("full", builtin()));
  cmp["pools"].push_back(decode_pool("full-again", builtin()));
  cmp["pools"].push_back(decode_pool("int8", builtin({{"decoder_precision", "int8"}})));
  // A pool that names GPUs: a builtin decode in `compare` still runs in the CLI's process, and
  // nothing may credit those GPUs with it.
  cmp["pools"].back()["gpus"] = {3};
  const fs::path planted = dir.path() / "planted.mp4";
  cmp["pools"].push_back(decode_pool(
      "overflow",
      {{"name", "exec"}, {"settings", {{"command", {"/bin/cp", planted.string(), "{output}"}}}}}));
  std::ofstream(dir.path() / "compare.json") << cmp.dump(2);
  const std::string ccli =
      ts::bin("h3pipe") + " --config " + (dir.path() / "compare.json").string();

  const fs::path out1 = dir.path() / "cmp1", html = dir.path() / "page.html";
  char host_buf[256] = {};
  ASSERT_EQ(::gethostname(host_buf, sizeof host_buf - 1), 0);
  const std::string this_host = host_buf;
  auto [rc1, o1] =
      ts::sh(ccli + " compare r1 --decoder full --decoder full-again --decoder int8 --json --out " +
             out1.string() + " --html " + html.string() + " 2>" + (dir.path() / "err1").string());
  ASSERT_EQ(rc1, 0) << o1;
  const json doc = json::parse(o1);
  json on_disk;
  std::ifstream(out1 / "compare.json") >> on_disk;
  EXPECT_EQ(on_disk, doc) << "compare.json is what --json printed";
  EXPECT_TRUE(fs::exists(out1 / "compare.json.sha256"));
  EXPECT_EQ(doc["reference"], "full");
  ASSERT_EQ(doc["jobs"].size(), 2u);
  for (const auto& job : doc["jobs"]) {
    const json& full = result_of(job, "full");
    const json& again = result_of(job, "full-again");
    const json& int8 = result_of(job, "int8");
    EXPECT_TRUE(full["reference"].get<bool>());
    // Same settings twice: byte-equal, so identical, PSNR infinite (null), SSIM 1, MAE 0.
    EXPECT_TRUE(again["byte_equal_to_reference"].get<bool>());
    EXPECT_TRUE(again["identical"].get<bool>());
    EXPECT_TRUE(again["psnr_db"].is_null());
    EXPECT_TRUE(again["worst_frame"].is_null());
    EXPECT_EQ(again["ssim_mean"], 1.0);
    EXPECT_EQ(again["mae"], 0.0);
    EXPECT_TRUE(again["audio"]["snr_db"].is_null()) << "the same PCM";
    // int8 decoder weights: different, finite and plausible.
    EXPECT_FALSE(int8["byte_equal_to_reference"].get<bool>());
    EXPECT_FALSE(int8["identical"].get<bool>());
    ASSERT_TRUE(int8["psnr_db"].is_number()) << int8.dump();
    EXPECT_GT(int8["psnr_db"].get<double>(), 20);
    EXPECT_LT(int8["psnr_db"].get<double>(), 80);
    EXPECT_LE(int8["psnr_min_db"].get<double>(), int8["psnr_db"].get<double>() + 1e-9);
    EXPECT_GE(int8["worst_frame"].get<int>(), 0);
    EXPECT_LT(int8["worst_frame"].get<int>(), 25);
    EXPECT_GT(int8["mae"].get<double>(), 0);
    EXPECT_LT(int8["ssim_mean"].get<double>(), 1.0);
    EXPECT_EQ(int8["per_frame"].size(), 25u);
    EXPECT_TRUE(int8["black_frames"].empty());
    EXPECT_TRUE(int8["saturated_frames"].empty());
    ASSERT_TRUE(int8["audio"].is_object());
    for (const auto* r : {&full, &again, &int8}) {
      EXPECT_GT((*r)["decode_seconds"].get<double>(), 0) << "times reported";
      EXPECT_EQ((*r)["device"], "cpu");
      EXPECT_EQ((*r)["frames"], 25);
      // The receipt beside it: decoder, settings, hashes of the latent and the output.
      json rec;
      std::ifstream(out1 / (*r)["receipt"].get<std::string>()) >> rec;
      EXPECT_EQ(rec["input"]["sha256"], job["latent"]["sha256"]);
      EXPECT_EQ(rec["output"]["sha256"], (*r)["mp4_sha256"]);
      EXPECT_EQ(rec["output"]["sha256"], *sha256_file(out1 / (*r)["mp4"].get<std::string>()));
      EXPECT_EQ(rec["decoder"]["pool"], (*r)["decoder"]);
      EXPECT_EQ(rec["decoder"]["runtime"], "builtin");
      EXPECT_EQ(rec["spec"]["jobId"], job["job_id"]);
      // Where it ran: in the compare command's own process on this host, not on the pool's.
      EXPECT_EQ((*r)["where"], "local to the CLI");
      EXPECT_EQ((*r)["ran_on_host"], this_host);
      EXPECT_TRUE((*r)["gpus"].empty()) << (*r)["gpus"];
      EXPECT_EQ(rec["ran_on"]["where"], "local to the CLI");
      EXPECT_EQ(rec["ran_on"]["host"], this_host);
      EXPECT_EQ(rec["ran_on"]["device"], "cpu");
      EXPECT_TRUE(rec["ran_on"]["gpus"].empty());
      EXPECT_TRUE(rec["ran_on"]["local_to_cli"].get<bool>());
      EXPECT_FALSE(rec["decoder"].contains("gpus")) << "the pool's GPUs only as pool_gpus";
    }
    EXPECT_EQ(result_of(job, "int8")["ran_on_host"], this_host);
    // The audio's log-spectral distance: 0 for the same PCM, a number for the other decoder.
    EXPECT_EQ(again["audio"]["lsd_db"], 0.0);
    EXPECT_TRUE(int8["audio"]["lsd_db"].is_number());
    std::cout << "builtin int8 vs f32 audio, job " << job["job_id"].get<std::string>()
              << ": snr_db " << int8["audio"]["snr_db"] << ", lsd_db " << int8["audio"]["lsd_db"]
              << ", max_abs " << int8["audio"]["max_abs"] << "\n";
    EXPECT_EQ(job["latent"]["sha256"],
              *sha256_file(dir.path() / "artifacts" / "r1" / job["job_id"].get<std::string>() /
                           "latent.h3latent"));
    EXPECT_EQ(result_of(job, "int8")["receipt"],
              "int8/" + job["job_id"].get<std::string>() + ".receipt.json");
  }
  // The run's own outputs are untouched; the decoders at the run's settings reproduce its MP4.
  EXPECT_EQ(*sha256_file(run_mp4), run_sha);
  EXPECT_EQ(result_of(doc["jobs"][0], "full")["mp4_sha256"], run_sha);
  ASSERT_EQ(doc["summary"].size(), 3u);
  EXPECT_EQ(doc["summary"][1]["identical_jobs"], 2);
  EXPECT_TRUE(doc["summary"][2]["psnr_db"].is_number());
  for (const auto& d : doc["decoders"]) {
    EXPECT_EQ(d["ran_on"]["where"], "local to the CLI") << d;
    EXPECT_EQ(d["ran_on"]["host"], this_host);
  }
  EXPECT_EQ(doc["decoders"][2]["pool_gpus"], json({3}));
  EXPECT_TRUE(doc["decoders"][2]["ran_on"]["gpus"].empty());
  EXPECT_EQ(doc["summary"][2]["where"], "local to the CLI");

  // The page in a real browser: a screenshot with content, the table in the DOM.
  const fs::path shot = dir.path() / "shot.png";
  const std::string chromium =
      "chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
      "--user-data-dir=" +
      (dir.path() / "chromium").string() + " --window-size=1400,1600 ";
  auto [crc, cout] =
      ts::sh(chromium + "--screenshot=" + shot.string() + " file://" + html.string() + " 2>&1");
  ASSERT_EQ(crc, 0) << cout;
  ASSERT_TRUE(fs::exists(shot)) << cout;
  int sw = 0, sh = 0;
  auto px = compare::read_frame(shot, 0, &sw, &sh);
  ASSERT_TRUE(px.ok()) << px.error().message;
  EXPECT_EQ(sw, 1400);
  std::size_t not_white = 0;
  for (std::size_t i = 0; i < px->size(); ++i) not_white += (*px)[i] < 200;
  EXPECT_GT(not_white, px->size() / 100) << "the screenshot shows something besides the background";
  auto [drc, dom] = ts::sh(chromium + "--dump-dom file://" + html.string() + " 2>/dev/null");
  ASSERT_EQ(drc, 0);
  EXPECT_NE(dom.find("<table id=\"results\">"), std::string::npos);
  EXPECT_NE(dom.find("<table id=\"summary\">"), std::string::npos);
  EXPECT_NE(dom.find(">int8</td>"), std::string::npos);
  EXPECT_NE(dom.find("<table id=\"ran-on\">"), std::string::npos);
  EXPECT_NE(dom.find(">local to the CLI</td><td class=\"l\">" + this_host + "</td>"),
            std::string::npos);
  EXPECT_NE(dom.find("audio LSD"), std::string::npos);
  EXPECT_NE(dom.find("data:image/png;base64,"), std::string::npos) << "images inline";
  std::ifstream page(html);
  const std::string page_text{std::istreambuf_iterator<char>(page), {}};
  EXPECT_EQ(page_text.find("src=\"http"), std::string::npos) << "no external resource";

  // An exec decoder that hands back the reference's output with a black and a saturated frame.
  plant(out1 / "full" / "j00.mp4", planted);
  const fs::path out2 = dir.path() / "cmp2";
  auto [rc2, o2] = ts::sh(
      ccli +
      " compare r1 --decoder overflow --decoder full --reference full --jobs 1 --json --out " +
      out2.string() + " 2>/dev/null");
  ASSERT_EQ(rc2, 0) << o2;
  const json doc2 = json::parse(o2);
  ASSERT_EQ(doc2["jobs"].size(), 1u) << "--jobs 1";
  const json& ov = result_of(doc2["jobs"][0], "overflow");
  EXPECT_EQ(ov["black_frames"], json::array({kPlantedBlack}));
  EXPECT_EQ(ov["saturated_frames"], json::array({kPlantedSaturated}));
  const int worst = ov["worst_frame"];
  EXPECT_TRUE(worst == kPlantedBlack || worst == kPlantedSaturated) << worst;
  EXPECT_LT(ov["psnr_min_db"].get<double>(), 15);
  EXPECT_TRUE(result_of(doc2["jobs"][0], "full")["black_frames"].empty());
  EXPECT_EQ(doc2["decoders"][0]["runtime"], "exec");

  // Refusals: an unknown pool (exit 2, nothing decoded), a non-empty output folder.
  auto [rc3, o3] = ts::sh(ccli + " compare r1 --decoder full --decoder nope 2>&1");
  EXPECT_EQ(rc3, 2);
  EXPECT_NE(o3.find("--decoder nope: no decode pool"), std::string::npos) << o3;
  auto [rc4, o4] =
      ts::sh(ccli + " compare r1 --decoder full --decoder int8 --out " + out1.string() + " 2>&1");
  EXPECT_EQ(rc4, 1);
  EXPECT_NE(o4.find("is not empty"), std::string::npos) << o4;
  auto [rc5, o5] = ts::sh(ccli + " compare nosuchrun --decoder full --decoder int8 2>&1");
  EXPECT_EQ(rc5, 4) << o5;
}
