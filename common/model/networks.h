#pragma once
// The four networks of the builtin model, internal to common/model (model.h is the API).
#include <string>
#include <vector>

#include "common/model/model.h"
#include "common/model/transformer.h"
#include "common/model/weights.h"

namespace h3pipe::model {

class TextEncoder final {
 public:
  TextEncoder(const Weights& ws, const ModelConfig& c);
  Tensor encode(Exec& ex, std::string_view prompt, const media::Image* ref) const;

 private:
  const ModelConfig& c_;
  const float* embed_;
  std::vector<TextBlockW> blocks_;
  const float *norm_g_, *norm_b_;
  LinearW image_proj_;
};

class Dit final {
 public:
  Dit(const Weights& ws, const ModelConfig& c);
  // video/audio: latents (24, T, H, W) and (32, 2, L), overwritten with the sample.
  Status sample(Exec& ex, const Tensor& cond, const LatentDims& dims, std::uint32_t steps,
                std::uint64_t seed, float* video, float* audio, const CancelFn& cancelled) const;
  // Flow-matching time grid t_0 = 1 > ... > t_steps = 0 with the configured shift.
  std::vector<float> schedule(std::uint32_t steps) const;

 private:
  struct Block {
    LinearW ada, qkv, proj, cq, ckv, cproj, fc1, fc2;
    const float *cn_g, *cn_b;
  };
  void block(Exec& ex, const Block& b, const float* mod, const float* kv, int m, float* x,
             int n) const;

  const ModelConfig& c_;
  LinearW video_in_, audio_in_, t1_, t2_, cond_in_, final_ada_, video_out_, audio_out_;
  const float* type_embed_;
  std::vector<Block> blocks_;
};

// Streaming causal video decoder (vae_decoder.cpp).
class VideoDecoder final {
 public:
  VideoDecoder(const Weights& ws, const ModelConfig& c);
  // device: the device backend decodes (its working set has no per-worker im2col bands but
  // fixed device workspaces, and the whole latent resident).
  DecodePlan plan(const LatentDims& dims, bool device = false) const;
  Status decode(Exec& ex, const float* video, const LatentDims& dims, const DecodePlan& plan,
                int frames, int out_w, int out_h, const FrameSink& sink,
                const CancelFn& cancelled) const;

  struct Impl;
  ~VideoDecoder();

 private:
  std::unique_ptr<Impl> impl_;
};

class AudioDecoder final {
 public:
  AudioDecoder(const Weights& ws, const ModelConfig& c);
  void decode(Exec& ex, const float* audio, int len, std::int64_t samples,
              std::vector<float>& pcm) const;

 private:
  const ModelConfig& c_;
  const Weights& ws_;
};

}  // namespace h3pipe::model
