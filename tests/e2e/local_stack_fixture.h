#pragma once
// The local stack the e2e tests drive (local_stack_e2e_test.cpp, local_stack_more_test.cpp):
// `h3pipe start` in a temp state dir with a config the test writes, the CLI, ffprobe on the MP4s.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/artifacts/artifacts.h"
#include "common/core/sha256.h"
#include "common/queue/keys.h"
#include "tests/support/test_support.h"

namespace h3pipe::e2e_stack {

namespace fs = std::filesystem;
using nlohmann::json;

// A local stack in a temp state dir with a config written by the test.
class Stack {
 public:
  explicit Stack(const json& overrides = json::object()) {
    json cfg = json::parse(R"({
      "name": "e2e", "queue": {"lease_ms": 1500, "renew_ms": 300, "sweep_ms": 200, "max_deliveries": 3, "block_ms": 50},
      "hosts": [{"name": "local"}],
      "pools": [
        {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
        {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 0.15}}},
        {"name": "s1", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 0.15}}},
        {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.02}}}
      ]})");
    cfg.merge_patch(overrides);
    cfg["state_dir"] = dir_.path().string();
    config_ = dir_.path() / "cluster.json";
    std::ofstream(config_) << cfg.dump(2);
    start();
  }
  ~Stack() { ts::sh(cli() + " stop >/dev/null 2>&1"); }
  void start() {
    auto [rc, out] = ts::sh(cli() + " start 2>&1");
    ASSERT_EQ(rc, 0) << out << log("supervisor.log");
  }
  void stop() { ASSERT_EQ(ts::sh(cli() + " stop >/dev/null 2>&1").first, 0); }
  std::string cli() const { return ts::bin("h3pipe") + " --config " + config_.string(); }
  fs::path out(const std::string& run) const { return dir_.path() / "outputs" / run; }
  std::string log(const std::string& name) const {
    std::ifstream in(dir_.path() / "logs" / name);
    if (!in) in = std::ifstream(dir_.path() / name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  json stack() const {
    json j;
    std::ifstream(dir_.path() / "stack.json") >> j;
    return j;
  }
  int pid_of(const std::string& name) const {
    const json s = stack();
    for (const auto& p : s["processes"])
      if (p["name"] == name) return p["pid"];
    return -1;
  }
  std::unique_ptr<queue::Redis> redis(const std::string& role = "admin") const {
    return std::move(queue::Redis::connect(ts::stack_redis(stack(), role)).value());
  }
  std::string submit(const std::string& batch_text) {
    auto f = dir_.path() / "batch.jsonl";
    std::ofstream(f) << batch_text;
    auto [rc, out] = ts::sh(cli() + " run " + f.string() + " --background 2>/dev/null");
    EXPECT_EQ(rc, 0);
    return out.substr(0, out.find('\n'));
  }
  int wait(const std::string& run, int timeout_s = 120) {
    return ts::sh(cli() + " wait " + run + " --timeout " + std::to_string(timeout_s) +
                  " >/dev/null 2>&1")
        .first;
  }
  json status(const std::string& run) {
    return json::parse(ts::sh(cli() + " status " + run + " --json").second);
  }
  const fs::path& dir() const { return dir_.path(); }

 private:
  ts::TempDir dir_;
  fs::path config_;
};

inline std::string batch(int n, int frames = 25, const std::string& extra = "") {
  std::string s;
  for (int i = 0; i < n; ++i)
    s +=
        fmt::format(
            R"({{"jobId":"j{:02d}","prompt":"clip {}","width":128,"height":96,"frames":{},"fps":12,"seed":{}{}}})",
            i, i, frames, i, extra) +
        "\n";
  return s;
}

inline json ffprobe(const fs::path& mp4) {
  auto [rc, out] = ts::sh(
      "ffprobe -v error -count_frames -show_entries "
      "stream=codec_name,codec_type,width,height,nb_read_frames,r_frame_rate,channels,sample_rate "
      "-of json " +
      mp4.string());
  return rc == 0 ? json::parse(out) : json();
}

}  // namespace h3pipe::e2e_stack
