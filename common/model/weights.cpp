// Parameter list of the builtin model and seeded initialisation.  Names follow PyTorch
// conventions (Linear weight = (out, in), Conv weight = (out, in, k...), ConvTranspose1d weight
// = (in, out, k)) so a file written by a Python tool loads unchanged.
#include "common/model/weights.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/model/kernels.h"

namespace h3pipe::model {

std::int64_t ParamSpec::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

namespace {

class SpecBuilder {
 public:
  std::vector<ParamSpec> specs;

  void uniform(std::string name, std::vector<std::int64_t> shape, float scale) {
    specs.push_back({std::move(name), std::move(shape), ParamSpec::Init::kUniform, scale});
  }
  void ones(std::string name, std::int64_t n) {
    specs.push_back({std::move(name), {n}, ParamSpec::Init::kOnes, 0});
  }
  void zeros(std::string name, std::int64_t n) {
    specs.push_back({std::move(name), {n}, ParamSpec::Init::kZeros, 0});
  }
  // Linear (out, in) with variance gain^2/in, and a small seeded bias.
  void linear(const std::string& name, std::int64_t out, std::int64_t in, float gain = 1.0f) {
    uniform(name + ".weight", {out, in}, gain * std::sqrt(3.0f / static_cast<float>(in)));
    uniform(name + ".bias", {out}, 0.02f);
  }
  void layer_norm(const std::string& name, std::int64_t d) {
    ones(name + ".weight", d);
    zeros(name + ".bias", d);
  }
  void conv(const std::string& name, std::int64_t out, std::vector<std::int64_t> in_and_kernel,
            float gain = 1.0f) {
    std::int64_t fan_in = 1;
    for (auto v : in_and_kernel) fan_in *= v;
    std::vector<std::int64_t> shape{out};
    shape.insert(shape.end(), in_and_kernel.begin(), in_and_kernel.end());
    uniform(name + ".weight", shape, gain * std::sqrt(3.0f / static_cast<float>(fan_in)));
    uniform(name + ".bias", {out}, 0.02f);
  }
  // Transposed 1-D conv: weight (in, out, k); each output sums in*k/stride taps.
  void conv_transpose(const std::string& name, std::int64_t in, std::int64_t out, std::int64_t k,
                      std::int64_t stride) {
    const float fan = static_cast<float>(in * k / stride);
    uniform(name + ".weight", {in, out, k}, std::sqrt(3.0f / fan));
    uniform(name + ".bias", {out}, 0.02f);
  }
  void attention(const std::string& name, std::int64_t d) {
    linear(name + ".qkv", 3 * d, d);
    linear(name + ".proj", d, d);
  }
  void mlp(const std::string& name, std::int64_t d, std::int64_t hidden) {
    linear(name + ".fc1", hidden, d);
    linear(name + ".fc2", d, hidden);
  }
};

}  // namespace

std::vector<ParamSpec> param_specs(const ModelConfig& c) {
  SpecBuilder b;
  const std::int64_t d = c.width, hid = std::int64_t{c.width} * c.mlp_ratio;
  const std::int64_t p = c.patch[1];
  const std::int64_t video_feat = kVideoChannels * p * p;
  const std::int64_t audio_feat = std::int64_t{kAudioChannels} * 2 * c.audio_patch;

  // Text / image encoder.
  b.uniform("text.embed", {260, d}, std::sqrt(3.0f));
  for (int i = 0; i < c.text_layers; ++i) {
    const std::string n = fmt::format("text.blocks.{}", i);
    b.layer_norm(n + ".norm1", d);
    b.attention(n + ".attn", d);
    b.layer_norm(n + ".norm2", d);
    b.mlp(n + ".mlp", d, hid);
  }
  b.layer_norm("text.norm", d);
  b.linear("image.proj", d, 3 * kRefPatch * kRefPatch);

  // DiT.
  b.linear("dit.video_in", d, video_feat);
  b.linear("dit.audio_in", d, audio_feat);
  b.uniform("dit.type_embed", {2, d}, 0.2f);
  b.linear("dit.t_embed.fc1", d, 256);
  b.linear("dit.t_embed.fc2", d, d);
  b.linear("dit.cond_in", d, d);
  for (int i = 0; i < c.depth; ++i) {
    const std::string n = fmt::format("dit.blocks.{}", i);
    b.linear(n + ".ada", 6 * d, d, 0.5f);
    b.attention(n + ".attn", d);
    b.layer_norm(n + ".cross.norm", d);
    b.linear(n + ".cross.q", d, d);
    b.linear(n + ".cross.kv", 2 * d, d);
    b.linear(n + ".cross.proj", d, d);
    b.mlp(n + ".mlp", d, hid);
  }
  b.linear("dit.final.ada", 2 * d, d, 0.5f);
  b.linear("dit.video_out", video_feat, d, 0.5f);
  b.linear("dit.audio_out", audio_feat, d, 0.5f);

  // Video decoder: channels at 1/16, 1/8, 1/4, 1/2, 1/1.
  const auto& vc = c.vae_channels;
  const std::int64_t c0 = vc[0], c1 = vc[1], c2 = vc[2], c3 = vc[3], c4 = vc[4];
  b.conv("vae.conv_in", c0, {kVideoChannels, 3, 3, 3});
  const auto res = [&](const std::string& n, std::int64_t ch) {
    b.ones(n + ".norm1.weight", ch);
    b.conv(n + ".conv1", ch, {ch, 3, 3}, 1.4f);
    b.ones(n + ".norm2.weight", ch);
    b.conv(n + ".conv2", ch, {ch, 3, 3}, 0.5f);
  };
  res("vae.s0.res", c0);
  b.conv("vae.s0.tup", 2 * c0, {c0, 3}, 1.0f);
  b.ones("vae.s0.up_norm.weight", c0);
  b.conv("vae.s0.up", c1, {c0, 3, 3}, 1.4f);
  res("vae.s1.res", c1);
  b.conv("vae.s1.tup", 2 * c1, {c1, 3}, 1.0f);
  b.ones("vae.s1.up_norm.weight", c1);
  b.conv("vae.s1.up", c2, {c1, 3, 3}, 1.4f);
  res("vae.s2.res", c2);
  b.ones("vae.s2.up_norm.weight", c2);
  b.conv("vae.s2.up", c3, {c2, 3, 3}, 1.4f);
  b.ones("vae.s3.norm.weight", c3);
  b.conv("vae.s3.conv", c3, {c3, 3, 3}, 1.4f);
  b.ones("vae.s3.up_norm.weight", c3);
  b.conv("vae.s3.up", c4, {c3, 3, 3}, 1.4f);
  b.ones("vae.out_norm.weight", c4);
  b.conv("vae.conv_out", 3, {c4, 3, 3}, 1.0f);

  // Audio decoder: 64 latent features per step (32 ch x 2 sides) -> stereo PCM, hop 86 = 2 * 43.
  const auto& ac = c.audio_channels;
  b.conv("audio.conv_in", ac[0], {2 * kAudioChannels, 3});
  b.conv("audio.res.conv1", ac[0], {ac[0], 3}, 1.4f);
  b.conv("audio.res.conv2", ac[0], {ac[0], 3}, 0.5f);
  b.conv_transpose("audio.up1", ac[0], ac[1], 4, 2);
  b.conv("audio.conv1", ac[1], {ac[1], 3}, 1.4f);
  b.conv_transpose("audio.up2", ac[1], ac[2], 86, 43);
  b.conv("audio.conv_out", 2, {ac[2], 7}, 0.5f);
  return std::move(b.specs);
}

unsigned part_of(const std::string& name) {
  if (name.starts_with("text.") || name.starts_with("image.")) return kEncoder;
  if (name.starts_with("dit.")) return kSampler;
  return kDecoder;  // vae.*, audio.*
}

const Tensor* Weights::find(const std::string& name) const {
  const auto it = map_.find(name);
  return it == map_.end() ? nullptr : &it->second;
}

const float* Weights::at(const std::string& name) const {
  const Tensor* t = find(name);
  if (!t) {
    // A broken invariant (the model asked for a tensor param_specs never declared): crash loudly.
    std::fprintf(stderr, "h3pipe::model: internal error: no weight named %s\n", name.c_str());
    std::abort();
  }
  return t->data.data();
}

std::int64_t Weights::parameters() const {
  std::int64_t n = 0;
  for (const auto& [_, t] : map_) n += static_cast<std::int64_t>(t.data.size());
  return n;
}

Weights seeded_weights(const std::vector<ParamSpec>& specs, std::uint64_t seed) {
  Weights w;
  for (const auto& s : specs) {
    Tensor t;
    t.shape = s.shape;
    t.data.resize(static_cast<std::size_t>(s.numel()));
    switch (s.init) {
      case ParamSpec::Init::kOnes:
        std::fill(t.data.begin(), t.data.end(), 1.0f);
        break;
      case ParamSpec::Init::kZeros:
        break;
      case ParamSpec::Init::kUniform: {
        const std::uint64_t stream = splitmix64(seed) ^ hash_name(s.name.data(), s.name.size());
        for (std::size_t i = 0; i < t.data.size(); ++i)
          t.data[i] = (2.0f * uniform01(stream, i) - 1.0f) * s.scale;
        break;
      }
    }
    w.put(s.name, std::move(t));
  }
  return w;
}

}  // namespace h3pipe::model
