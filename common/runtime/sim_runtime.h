#pragma once
// The `sim` runtime: each stage takes a duration drawn from its pool's profile (scaled by
// time_scale), the writing of its artifact included (it sleeps only for what remains), and writes
// an artifact of the real kind and size: a conditioning tensor, the dual-stream .h3latent, a real
// MP4 (latent channels projected to RGB by a fixed linear map, upsampled; audio latent rendered
// to 48 kHz stereo AAC).
#include <random>

#include "common/core/json_reader.h"
#include "common/runtime/runtime.h"

namespace h3pipe::runtime {

// Draws stage durations from a pool's profiles.
class ProfileClock final {
 public:
  ProfileClock(const config::Pool& pool, double time_scale, std::uint64_t seed);
  double draw(const std::string& job_class);

 private:
  const config::Pool& pool_;
  double scale_;
  std::mt19937_64 rng_;
  std::map<const config::Profile*, std::size_t> cycle_pos_;  // position in each cycle profile
};

// The sim runtime takes no settings (its stage times are the pool's profiles): every key is
// unknown.  runtime::check_settings calls it.
void check_sim_settings(const FactoryArgs& a, config::StageKind stage, bool host,
                        config::Errors& e);

Result<std::unique_ptr<StageRuntime>> make_sim_encode(const FactoryArgs& a);
Result<std::unique_ptr<StageRuntime>> make_sim_sample(const FactoryArgs& a);
Result<std::unique_ptr<StageRuntime>> make_sim_decode(const FactoryArgs& a);

// Shared with builtin: render a latent to MP4 the simple way (fixed projection).
// The latent must fit `profile` for the spec's geometry.
Status render_latent_mp4(const std::filesystem::path& latent_path, const pb::JobSpec& spec,
                         const std::filesystem::path& mp4_part,
                         const latent::LatentProfile& profile = latent::builtin_profile());

}  // namespace h3pipe::runtime
