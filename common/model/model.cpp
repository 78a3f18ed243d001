// Model: owns the weights, the worker pool and the four networks; validates inputs at the API.
#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "common/model/cuda/backend.h"
#include "common/model/networks.h"
#include "common/model/precision.h"

namespace h3pipe::model {

struct Model::Impl {
  ModelConfig config;
  std::vector<ParamSpec> specs;
  Weights weights;
  ThreadPool pool;
  Scratch scratch;
  FlopCounter fc;
  double last_gflop = 0;
  unsigned parts = kAllParts;
  std::unique_ptr<TextEncoder> text;
  std::unique_ptr<Dit> dit;
  std::unique_ptr<VideoDecoder> video;
  std::unique_ptr<AudioDecoder> audio;

  Impl(ModelConfig c, std::vector<ParamSpec> s, Weights w)
      : config(std::move(c)), specs(std::move(s)), weights(std::move(w)), pool(config.threads) {}

  // The device backend ("device": "cuda..."): sampler and decoders run there.
  std::unique_ptr<DeviceBackend> device;

  Exec exec() {
    fc.flops = 0;
    // One scratch buffer per worker, created here: tasks only ever touch their own.
    scratch.per_worker.resize(static_cast<std::size_t>(pool.size()));
    return Exec{pool, fc, scratch};
  }
  void done() {
    last_gflop = fc.flops / 1e9;
    // Large activations go back to the system between calls (a decoder process holds no
    // sampler-sized buffers, and the reverse).
    scratch = Scratch{};
  }
};

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::load(const ModelConfig& c, unsigned parts) {
  if (c.width % c.heads != 0 || c.vae_channels.size() != 5 || c.audio_channels.size() != 3 ||
      c.patch[0] != 1 || c.patch[1] != c.patch[2] || c.threads < 1)
    return make_error(errc::config::kInvalid,
                      "builtin model config is inconsistent (see parse_config)");
  // The model parallelises itself; OpenBLAS runs each product on the calling worker.
  openblas_set_num_threads(1);
  auto specs = param_specs(c);
  const auto keep = [parts](const std::string& name) { return (part_of(name) & parts) != 0; };
  Weights w;
  if (c.weights_file.empty()) {
    std::vector<ParamSpec> kept;
    for (const auto& s : specs)
      if (keep(s.name)) kept.push_back(s);
    w = seeded_weights(kept, c.seed);
  } else {
    auto loaded = load_safetensors(c.weights_file, specs, keep);
    if (!loaded) return loaded.error();
    w = std::move(*loaded);
  }
  if (parts & kDecoder) round_decoder_weights(w, c.decoder_precision);
  auto impl = std::make_unique<Impl>(c, std::move(specs), std::move(w));
  impl->parts = parts;
  auto dev = parse_device(c.device);
  if (!dev)
    return make_error(errc::config::kInvalid, "builtin model device: {}", dev.error().message);
  if (dev->cuda && (parts & (kSampler | kDecoder))) {
    auto be = make_cuda_backend(impl->weights, impl->config, parts, std::max(0, dev->ordinal));
    if (!be) return be.error();
    impl->device = std::move(*be);
  }
  if (parts & kEncoder) impl->text = std::make_unique<TextEncoder>(impl->weights, impl->config);
  if (parts & kSampler) impl->dit = std::make_unique<Dit>(impl->weights, impl->config);
  if (parts & kDecoder) {
    impl->video = std::make_unique<VideoDecoder>(impl->weights, impl->config);
    impl->audio = std::make_unique<AudioDecoder>(impl->weights, impl->config);
  }
  return std::unique_ptr<Model>(new Model(std::move(impl)));
}

const ModelConfig& Model::config() const {
  return impl_->config;
}
double Model::last_gflop() const {
  return impl_->last_gflop;
}
std::string Model::device() const {
  return impl_->device ? impl_->device->device() : "cpu";
}
std::uint64_t Model::device_weight_bytes() const {
  return impl_->device ? impl_->device->stats().weight_bytes : 0;
}
std::uint64_t Model::device_peak_bytes() const {
  return impl_->device ? impl_->device->stats().peak_bytes : 0;
}
std::int64_t Model::parameters() const {
  return impl_->weights.parameters();
}

Result<Tensor> Model::encode(std::string_view prompt, const media::Image* reference) {
  if (!impl_->text)
    return make_error(errc::runtime::kPermanentConfig,
                      "the builtin model was loaded without its encoder");
  if (reference &&
      (reference->width <= 0 || reference->height <= 0 ||
       reference->rgb.size() != static_cast<std::size_t>(reference->width) * reference->height * 3))
    return make_error(errc::runtime::kPermanentInput,
                      "reference image has inconsistent size {}x{} / {} bytes", reference->width,
                      reference->height, reference->rgb.size());
  Exec ex = impl_->exec();
  Tensor t = impl_->text->encode(ex, prompt, reference);
  impl_->done();
  return t;
}

namespace {
Error not_loaded(const char* what) {
  return make_error(errc::runtime::kPermanentConfig, "the builtin model was loaded without its {}",
                    what);
}

Status check_dims(const LatentDims& d) {
  if (d.t < 1 || d.h < 1 || d.w < 1 || d.audio_len < 1 || d.t > 4096 || d.h > 1024 || d.w > 1024 ||
      d.audio_len > (1 << 24))
    return make_error(errc::runtime::kPermanentInput,
                      "latent geometry t={} h={} w={} audio_len={} out of range", d.t, d.h, d.w,
                      d.audio_len);
  return Status::Ok();
}
}  // namespace

Status Model::sample(const Tensor& cond, const LatentDims& dims, std::uint32_t steps,
                     std::uint64_t seed, std::vector<float>& video_out,
                     std::vector<float>& audio_out, const CancelFn& cancelled,
                     const StepFn& on_step) {
  const ModelConfig& c = impl_->config;
  if (!impl_->dit) return not_loaded("sampler");
  H3_TRY(check_dims(dims));
  if (cond.shape.size() != 2 || cond.shape[0] < 1 || cond.shape[1] != c.width ||
      cond.data.size() != static_cast<std::size_t>(cond.shape[0] * cond.shape[1]))
    return make_error(
        errc::runtime::kPermanentInput,
        "conditioning must be (N, {}) float32 with N >= 1; got shape [{}] and {} values", c.width,
        fmt::join(cond.shape, ", "), cond.data.size());
  for (std::size_t i = 0; i < cond.data.size(); ++i)
    if (!std::isfinite(cond.data[i]))
      return make_error(errc::runtime::kPermanentInput,
                        "conditioning has a non-finite value at element {}", i);
  if (steps < 1 || steps > 1000)
    return make_error(errc::runtime::kPermanentInput, "steps {} out of range [1, 1000]", steps);
  video_out.resize(static_cast<std::size_t>(dims.video_numel()));
  audio_out.resize(static_cast<std::size_t>(dims.audio_numel()));
  // Both samplers (Dit::sample, DitGpu::sample) ask `cancelled` once at the start of every step,
  // so its k-th call (k >= 1) follows step k: the step report rides on it, with no change to the
  // backends.  The last step is told after the sampler returns.
  const float* live = impl_->device ? nullptr : video_out.data();
  std::uint32_t asked = 0;
  const CancelFn per_step = !on_step ? cancelled : CancelFn([&]() -> bool {
    if (asked > 0 && asked < steps) on_step(asked, steps, live);
    ++asked;
    return cancelled && cancelled();
  });
  Status s;
  if (impl_->device) {
    s = impl_->device->sample(cond, dims, steps, seed, video_out.data(), audio_out.data(), per_step,
                              impl_->last_gflop);
  } else {
    Exec ex = impl_->exec();
    s = impl_->dit->sample(ex, cond, dims, steps, seed, video_out.data(), audio_out.data(),
                           per_step);
    impl_->done();
  }
  H3_TRY(s);
  if (on_step) on_step(steps, steps, live);
  for (float v : video_out)
    if (!std::isfinite(v))
      return make_error(errc::runtime::kNumeric, "sampler produced a non-finite video latent");
  for (float v : audio_out)
    if (!std::isfinite(v))
      return make_error(errc::runtime::kNumeric, "sampler produced a non-finite audio latent");
  return Status::Ok();
}

DecodePlan Model::plan_decode(const LatentDims& dims, int, int) const {
  return impl_->video ? impl_->video->plan(dims, impl_->device != nullptr) : DecodePlan{};
}

Status Model::decode_video(const float* video, const LatentDims& dims, int frames, int out_w,
                           int out_h, const FrameSink& on_frame, const CancelFn& cancelled) {
  if (!impl_->video) return not_loaded("decoder");
  H3_TRY(check_dims(dims));
  const int produced = 1 + kTemporalFactor * (dims.t - 1);
  if (!video || frames < 1 || frames > produced + kTemporalFactor - 1)
    return make_error(errc::runtime::kPermanentInput, "{} frames cannot come from {} latent frames",
                      frames, dims.t);
  if (out_w < 1 || out_h < 1 || out_w > dims.w * kSpatialFactor || out_h > dims.h * kSpatialFactor)
    return make_error(errc::runtime::kPermanentInput, "output {}x{} exceeds the latent's {}x{}",
                      out_w, out_h, dims.w * kSpatialFactor, dims.h * kSpatialFactor);
  const DecodePlan plan = impl_->video->plan(dims, impl_->device != nullptr);
  if (impl_->device)
    return impl_->device->decode_video(video, dims, plan, frames, out_w, out_h, on_frame, cancelled,
                                       impl_->last_gflop);
  Exec ex = impl_->exec();
  Status s = impl_->video->decode(ex, video, dims, plan, frames, out_w, out_h, on_frame, cancelled);
  impl_->done();
  return s;
}

Status Model::decode_audio(const float* audio, const LatentDims& dims,
                           std::int64_t samples_per_channel, std::vector<float>& pcm_out) {
  if (!impl_->audio) return not_loaded("decoder");
  H3_TRY(check_dims(dims));
  if (!audio || samples_per_channel < 0 ||
      samples_per_channel > std::int64_t{dims.audio_len} * kAudioHop)
    return make_error(errc::runtime::kPermanentInput,
                      "{} samples cannot come from {} audio latent steps", samples_per_channel,
                      dims.audio_len);
  if (impl_->device)
    return impl_->device->decode_audio(audio, dims.audio_len, samples_per_channel, pcm_out,
                                       impl_->last_gflop);
  Exec ex = impl_->exec();
  impl_->audio->decode(ex, audio, dims.audio_len, samples_per_channel, pcm_out);
  impl_->done();
  return Status::Ok();
}

Status Model::save_weights(const std::filesystem::path& path) const {
  if (impl_->parts != kAllParts) return not_loaded("full weights");
  return save_safetensors(path, impl_->weights, impl_->specs,
                          {{"format", "pt"},
                           {"h3pipe.model", "builtin"},
                           {"config", config_to_json(impl_->config).dump()}});
}

Status save_seeded_weights(const ModelConfig& config, const std::filesystem::path& path) {
  const auto specs = param_specs(config);
  return save_safetensors(
      path, seeded_weights(specs, config.seed), specs,
      {{"format", "pt"}, {"h3pipe.model", "builtin"}, {"config", config_to_json(config).dump()}});
}

}  // namespace h3pipe::model
