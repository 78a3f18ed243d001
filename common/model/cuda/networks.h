#pragma once
// The device mirrors of the sampler and the decoders (dit.cpp, decoders.cpp), internal to the
// CUDA backend.  Each keeps the CPU network's structure and operation order (networks.h of
// common/model); weights are the Ctx's resident tensors, looked up by the CPU names.
// UNRUN on a GPU (backend.h).
#include <deque>

#include "common/model/cuda/device.h"

namespace h3pipe::model::cuda {

struct DLinear {
  const bf16* w = nullptr;
  const float* b = nullptr;
  int out = 0, in = 0;
};
DLinear linear(const Ctx& ctx, const std::string& name);

struct DConv {
  const bf16* w = nullptr;     // (out, in, k...) as on the CPU
  const float* w32 = nullptr;  // fp32 copy (the RGB head's direct conv)
  const float* b = nullptr;
  const bf16* phases = nullptr;  // sub-pixel kernels of a 2x-upsampling conv (4, out, in, 2, 2)
  int out = 0, in = 0;
};

class DitGpu final {
 public:
  DitGpu(Ctx& ctx, const ModelConfig& c);
  Status sample(const Tensor& cond, const LatentDims& dims, std::uint32_t steps, std::uint64_t seed,
                float* video, float* audio, const CancelFn& cancelled);

 private:
  struct Block {
    DLinear ada, qkv, proj, cq, ckv, cproj, fc1, fc2;
    const float *cn_g, *cn_b;
  };
  // y (rows x out) = x W^T + b, or += with accumulate.
  void apply(const DLinear& l, const bf16* x, int rows, float* y, bool accumulate = false);
  void attention(const bf16* q, int ldq, const bf16* k, int ldk, const bf16* v, int ldv, int nq,
                 int nkv, float* out, int ldo);
  void block(const Block& b, const float* mod, const bf16* kv, int m, float* x, int n);

  Ctx& ctx_;
  const ModelConfig& c_;
  DLinear video_in_, audio_in_, t1_, t2_, cond_in_, final_ada_, video_out_, audio_out_;
  const float* type_embed_;
  std::vector<Block> blocks_;
  Buf<float> x_, big_, att_, o_, mods_, fmod_, c1_, pos_, video_, audio_, vout_, aout_, s_;
  Buf<bf16> hb_, qkvb_, attb_, ffb_, kvb_, tinb_, cb_, p_;
};

class VideoDecoderGpu final {
 public:
  VideoDecoderGpu(Ctx& ctx, const Weights& ws, const ModelConfig& c);
  Status decode(const float* video, const LatentDims& dims, const DecodePlan& plan, int frames,
                int out_w, int out_h, const FrameSink& sink, const CancelFn& cancelled);

 private:
  void conv3x3(const DConv& cw, const float* in, int frames, int h, int w, bool upsample,
               float* out, bool accumulate);
  void conv_causal(const DConv& cw, const std::vector<const float*>& taps, int frames, int h, int w,
                   float* out);
  void time_conv(const DConv& cw, const std::vector<const float*>& taps, int frames, std::size_t px,
                 float* out);
  void res_block(float* x, int frames, int ch, int h, int w, const float* ga, const DConv& ca,
                 const float* gb, const DConv& cb);
  void decode_output_frame(float* in1, int h1, int w1, float* xf, float* a, float* b);

  Ctx& ctx_;
  const ModelConfig& c_;
  int c0_, c1_, c2_, c3_, c4_;
  DConv conv_in_, r0a_, r0b_, tup0_, up0_, r1a_, r1b_, tup1_, up1_, r2a_, r2b_, up2_, s3_, up3_,
      out_;
  const float *g0a_, *g0b_, *gu0_, *g1a_, *g1b_, *gu1_, *g2a_, *g2b_, *gu2_, *g3_, *gu3_, *gout_;
  Buf<bf16> col_;
  Buf<float> tmp_, t1_, t2_;
};

class AudioDecoderGpu final {
 public:
  AudioDecoderGpu(Ctx& ctx, const ModelConfig& c);
  void decode(const float* audio, int len, std::int64_t samples, std::vector<float>& pcm);

 private:
  void conv1d(const DConv& cw, int k, const float* in, int n, float* out, bool accumulate);
  void conv_transpose1d(const DConv& cw, int k, int stride, int pad, const float* in, int n,
                        float* out);
  DConv conv(const std::string& name, int out, int in) const;

  Ctx& ctx_;
  const ModelConfig& c_;
  Buf<bf16> col_;
  Buf<float> z_;
};

// Device im2col workspace cap (elements of bf16): bounds every conv band like kColBytes does on
// the CPU, and enters the device decode plan's working-set estimate.
inline constexpr std::size_t kDeviceColElems = std::size_t{32} << 20;  // 64 MiB

}  // namespace h3pipe::model::cuda
