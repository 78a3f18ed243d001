// Strict parsing of the builtin model's settings (CONVENTIONS rule 6: field path in every
// message, all problems reported together, unknown keys are errors).
#include <algorithm>

#include <fmt/ranges.h>

#include "common/model/cuda/backend.h"
#include "common/model/model.h"
#include "common/model/precision.h"

namespace h3pipe::model {

namespace {

class Parser {
 public:
  Parser(const nlohmann::json& j, std::string_view prefix) : j_(j), prefix_(prefix) {}

  std::string path(std::string_view key) const { return fmt::format("{}/{}", prefix_, key); }
  void fail(std::string_view key, std::string_view what) {
    errors_.push_back(fmt::format("{}: {}", path(key), what));
  }

  void integer(std::string_view key, int& out, long lo, long hi) {
    const auto it = j_.find(std::string(key));
    if (it == j_.end()) return;
    if (!it->is_number_integer() || it->get<long>() < lo || it->get<long>() > hi) {
      fail(key, fmt::format("expected an integer in [{}, {}]", lo, hi));
      return;
    }
    out = static_cast<int>(it->get<long>());
  }
  void u64(std::string_view key, std::uint64_t& out) {
    const auto it = j_.find(std::string(key));
    if (it == j_.end()) return;
    if (it->is_number_unsigned()) {
      out = it->get<std::uint64_t>();
    } else if (it->is_number_integer() && it->get<long long>() >= 0) {
      out = static_cast<std::uint64_t>(it->get<long long>());
    } else {
      fail(key, "expected a non-negative integer");
    }
  }
  void number(std::string_view key, double& out, double lo, double hi) {
    const auto it = j_.find(std::string(key));
    if (it == j_.end()) return;
    if (!it->is_number() || it->get<double>() < lo || it->get<double>() > hi) {
      fail(key, fmt::format("expected a number in [{}, {}]", lo, hi));
      return;
    }
    out = it->get<double>();
  }
  void string(std::string_view key, std::string& out) {
    const auto it = j_.find(std::string(key));
    if (it == j_.end()) return;
    if (!it->is_string()) {
      fail(key, "expected a string");
      return;
    }
    out = it->get<std::string>();
  }
  void boolean(std::string_view key, bool& out) {
    const auto it = j_.find(std::string(key));
    if (it == j_.end()) return;
    if (!it->is_boolean()) {
      fail(key, "expected true or false");
      return;
    }
    out = it->get<bool>();
  }
  void int_list(std::string_view key, std::vector<int>& out, std::size_t count, int lo, int hi) {
    const auto it = j_.find(std::string(key));
    if (it == j_.end()) return;
    const auto bad = [&] {
      fail(key, fmt::format("expected an array of {} integers in [{}, {}]", count, lo, hi));
    };
    if (!it->is_array() || it->size() != count) return bad();
    std::vector<int> v;
    for (const auto& e : *it) {
      if (!e.is_number_integer() || e.get<long>() < lo || e.get<long>() > hi) return bad();
      v.push_back(static_cast<int>(e.get<long>()));
    }
    out = std::move(v);
  }

  std::vector<std::string> errors_;

 private:
  const nlohmann::json& j_;
  std::string_view prefix_;
};

const std::vector<std::string_view> kKeys = {
    "width",        "depth",          "heads",       "mlp_ratio",        "text_layers",
    "cond_tokens",  "patch",          "audio_patch", "vae_channels",     "audio_channels",
    "threads",      "segment_frames", "overlap",     "memory_budget_mb", "seed",
    "weights_file", "flow_shift",     "device",      "deterministic", "decoder_precision"};

}  // namespace

Result<ModelConfig> parse_config(const nlohmann::json& settings, std::string_view path_prefix,
                                 std::span<const std::string_view> extra_keys) {
  ModelConfig c;
  if (settings.is_null()) return c;
  if (!settings.is_object())
    return make_error(errc::config::kInvalid, "{}: expected an object of builtin model settings",
                      path_prefix.empty() ? "/" : path_prefix);
  Parser p(settings, path_prefix);
  std::vector<std::string_view> all(kKeys.begin(), kKeys.end());
  all.insert(all.end(), extra_keys.begin(), extra_keys.end());
  std::sort(all.begin(), all.end());
  for (const auto& [key, value] : settings.items()) {
    if (std::find(all.begin(), all.end(), key) == all.end())
      p.fail(key, fmt::format("unknown key; known: {}", fmt::join(all, ", ")));
  }
  p.integer("width", c.width, 16, 8192);
  p.integer("depth", c.depth, 1, 256);
  p.integer("heads", c.heads, 1, 128);
  p.integer("mlp_ratio", c.mlp_ratio, 1, 16);
  p.integer("text_layers", c.text_layers, 0, 64);
  p.integer("cond_tokens", c.cond_tokens, 1, 4096);
  std::vector<int> patch(c.patch.begin(), c.patch.end());
  p.int_list("patch", patch, 3, 1, 4);
  if (patch.size() == 3) {
    if (patch[0] != 1 || patch[1] != patch[2] || (patch[1] != 1 && patch[1] != 2 && patch[1] != 4))
      p.fail("patch", "expected [1, p, p] with p in {1, 2, 4}");
    else
      std::copy(patch.begin(), patch.end(), c.patch.begin());
  }
  p.integer("audio_patch", c.audio_patch, 1, 64);
  p.int_list("vae_channels", c.vae_channels, 5, 1, 2048);
  p.int_list("audio_channels", c.audio_channels, 3, 1, 2048);
  p.integer("threads", c.threads, 1, 256);
  p.integer("segment_frames", c.segment_frames, 0, 1 << 20);
  p.integer("overlap", c.overlap, 0, 64);
  p.integer("memory_budget_mb", c.memory_budget_mb, 16, 1 << 22);
  p.u64("seed", c.seed);
  p.string("weights_file", c.weights_file);
  p.number("flow_shift", c.flow_shift, 0.01, 100.0);
  p.string("device", c.device);
  if (auto dev = parse_device(c.device); !dev) p.fail("device", dev.error().message);
  p.boolean("deterministic", c.deterministic);
  p.string("decoder_precision", c.decoder_precision);
  if (!known_precision(c.decoder_precision))
    p.fail("decoder_precision", fmt::format("\"{}\" is not one of {}", c.decoder_precision, kPrecisionNames));
  if (c.width % c.heads != 0)
    p.fail("heads", fmt::format("width {} is not a multiple of heads {}", c.width, c.heads));
  if (!p.errors_.empty()) {
    std::string msg = "invalid builtin model settings:";
    for (const auto& e : p.errors_) msg += "\n  " + e;
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
