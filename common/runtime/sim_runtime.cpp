#include "common/runtime/sim_runtime.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "common/artifacts/artifacts.h"
#include "common/core/sha256.h"
#include "common/latent/latent.h"
#include "common/media/media.h"
#include "common/runtime/inputs.h"
#include "common/runtime/stage_output.h"

namespace h3pipe::runtime {
namespace {
using Clock = std::chrono::steady_clock;

// Sleeps until `start + seconds`, polling cancellation.
Status finish_at(Clock::time_point start, double seconds, const StageContext& ctx) {
  auto until =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (Clock::now() < until) {
    if (ctx.cancelled()) return make_error(errc::runtime::kCancelled, "cancelled");
    std::this_thread::sleep_for(
        std::min<Clock::duration>(until - Clock::now(), std::chrono::milliseconds(50)));
  }
  return {};
}

// The profile time covers the whole stage, as a real runtime's measured time does: the work
// (here: computing the output and writing it durably), then the publication, last.  The hold
// before publishing (artifacts::BeforePublish) lasts until the profile time is up minus what
// publishing took lately, so that the output appears when the profile says the stage ends, and a
// worker killed during the profile time loses its work as a real one would (before, the sim
// published first and slept after, and a re-delivery found the output and skipped).
class Publisher {
 public:
  artifacts::BeforePublish hold(Clock::time_point start, double secs, const StageContext& ctx) {
    return [this, start, secs, &ctx]() -> Status {
      Status s = finish_at(start, std::max(0.0, secs - publish_s_), ctx);
      held_until_ = Clock::now();
      return s;
    };
  }
  // After write_once / commit_part returned: learns how long the publication took.
  void published() {
    if (held_until_ == Clock::time_point{}) return;
    const double took = std::chrono::duration<double>(Clock::now() - held_until_).count();
    publish_s_ = std::min(0.1, 0.8 * publish_s_ + 0.2 * took);
    held_until_ = {};
  }

 private:
  double publish_s_ = 0.002;
  Clock::time_point held_until_{};
};

// splitmix64: a fixed, portable generator so artifacts are the same on every build.
struct SplitMix {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() {
    return static_cast<float>(next() >> 40) / static_cast<float>(1 << 24) * 2.f - 1.f;
  }
};

std::uint64_t seed_of(const pb::JobSpec& s) {
  auto h = sha256_hex(s.prompt());
  return std::stoull(h.substr(0, 15), nullptr, 16) ^ s.seed();
}

class SimEncode final : public StageRuntime {
 public:
  SimEncode(ProfileClock clock, std::vector<std::filesystem::path> input_roots)
      : clock_(std::move(clock)), input_roots_(std::move(input_roots)) {}
  Result<StageOutput> run(const StageContext& ctx) override {
    auto start = Clock::now();
    double secs = clock_.draw(ctx.job_class);
    std::uint64_t seed = seed_of(*ctx.spec);
    // A rehearsal reads the reference image as a real encoder does (inputs.h): opened now beneath
    // the input roots, its bytes (not its name) in the conditioning.
    if (!ctx.spec->reference_image().empty()) {
      auto in = open_reference(*ctx.spec, input_roots_, "encode");
      if (!in.ok()) return in.error();
      auto bytes = read_reference(*in, "encode");
      if (!bytes.ok()) return bytes.error();
      seed ^= std::stoull(sha256_hex(*bytes).substr(0, 15), nullptr, 16);
    }
    SplitMix rng{seed};
    latent::TensorF32 t{{1, 77, 256}, std::vector<float>(77 * 256)};
    for (auto& v : t.data) v = rng.uniform();
    bool reused = false;
    const OutputTarget out_at = output_target(ctx, config::StageKind::kEncode);
    auto sha = artifacts::write_once(
        out_at.root, out_at.path,
        latent::serialize_tensors({{"cond", t}}, {{"runtime", "sim"}, {"job", ctx.spec->job_id()}}),
        &reused, publisher_.hold(start, secs, ctx));
    publisher_.published();
    if (!sha.ok()) return sha.error();
    StageOutput out{*sha, t.data.size() * 4, "cpu", {{"profile_seconds", secs}}};
    out.reused = reused;
    return out;
  }

 private:
  ProfileClock clock_;
  std::vector<std::filesystem::path> input_roots_;
  Publisher publisher_;
};

class SimSample final : public StageRuntime {
 public:
  SimSample(ProfileClock clock) : clock_(std::move(clock)) {}
  Result<StageOutput> run(const StageContext& ctx) override {
    auto start = Clock::now();
    double secs = clock_.draw(ctx.job_class);
    // Failure rehearsal: a job can ask the sim sampler to crash its worker (a poison job).
    if (auto it = ctx.spec->params().find("sim.crash");
        it != ctx.spec->params().end() && it->second == "abort")
      std::abort();
    auto cond = latent::read_tensors(ctx.input);
    if (!cond.ok()) return input_error(cond.error(), "conditioning", ctx.input);
    const auto& s = *ctx.spec;
    // The job's profile's latent (docs/latent.md): a rehearsal of a Wan cluster moves Wan-sized
    // latents, with audio only where the profile has it.
    const latent::Expected want = expected_latent(ctx);
    latent::Latent l = latent::make_latent(want.profile, want.job);
    SplitMix rng{seed_of(s) + s.steps()};
    // Smooth, structured content (a moving gradient per channel plus noise) so the MP4 shows
    // motion.
    const auto& g = l.geometry;
    std::vector<float> phase(g.channels());
    for (auto& p : phase) p = rng.uniform() * 3.14159f;
    std::size_t i = 0;
    for (std::uint64_t c = 0; c < g.channels(); ++c)
      for (std::uint64_t t = 0; t < g.t(); ++t)
        for (std::uint64_t y = 0; y < g.h(); ++y)
          for (std::uint64_t x = 0; x < g.w(); ++x)
            l.video[i++] = std::sin(phase[c] + 0.35f * x + 0.25f * y + 0.6f * t * (1 + c % 3)) +
                           0.05f * rng.uniform();
    for (std::size_t k = 0; k < l.audio.size(); ++k)
      l.audio[k] = 0.5f * std::sin(0.01f * k * (1 + k % 7)) + 0.05f * rng.uniform();
    l.metadata = {{"runtime", "sim"}, {"job", s.job_id()}, {"steps", std::to_string(s.steps())}};
    bool reused = false;
    const OutputTarget out_at = output_target(ctx, config::StageKind::kSample);
    auto sha = artifacts::write_once(out_at.root, out_at.path, latent::serialize(l), &reused,
                                     publisher_.hold(start, secs, ctx));
    publisher_.published();
    if (!sha.ok()) return sha.error();
    StageOutput out{*sha, g.data_bytes(), "cpu", {{"profile_seconds", secs}}};
    out.reused = reused;
    return out;
  }

 private:
  ProfileClock clock_;
  Publisher publisher_;
};

class SimDecode final : public StageRuntime {
 public:
  SimDecode(ProfileClock clock) : clock_(std::move(clock)) {}
  Result<StageOutput> run(const StageContext& ctx) override {
    auto start = Clock::now();
    double secs = clock_.draw(ctx.job_class);
    // libav opens the .part by path: the folder is made (and checked for planted symlinks) first.
    auto part = prepare_output(ctx, config::StageKind::kDecode);  // this execution's own
    if (!part.ok()) return part.error();
    const auto mux0 = Clock::now();
    if (Status r = render_latent_mp4(ctx.input, *ctx.spec, *part, ctx.latent_profile); !r.ok()) {
      std::error_code ec;
      std::filesystem::remove(*part, ec);  // half an MP4: never kept
      return r.error();
    }
    // The sim decode's MP4 write is its mux (inside the profile's seconds, which the hold keeps).
    const double mux_s = std::chrono::duration<double>(Clock::now() - mux0).count();
    bool reused = false;
    const OutputTarget out_at = output_target(ctx, config::StageKind::kDecode);
    auto sha = artifacts::commit_own_part(out_at.root, out_at.path, *part, {}, &reused,
                                          publisher_.hold(start, secs, ctx));
    publisher_.published();
    if (!sha.ok()) return sha.error();
    std::error_code ec;
    auto bytes = std::filesystem::file_size(ctx.output, ec);
    StageOutput out{*sha, bytes, "cpu", {{"profile_seconds", secs}, {"codec", "h264+aac"}}};
    out.reused = reused;
    out.mux_s = mux_s;
    return out;
  }

 private:
  ProfileClock clock_;
  Publisher publisher_;
};

}  // namespace

ProfileClock::ProfileClock(const config::Pool& pool, double time_scale, std::uint64_t seed)
    : pool_(pool), scale_(time_scale), rng_(seed) {}

double ProfileClock::draw(const std::string& job_class) {
  const config::Profile* prof = pool_.profile_for(job_class);
  if (!prof) return 0;
  const auto& p = *prof;
  double s = 0;
  switch (p.kind) {
    case config::Profile::Kind::kFixed:
      s = p.seconds;
      break;
    case config::Profile::Kind::kNormal:
      s = std::max(0.0, std::normal_distribution<double>(p.mean, p.sd)(rng_));
      break;
    case config::Profile::Kind::kCycle: {
      auto& pos = cycle_pos_[prof];
      s = p.cycle[pos++ % p.cycle.size()];
      break;
    }
  }
  return s * scale_;
}

Status render_latent_mp4(const std::filesystem::path& latent_path, const pb::JobSpec& s,
                         const std::filesystem::path& mp4_part,
                         const latent::LatentProfile& profile) {
  const latent::Expected want{profile, {s.width(), s.height(), s.frames(), s.fps()}};
  auto l = latent::read_latent(latent_path, &want);
  if (!l.ok()) return input_error(l.error(), "latent", latent_path);
  const auto& g = l->geometry;
  // The sim decode profile covers this write, so it uses the writer's fast settings (bench_mp4).
  auto w = media::Mp4Writer::open(
      mp4_part,
      media::fast_video_params(static_cast<int>(s.width()), static_cast<int>(s.height()),
                               static_cast<int>(s.fps())),
      media::fast_audio_params());
  if (!w.ok()) return w.error();
  // Fixed linear map 24 channels -> RGB: channel c weighs into R, G, B by a smooth pattern.
  float m[3][24];
  for (int k = 0; k < 3; ++k)
    for (int c = 0; c < 24; ++c) m[k][c] = 0.25f * std::cos(0.7f * c + 2.1f * k);
  const std::size_t plane = static_cast<std::size_t>(g.h() * g.w());
  const std::uint32_t tf = std::max<std::uint32_t>(profile.temporal_factor, 1);
  const std::uint32_t sf = std::max<std::uint32_t>(profile.spatial_factor, 1);
  const auto gt = static_cast<std::uint32_t>(g.t());
  std::vector<std::uint8_t> small(plane * 3),
      frame(static_cast<std::size_t>(s.width()) * s.height() * 3);
  for (std::uint32_t f = 0; f < s.frames(); ++f) {
    std::uint32_t t = std::min<std::uint32_t>(f / tf, gt - 1);
    // temporal_factor frames share a latent step: the picture is built once per step.
    if (f > 0 && t == std::min<std::uint32_t>((f - 1) / tf, gt - 1)) {
      H3_TRY((*w)->add_frame(frame));
      continue;
    }
    for (std::size_t p = 0; p < plane; ++p) {
      for (int k = 0; k < 3; ++k) {
        float acc = 0;
        for (std::uint64_t c = 0; c < g.channels(); ++c)
          acc += m[k][c % 24] * l->video[(static_cast<std::size_t>(c) * gt + t) * plane + p];
        small[p * 3 + k] = static_cast<std::uint8_t>(std::clamp(128.f + 90.f * acc, 0.f, 255.f));
      }
    }
    for (std::uint32_t y = 0; y < s.height(); ++y)
      for (std::uint32_t x = 0; x < s.width(); ++x) {
        std::size_t src = (std::min<std::size_t>(y / sf, g.h() - 1) * g.w() +
                           std::min<std::size_t>(x / sf, g.w() - 1)) *
                          3;
        std::size_t dst = (static_cast<std::size_t>(y) * s.width() + x) * 3;
        frame[dst] = small[src];
        frame[dst + 1] = small[src + 1];
        frame[dst + 2] = small[src + 2];
      }
    H3_TRY((*w)->add_frame(frame));
  }
  // Audio: each latent step becomes a stretch of samples per channel: a tone whose pitch follows
  // the latent, so the waveform is a function of the latent (not silence).  The audio tensor is
  // read as (channels..., steps) with its length axis from the profile; a profile without audio
  // gives a quiet fixed tone.
  std::size_t len = 1, stride = 1, channels = 1;
  const auto& rule = profile.audio.shape;
  for (std::size_t ax = 0; ax < rule.size(); ++ax) {
    if (rule[ax] == latent::AudioRule::kLength) {
      len = std::max<std::size_t>(g.audio[ax], 1);
      stride = 1;
      for (std::size_t k = ax + 1; k < g.audio.size(); ++k) stride *= g.audio[k];
    }
  }
  if (g.has_audio()) channels = std::max<std::size_t>(l->audio.size() / (len * stride), 1);
  auto audio_at = [&](std::size_t c, std::size_t step) {
    return g.has_audio() ? l->audio[(c % channels) * len * stride + step * stride] : 0.0f;
  };
  std::size_t total =
      static_cast<std::size_t>(std::llround(static_cast<double>(s.frames()) / s.fps() * 48000));
  std::vector<float> pcm(total * 2);
  double ph[2] = {0, 0};
  double dph[2] = {0, 0};
  auto last_step = static_cast<std::size_t>(-1);
  for (std::size_t n = 0; n < total; ++n) {
    // Samples per latent step: 48000 / (rate_num / rate_den), 86 for the builtin profile.
    std::size_t step =
        std::min<std::size_t>(n * std::max<std::uint32_t>(profile.audio.rate_num, 1) /
                                  (48000ull * std::max<std::uint32_t>(profile.audio.rate_den, 1)),
                              len - 1);
    for (int ch = 0; ch < 2; ++ch) {
      if (step != last_step) {  // pitch changes once per latent step
        float a = 0;
        for (std::size_t c = 0; c < 4; ++c)
          a += audio_at(c * 2 + static_cast<std::size_t>(ch), step);
        dph[ch] = 2 * M_PI * (220.0 * (1.0 + 0.5 * std::tanh(a))) / 48000.0;
      }
      ph[ch] += dph[ch];
      pcm[n * 2 + ch] = static_cast<float>(0.2 * std::sin(ph[ch]));
    }
    last_step = step;
  }
  H3_TRY((*w)->add_audio(pcm));
  return (*w)->finish();
}

void check_sim_settings(const FactoryArgs& a, config::StageKind stage, bool, config::Errors& e) {
  if (!a.settings || !a.settings->is_object()) return;
  for (const auto& [key, value] : a.settings->items())
    e.add(
        settings_path(a, stage) + "/" + key,
        "unknown key; the sim runtime takes no settings (its stage times are the pool's profiles)");
}

Result<std::unique_ptr<StageRuntime>> make_sim_encode(const FactoryArgs& a) {
  return std::unique_ptr<StageRuntime>(new SimEncode(
      ProfileClock(*a.pool, a.cluster->time_scale, a.seed), a.cluster->limits.input_roots));
}
Result<std::unique_ptr<StageRuntime>> make_sim_sample(const FactoryArgs& a) {
  return std::unique_ptr<StageRuntime>(
      new SimSample(ProfileClock(*a.pool, a.cluster->time_scale, a.seed)));
}
Result<std::unique_ptr<StageRuntime>> make_sim_decode(const FactoryArgs& a) {
  // libav's one-time set-up (codec tables, x264's first open) here, at service start, not in the
  // first job's profile.  A failure shows again, with its reason, in the first real write.
  (void)media::warm_up();
  return std::unique_ptr<StageRuntime>(
      new SimDecode(ProfileClock(*a.pool, a.cluster->time_scale, a.seed)));
}

}  // namespace h3pipe::runtime
