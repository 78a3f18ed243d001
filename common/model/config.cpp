// The builtin model's settings, declared once (issue #26): a field table read by the cluster
// config's machinery (common/core/field_table.h; docs/design.md, convention 6: field path in every
// message, all problems reported together, unknown keys are errors), in the model's own wording
// ("expected an integer in [1, 256]", Wording::kExpected).  docs/config.md prints the table.
#include <fmt/ranges.h>

#include <algorithm>

#include "common/core/field_table.h"
#include "common/model/cuda/backend.h"
#include "common/model/model.h"
#include "common/model/precision.h"
#include "common/model/settings_table.h"

// The tables name only the options they set ({.imin = 0, .imax = 65535}); every other member of
// Opts has its default.  GCC 12 still warns about the ones left out (GCC PR 96868).
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace h3pipe::model {

namespace {

using config::Field;
using config::field;
using config::Opts;

std::string device_error(const std::string& d) {
  auto dev = parse_device(d);
  return dev ? std::string() : dev.error().message;
}

std::string precision_error(const std::string& p) {
  return known_precision(p) ? std::string()
                            : fmt::format("\"{}\" is not one of {}", p, kPrecisionNames);
}

Field<ModelConfig> patch_field() {
  auto f = config::custom<ModelConfig>(
      config::detail::info(
          "patch", config::FieldType::kIntegers, "(t, h, w) patch of the video latent",
          {.imin = 1, .imax = 4, .count = 3, .rule = "[1, p, p] with p in {1, 2, 4}"}),
      [](config::ObjectReader& r, const config::FieldInfo& fi, ModelConfig& c,
         const config::ReadContext& ctx) {
        std::vector<int> patch;
        if (!config::detail::read_value(r, fi, ctx, patch)) return true;
        if (patch[0] != 1 || patch[1] != patch[2] ||
            (patch[1] != 1 && patch[1] != 2 && patch[1] != 4))
          ctx.errors.add(r.path(fi.key), "expected [1, p, p] with p in {1, 2, 4}");
        else
          std::copy(patch.begin(), patch.end(), c.patch.begin());
        return true;
      },
      [](const ModelConfig& c) { return nlohmann::json(c.patch); });
  return f;
}

}  // namespace

const config::Table<ModelConfig>& settings_table() {
  using M = ModelConfig;
  static const config::Table<M> t{
      "runtime/settings (builtin)",
      "`settings` of the builtin runtime (docs/model.md): the model's size, threads, weights.",
      {field("width", &M::width, "d_model of the text encoder and the DiT",
             {.imin = 16, .imax = 8192}),
       field("depth", &M::depth, "DiT blocks", {.imin = 1, .imax = 256}),
       field("heads", &M::heads, "attention heads (width / heads = head dim)",
             {.imin = 1, .imax = 128, .rule = "divides width"}),
       field("mlp_ratio", &M::mlp_ratio, "MLP width / width", {.imin = 1, .imax = 16}),
       field("text_layers", &M::text_layers, "text encoder layers", {.imin = 0, .imax = 64}),
       field("cond_tokens", &M::cond_tokens,
             "prompt bytes are truncated/padded to this many tokens", {.imin = 1, .imax = 4096}),
       patch_field(),
       field("audio_patch", &M::audio_patch, "audio latent steps per token",
             {.imin = 1, .imax = 64}),
       field("vae_channels", &M::vae_channels,
             "decoder channels at 1/16, 1/8, 1/4, 1/2 and full resolution",
             {.imin = 1, .imax = 2048, .count = 5}),
       field("audio_channels", &M::audio_channels,
             "audio decoder channels at latent rate, 2x and 86x",
             {.imin = 1, .imax = 2048, .count = 3}),
       field("threads", &M::threads, "worker threads", {.imin = 1, .imax = 256}),
       field("segment_frames", &M::segment_frames,
             "latent frames per decode segment; 0: largest under the budget",
             {.imin = 0, .imax = 1 << 20}),
       field("overlap", &M::overlap, "spatial tiles: latent pixels of context decoded on each side",
             {.imin = 0, .imax = 64}),
       field("memory_budget_mb", &M::memory_budget_mb, "decoder working-set budget",
             {.imin = 16, .imax = 1 << 22}),
       field("seed", &M::seed, "seed of the seeded (\"dummy\") weights", {.imin = 0}),
       field("weights_file", &M::weights_file, "safetensors file; empty: seeded weights"),
       field("flow_shift", &M::flow_shift, "timestep shift of the flow-matching schedule",
             {.dmin = 0.01, .dmax = 100.0}),
       field("device", &M::device, "cpu, cuda (the pool's first GPU) or cuda:N",
             {.rule = "a device"}, std::function<std::string(const std::string&)>(&device_error)),
       field("deterministic", &M::deterministic,
             "device GEMMs without split-K atomics: same bytes each call"),
       field("decoder_precision", &M::decoder_precision,
             "decoder weights rounded at load: f32, bf16, fp16 or int8",
             {.rule = "a known precision"},
             std::function<std::string(const std::string&)>(&precision_error))},
      [](config::ObjectReader& r, M& c, const config::ReadContext& ctx) {
        if (c.width % c.heads != 0)
          ctx.errors.add(r.path("heads"),
                         fmt::format("width {} is not a multiple of heads {}", c.width, c.heads));
      },
      {"width is a multiple of heads"}};
  return t;
}

Result<ModelConfig> parse_config(const nlohmann::json& settings, std::string_view path_prefix,
                                 std::span<const std::string_view> extra_keys) {
  ModelConfig c;
  if (settings.is_null()) return c;
  if (!settings.is_object())
    return make_error(errc::config::kInvalid, "{}: expected an object of builtin model settings",
                      path_prefix.empty() ? "/" : path_prefix);
  config::Errors errors;
  {
    config::ObjectReader r(settings, std::string(path_prefix), errors);
    for (const auto& k : extra_keys) r.raw(std::string(k));  // the runtime adapter's own keys
    const config::ReadContext ctx{errors, {}, config::Wording::kExpected};
    const auto& t = settings_table();
    for (const auto& f : t.fields) f.read(r, f.info, c, ctx);
    t.check(r, c, ctx);
  }  // unknown keys reported here
  if (!errors.empty()) {
    std::string msg = "invalid builtin model settings:";
    for (const auto& e : errors.list()) msg += "\n  " + e;
    return make_error(errc::config::kInvalid, "{}", msg);
  }
  return c;
}

nlohmann::json config_to_json(const ModelConfig& c) {
  return nlohmann::json{{"width", c.width},
                        {"depth", c.depth},
                        {"heads", c.heads},
                        {"mlp_ratio", c.mlp_ratio},
                        {"text_layers", c.text_layers},
                        {"cond_tokens", c.cond_tokens},
                        {"patch", c.patch},
                        {"audio_patch", c.audio_patch},
                        {"vae_channels", c.vae_channels},
                        {"audio_channels", c.audio_channels},
                        {"threads", c.threads},
                        {"segment_frames", c.segment_frames},
                        {"overlap", c.overlap},
                        {"memory_budget_mb", c.memory_budget_mb},
                        {"seed", c.seed},
                        {"weights_file", c.weights_file},
                        {"flow_shift", c.flow_shift},
                        {"device", c.device},
                        {"deterministic", c.deterministic},
                        {"decoder_precision", c.decoder_precision}};
}

LatentDims latent_dims(int width, int height, int frames, int fps) {
  LatentDims d;
  d.t = frames >= 1 ? (frames - 1) / kTemporalFactor + 1 : 0;
  d.h = height / kSpatialFactor;  // same rule as latent::Geometry::for_job (spec: multiples of 16)
  d.w = width / kSpatialFactor;
  if (fps > 0 && frames > 0) {
    const std::int64_t num = std::int64_t{frames} * kSampleRate;
    const std::int64_t den = std::int64_t{fps} * kAudioHop;
    d.audio_len = static_cast<int>((num + den - 1) / den);
  }
  return d;
}

std::int64_t audio_samples(int frames, int fps) {
  return fps > 0 ? std::int64_t{frames} * kSampleRate / fps : 0;
}

}  // namespace h3pipe::model
