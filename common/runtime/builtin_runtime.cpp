// Adapter from the stage interfaces to common/model (the builtin reference model).
#include "common/runtime/builtin_runtime.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <span>
#include <thread>
#include <vector>

#include "common/artifacts/artifacts.h"
#include "common/gpu/nvml.h"
#include "common/latent/latent.h"
#include "common/media/media.h"
#include "common/model/kernels.h"
#include "common/model/model.h"
#include "common/runtime/inputs.h"
#include "common/runtime/preview.h"
#include "common/runtime/stage_output.h"

namespace h3pipe::runtime {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::string_view kDecodeKeys[] = {"crf", "preset"};

// The builtin model's latent is the builtin profile's grid (docs/latent.md).
Status require_builtin_profile(const StageContext& ctx) {
  if (ctx.latent_profile.name == latent::builtin_profile().name) return {};
  return make_error(errc::runtime::kPermanentProfile,
                    "the builtin runtime makes and reads latents of profile builtin; job {} has "
                    "profile {} (run it on a runtime for that model, e.g. comfyui)",
                    ctx.spec->job_id(), ctx.latent_profile.name);
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Loaded {
  std::unique_ptr<model::Model> model;
  nlohmann::json settings;  // effective model settings, for receipts
  int crf = 23;
  std::string preset = "veryfast";
  std::vector<std::filesystem::path> input_roots;  // limits.input_roots: where references come from
};

// The CPU's measured sgemm peak with `threads` threads (OpenBLAS, one single-threaded call per
// thread, as the model's kernels run): the MFU denominator of a builtin pool on CPU (issue #24).
// Measured once per process, about 0.1 s; GFLOP/s.
double cpu_sgemm_peak_gflops(int threads) {
  static const double peak = [threads] {
    constexpr int kN = 384;
    const int n = std::max(1, threads);
    std::vector<double> flops(static_cast<std::size_t>(n), 0);
    std::vector<std::thread> pool;
    for (int t = 0; t < n; ++t)
      pool.emplace_back([&, t] {
        std::vector<float> a(kN * kN, 0.5f), b(kN * kN, 0.25f), c(kN * kN, 0.f);
        for (int rep = 0; rep < 3; ++rep)  // warm the caches and the library
          model::sgemm(false, true, kN, kN, kN, 1.f, a.data(), kN, b.data(), kN, 0.f, c.data(), kN);
        const auto s0 = Clock::now();
        int reps = 0;
        while (std::chrono::duration<double>(Clock::now() - s0).count() < 0.1) {
          model::sgemm(false, true, kN, kN, kN, 1.f, a.data(), kN, b.data(), kN, 0.f, c.data(), kN);
          ++reps;
        }
        flops[static_cast<std::size_t>(t)] =
            2.0 * kN * kN * kN * reps / std::chrono::duration<double>(Clock::now() - s0).count();
      });
    for (auto& th : pool) th.join();
    double sum = 0;
    for (double f : flops) sum += f;
    return sum / 1e9;
  }();
  return peak;
}

const char* env_or_unset(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "unset";
}

// CUDA ordinal of a GPU written as its host id in the cluster config: the container's
// renumbering (NVIDIA_VISIBLE_DEVICES, as for the metrics), then the process's own
// CUDA_VISIBLE_DEVICES; CUDA is asked to number devices in PCI order like NVML.  -1: not visible.
int cuda_ordinal(int host_id) {
  ::setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", /*overwrite=*/0);
  int idx = gpu::nvml_indices({host_id}, std::getenv("NVIDIA_VISIBLE_DEVICES")).front();
  if (idx >= 0) idx = gpu::nvml_indices({idx}, std::getenv("CUDA_VISIBLE_DEVICES")).front();
  return idx;
}

Result<Loaded> load(const FactoryArgs& a, config::StageKind stage, unsigned parts) {
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json& s = a.settings ? *a.settings : empty;
  const std::string path = settings_path(a, stage);
  const bool decode = stage == config::StageKind::kDecode;
  auto cfg = model::parse_config(s, path,
                                 decode ? std::span<const std::string_view>(kDecodeKeys)
                                        : std::span<const std::string_view>());
  if (!cfg) return cfg.error();
  Loaded l;
  if (decode) {
    if (auto it = s.find("crf"); it != s.end()) {
      if (!it->is_number_integer() || it->get<int>() < 0 || it->get<int>() > 51)
        return make_error(errc::config::kInvalid, "{}/crf: expected an integer in [0, 51]", path);
      l.crf = it->get<int>();
    }
    if (auto it = s.find("preset"); it != s.end()) {
      if (!it->is_string())
        return make_error(errc::config::kInvalid, "{}/preset: expected a string", path);
      l.preset = it->get<std::string>();
    }
  }
  // "device": "cuda" runs on the pool's first GPU (its host id, through the container's and the
  // process's visible-device lists); "cuda:N" names the CUDA ordinal itself.
  if (cfg->device == "cuda" && a.pool && !a.pool->gpus.empty()) {
    const int ordinal = cuda_ordinal(a.pool->gpus.front());
    if (ordinal < 0)
      return make_error(
          errc::runtime::kPermanentConfig,
          "{}/device: \"cuda\" on pool {} whose GPU {} is not visible to this process "
          "(NVIDIA_VISIBLE_DEVICES={}, CUDA_VISIBLE_DEVICES={})",
          path, a.pool->name, a.pool->gpus.front(), env_or_unset("NVIDIA_VISIBLE_DEVICES"),
          env_or_unset("CUDA_VISIBLE_DEVICES"));
    cfg->device = fmt::format("cuda:{}", ordinal);
  }
  auto m = model::Model::load(*cfg, parts);
  if (!m) return m.error();
  l.model = std::move(*m);
  l.settings = model::config_to_json(*cfg);
  if (a.cluster) l.input_roots = a.cluster->limits.input_roots;
  return l;
}

class BuiltinEncode final : public StageRuntime {
 public:
  explicit BuiltinEncode(Loaded l) : l_(std::move(l)) {}
  Result<StageOutput> run(const StageContext& ctx) override {
    const auto t0 = Clock::now();
    const pb::JobSpec& spec = *ctx.spec;
    H3_TRY(prepare_output(ctx, config::StageKind::kEncode));
    std::optional<media::Image> ref;
    if (!spec.reference_image().empty()) {
      // Opened now, beneath the input roots; libav decodes from this descriptor (inputs.h).
      auto in = open_reference(spec, l_.input_roots, "encode");
      if (!in) return in.error();
      auto img = media::read_image(in->fd.get(), in->path.string());
      if (!img) return make_error(errc::runtime::kPermanentInput, "{}", img.error().message);
      ref = std::move(*img);
    }
    auto cond = l_.model->encode(spec.prompt(), ref ? &*ref : nullptr);
    if (!cond) return cond.error();
    latent::TensorF32 t;
    t.shape.assign(cond->shape.begin(), cond->shape.end());
    t.data = std::move(cond->data);
    nlohmann::json settings = l_.settings;
    settings["gflop"] = l_.model->last_gflop();
    settings["compute_seconds"] = since(t0);
    auto out = write_stage_output(
        config::StageKind::kEncode, ctx,
        latent::serialize_tensors({{"cond", t}}, {{"runtime", "builtin"}, {"job", spec.job_id()}}),
        l_.model->device(), std::move(settings));
    if (!out) return out.error();
    out->bytes = t.data.size() * 4;
    return out;
  }

 private:
  Loaded l_;
};

class BuiltinSample final : public StageRuntime {
 public:
  explicit BuiltinSample(Loaded l) : l_(std::move(l)) {}
  Result<StageOutput> run(const StageContext& ctx) override {
    const auto t0 = Clock::now();
    const pb::JobSpec& s = *ctx.spec;
    H3_TRY(prepare_output(ctx, config::StageKind::kSample));
    auto tensors = latent::read_tensors(ctx.input);
    if (!tensors) return input_error(tensors.error(), "conditioning", ctx.input);
    const auto it = tensors->find("cond");
    if (it == tensors->end())
      return make_error(errc::runtime::kPermanentInput, "conditioning {}: no tensor \"cond\"",
                        ctx.input.string());
    model::Tensor cond;
    for (auto d : it->second.shape) cond.shape.push_back(static_cast<std::int64_t>(d));
    // Files from other encoders may carry a leading batch axis of 1.
    if (cond.shape.size() == 3 && cond.shape[0] == 1) cond.shape.erase(cond.shape.begin());
    cond.data = std::move(it->second.data);
    const auto dims = model::latent_dims(static_cast<int>(s.width()), static_cast<int>(s.height()),
                                         static_cast<int>(s.frames()), static_cast<int>(s.fps()));
    // The builtin model makes the builtin profile's grid; a job of another profile cannot run here.
    H3_TRY(require_builtin_profile(ctx));
    latent::Latent l = latent::make_latent(latent::builtin_profile(), expected_latent(ctx).job);
    // A preview every quarter of the steps and at most once a second (preview.h; its cost is
    // measured in runtime_preview_test), never at the last step (the result itself is next).
    const std::uint32_t every = std::max<std::uint32_t>(1, s.steps() / 4);
    auto last_preview = Clock::now() - std::chrono::seconds(1);
    const model::StepFn on_step = [&](std::uint32_t k, std::uint32_t n, const float* video) {
      ctx.progress(k, n);
      if (!ctx.preview || !video || k % every != 0 || k == n ||
          Clock::now() - last_preview < std::chrono::seconds(1))
        return;
      last_preview = Clock::now();
      auto p = latent_preview_jpeg_base64(video, model::kVideoChannels, dims.t, dims.h, dims.w);
      if (p.ok()) ctx.preview(k, n, *p);
    };
    auto st =
        l_.model->sample(cond, dims, s.steps(), s.seed(), l.video, l.audio, ctx.cancelled, on_step);
    if (!st) return st.error();
    l.metadata = {{"runtime", "builtin"},
                  {"job", s.job_id()},
                  {"steps", std::to_string(s.steps())},
                  {"seed", std::to_string(s.seed())}};
    nlohmann::json settings = l_.settings;
    settings["gflop"] = l_.model->last_gflop();
    if (l_.model->device() == "cpu")
      settings["peak_gflops"] = cpu_sgemm_peak_gflops(l_.settings.value("threads", 1));
    settings["compute_seconds"] = since(t0);
    auto out = write_stage_output(config::StageKind::kSample, ctx, latent::serialize(l),
                                  l_.model->device(), std::move(settings));
    if (!out) return out.error();
    out->bytes = l.geometry.data_bytes();
    return out;
  }

 private:
  Loaded l_;
};

class BuiltinDecode final : public StageRuntime {
 public:
  explicit BuiltinDecode(Loaded l) : l_(std::move(l)) {}
  Result<StageOutput> run(const StageContext& ctx) override {
    const auto t0 = Clock::now();
    const pb::JobSpec& s = *ctx.spec;
    auto own = prepare_output(ctx, config::StageKind::kDecode);
    if (!own) return own.error();
    const std::filesystem::path part = *own;  // this execution's own temporary
    H3_TRY(require_builtin_profile(ctx));
    const latent::Expected want = expected_latent(ctx);
    auto lat = latent::read_latent(ctx.input, &want);
    if (!lat) return input_error(lat.error(), "latent", ctx.input);
    const auto dims = model::latent_dims(static_cast<int>(s.width()), static_cast<int>(s.height()),
                                         static_cast<int>(s.frames()), static_cast<int>(s.fps()));
    Status st = write_mp4(*lat, dims, s, part, ctx.cancelled);
    std::error_code ec;
    if (!st) {
      std::filesystem::remove(part, ec);
      return st.error();
    }
    auto out =
        commit_stage_output(config::StageKind::kDecode, ctx, part, l_.model->device(), l_.settings);
    if (!out) return out.error();
    out->settings["gflop"] = gflop_;
    out->settings["compute_seconds"] = since(t0);
    out->settings["crf"] = l_.crf;
    out->settings["preset"] = l_.preset;
    out->mux_s = mux_s_;
    return out;
  }

 private:
  Status write_mp4(const latent::Latent& lat, const model::LatentDims& dims, const pb::JobSpec& s,
                   const std::filesystem::path& part, const std::function<bool()>& cancelled) {
    media::VideoParams vp{static_cast<int>(s.width()), static_cast<int>(s.height()),
                          static_cast<int>(s.fps())};
    vp.crf = l_.crf;
    vp.preset = l_.preset;
    auto w = media::Mp4Writer::open(part, vp, media::AudioParams{});
    if (!w) return w.error();
    // mux_s: the writer's share (H.264/AAC encode into the container), timed around its calls.
    mux_s_ = 0;
    H3_TRY(l_.model->decode_video(
        lat.video.data(), dims, static_cast<int>(s.frames()), vp.width, vp.height,
        [&](std::span<const std::uint8_t> rgb) {
          const auto m0 = Clock::now();
          auto r = (*w)->add_frame(rgb);
          mux_s_ += since(m0);
          return r;
        },
        cancelled));
    gflop_ = l_.model->last_gflop();
    std::vector<float> pcm;
    H3_TRY(l_.model->decode_audio(
        lat.audio.data(), dims,
        model::audio_samples(static_cast<int>(s.frames()), static_cast<int>(s.fps())), pcm));
    gflop_ += l_.model->last_gflop();
    const auto m0 = Clock::now();
    H3_TRY((*w)->add_audio(pcm));
    Status fin = (*w)->finish();
    mux_s_ += since(m0);
    return fin;
  }

  Loaded l_;
  double gflop_ = 0;
  double mux_s_ = 0;
};

}  // namespace

void check_builtin_settings(const FactoryArgs& a, config::StageKind stage, bool host,
                            config::Errors& e) {
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json& s = a.settings ? *a.settings : empty;
  const std::string path = settings_path(a, stage);
  const bool decode = stage == config::StageKind::kDecode;
  auto cfg = model::parse_config(s, path,
                                 decode ? std::span<const std::string_view>(kDecodeKeys)
                                        : std::span<const std::string_view>());
  if (!cfg) {
    // Its lines are "PATH: what" under a heading line.
    const std::string& m = cfg.error().message;
    std::size_t at = m.find('\n');
    if (at == std::string::npos) e.add(path, m);
    while (at != std::string::npos) {
      std::size_t end = m.find('\n', at + 1);
      std::string line =
          m.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
      line.erase(0, line.find_first_not_of(' '));
      auto colon = line.find(": ");
      if (colon == std::string::npos)
        e.add(path, line);
      else
        e.add(line.substr(0, colon), line.substr(colon + 2));
      at = end;
    }
  }
  if (decode && s.is_object()) {
    if (auto it = s.find("crf");
        it != s.end() && (!it->is_number_integer() || it->get<int>() < 0 || it->get<int>() > 51))
      e.add(path + "/crf", "expected an integer in [0, 51]");
    if (auto it = s.find("preset"); it != s.end() && !it->is_string())
      e.add(path + "/preset", "expected a string");
  }
  // What this host's build must provide: the CUDA backend for a "cuda" device.
  if (host && cfg && cfg->device != "cpu" && !model::cuda_built())
    e.add(
        path + "/device",
        fmt::format("\"{}\" requested, but this build of h3pipe has no CUDA backend (built without "
                    "the CUDA toolkit or with -DH3PIPE_CUDA=OFF); use \"cpu\" or a CUDA build",
                    cfg->device));
  if (host && cfg && !cfg->weights_file.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(cfg->weights_file, ec) ||
        ::access(cfg->weights_file.c_str(), R_OK) != 0)
      e.add(path + "/weights_file",
            fmt::format("\"{}\" is not a readable file on this host", cfg->weights_file));
  }
}

Result<std::unique_ptr<StageRuntime>> make_builtin_encode(const FactoryArgs& a) {
  auto l = load(a, config::StageKind::kEncode, model::kEncoder);
  if (!l) return l.error();
  return std::unique_ptr<StageRuntime>(std::make_unique<BuiltinEncode>(std::move(*l)));
}

Result<std::unique_ptr<StageRuntime>> make_builtin_sample(const FactoryArgs& a) {
  auto l = load(a, config::StageKind::kSample, model::kSampler);
  if (!l) return l.error();
  return std::unique_ptr<StageRuntime>(std::make_unique<BuiltinSample>(std::move(*l)));
}

Result<std::unique_ptr<StageRuntime>> make_builtin_decode(const FactoryArgs& a) {
  auto l = load(a, config::StageKind::kDecode, model::kDecoder);
  if (!l) return l.error();
  return std::unique_ptr<StageRuntime>(std::make_unique<BuiltinDecode>(std::move(*l)));
}

}  // namespace h3pipe::runtime
