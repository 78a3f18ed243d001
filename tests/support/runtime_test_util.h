#pragma once
// Helpers shared by the exec and comfyui runtime tests: temp dirs, a small job, its latent, and
// FactoryArgs over a one-pool cluster.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/latent/latent.h"
#include "common/proto/h3pipe.pb.h"
#include "common/runtime/runtime.h"
#include "tests/support/temp_dir.h"

namespace h3pipe::runtime::testing {
namespace fs = std::filesystem;

using TempDir = test_support::TempDir;

// 64x64, 9 frames at 24 fps: a latent of a few tens of KB.
inline pb::JobSpec small_spec(const std::string& job_id = "job-1") {
  pb::JobSpec s;
  s.set_job_id(job_id);
  s.set_prompt("a red kite over the sea");
  s.set_negative_prompt("blurry");
  s.set_width(64);
  s.set_height(64);
  s.set_frames(9);
  s.set_fps(24);
  s.set_steps(4);
  s.set_seed(1234567);
  return s;
}

inline latent::Latent latent_for(const pb::JobSpec& s) {
  latent::Latent l =
      latent::make_latent(latent::builtin_profile(), {s.width(), s.height(), s.frames(), s.fps()});
  for (std::size_t i = 0; i < l.video.size(); ++i)
    l.video[i] = std::sin(0.01f * static_cast<float>(i));
  for (std::size_t i = 0; i < l.audio.size(); ++i)
    l.audio[i] = std::cos(0.02f * static_cast<float>(i));
  l.metadata = {{"job", s.job_id()}};
  return l;
}

// The temporaries of `final_path` left in its folder: the shared NAME.part and every execution's
// own NAME.<token>.part / NAME.sha256.<token>.part (issue #35 D6).  Empty when none.
inline std::vector<std::string> temporaries_of(const fs::path& final_path) {
  std::vector<std::string> out;
  std::error_code ec;
  const std::string name = final_path.filename().string();
  for (const auto& e : fs::directory_iterator(final_path.parent_path(), ec)) {
    const std::string n = e.path().filename().string();
    if (n.starts_with(name + ".") && n.ends_with(".part")) out.push_back(n);
  }
  return out;
}

inline void write_text(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A cluster with one pool of the given stage; the runtime is configured at the stage level, or
// on the pool when pool_override is set (settings paths differ).
class ClusterFixture final {
 public:
  explicit ClusterFixture(config::StageKind stage, bool pool_override = false) {
    config::Pool p;
    p.name = "pool-a";
    p.host = "local";
    p.stage = stage;
    if (pool_override) p.runtime = config::RuntimeRef{};
    cluster_.pools.push_back(p);
  }
  FactoryArgs args(const nlohmann::json& settings) const {
    FactoryArgs a;
    a.cluster = &cluster_;
    a.pool = &cluster_.pools[0];
    a.settings = &settings;
    return a;
  }

 private:
  config::Cluster cluster_;
};

inline StageContext context(const pb::JobSpec& spec, const fs::path& input,
                            const fs::path& output) {
  StageContext c;
  c.run_id = "run-1";
  c.spec = &spec;
  c.input = input;
  c.output = output;
  c.host = "local";
  c.pool = "pool-a";
  return c;
}

}  // namespace h3pipe::runtime::testing
