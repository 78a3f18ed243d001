// The CUDA device backend (backend.h): weights resident from load, the DiT sampler and both
// decoders on the device.  Compiled only with H3PIPE_HAVE_CUDA.  UNRUN on a GPU.
#include <fmt/format.h>

#include <chrono>

#include "common/model/cuda/networks.h"
#include "common/model/weights.h"

namespace h3pipe::model {

namespace {

using cuda::CudaFailure;

Error gpu_error(const std::string& dev, const CudaFailure& f) {
  return make_error(errc::runtime::kGpu, "{}: {}", dev, f.what);
}

class CudaBackend final : public DeviceBackend {
 public:
  CudaBackend(const Weights& ws, const ModelConfig& c, unsigned parts, int ordinal)
      : config_(c), ctx_(ordinal, c.deterministic), name_(fmt::format("cuda:{}", ordinal)) {
    // Only the networks that run here go up: the text encoder stays on the CPU.
    for (const auto& [name, t] : ws.all()) {
      const unsigned part = part_of(name);
      if (!(part & parts) || part == kEncoder) continue;
      const bool matrix = t.shape.size() >= 2;
      // fp32 as well: small tensors, and the RGB head (few output channels: direct fp32 conv).
      const bool small =
          t.data.size() <= (std::size_t{1} << 16) || (t.shape.size() == 4 && t.shape[0] <= 4);
      ctx_.upload(name, t, !matrix || small, matrix);
    }
    if (parts & kSampler) dit_ = std::make_unique<cuda::DitGpu>(ctx_, config_);
    if (parts & kDecoder) {
      video_ = std::make_unique<cuda::VideoDecoderGpu>(ctx_, ws, config_);
      audio_ = std::make_unique<cuda::AudioDecoderGpu>(ctx_, config_);
    }
    ctx_.sync();
  }

  std::string device() const override { return name_; }

  Status sample(const Tensor& cond, const LatentDims& dims, std::uint32_t steps, std::uint64_t seed,
                float* video, float* audio, const CancelFn& cancelled, double& gflop) override {
    try {
      ctx_.activate();
      ctx_.flops = 0;
      Status s = dit_->sample(cond, dims, steps, seed, video, audio, cancelled);
      ctx_.sync();
      gflop = ctx_.flops / 1e9;
      return s;
    } catch (const CudaFailure& f) {
      return gpu_error(name_, f);
    }
  }

  Status decode_video(const float* video, const LatentDims& dims, const DecodePlan& plan,
                      int frames, int out_w, int out_h, const FrameSink& sink,
                      const CancelFn& cancelled, double& gflop) override {
    try {
      ctx_.activate();
      ctx_.flops = 0;
      Status s = video_->decode(video, dims, plan, frames, out_w, out_h, sink, cancelled);
      ctx_.sync();
      gflop = ctx_.flops / 1e9;
      return s;
    } catch (const CudaFailure& f) {
      return gpu_error(name_, f);
    }
  }

  Status decode_audio(const float* audio, int len, std::int64_t samples, std::vector<float>& pcm,
                      double& gflop) override {
    try {
      ctx_.activate();
      ctx_.flops = 0;
      audio_->decode(audio, len, samples, pcm);
      gflop = ctx_.flops / 1e9;
      return Status::Ok();
    } catch (const CudaFailure& f) {
      return gpu_error(name_, f);
    }
  }

  DeviceStats stats() const override {
    return {ctx_.weight_bytes(), ctx_.mem().peak, ctx_.mem().live};
  }

 private:
  ModelConfig config_;
  cuda::Ctx ctx_;
  std::string name_;
  std::unique_ptr<cuda::DitGpu> dit_;
  std::unique_ptr<cuda::VideoDecoderGpu> video_;
  std::unique_ptr<cuda::AudioDecoderGpu> audio_;
};

}  // namespace

bool cuda_built() {
  return true;
}

int cuda_device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

Result<std::unique_ptr<DeviceBackend>> make_cuda_backend(const Weights& ws, const ModelConfig& c,
                                                         unsigned parts, int ordinal) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1)
    return make_error(
        errc::runtime::kPermanentConfig,
        "device \"{}\": no CUDA device is visible to this process ({}; "
        "CUDA_VISIBLE_DEVICES={}, NVIDIA_VISIBLE_DEVICES={})",
        c.device, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices",
        std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "unset",
        std::getenv("NVIDIA_VISIBLE_DEVICES") ? std::getenv("NVIDIA_VISIBLE_DEVICES") : "unset");
  if (ordinal < 0 || ordinal >= n)
    return make_error(errc::runtime::kPermanentConfig,
                      "device \"{}\": CUDA device {} does not exist here ({} visible: 0..{})",
                      c.device, ordinal, n, n - 1);
  try {
    return std::unique_ptr<DeviceBackend>(std::make_unique<CudaBackend>(ws, c, parts, ordinal));
  } catch (const CudaFailure& f) {
    return gpu_error(fmt::format("cuda:{}", ordinal), f);
  }
}

Result<double> cuda_gemm_peak_tflops(int ordinal, int n, int reps) {
  try {
    cuda::Ctx ctx(ordinal, false);
    auto a = ctx.buf<cuda::bf16>(), b = ctx.buf<cuda::bf16>();
    auto c = ctx.buf<float>(), f = ctx.buf<float>();
    const std::size_t nn = static_cast<std::size_t>(n) * n;
    // Operands: a smooth non-constant pattern (power and clocks depend a little on the data).
    std::vector<float> h(nn);
    for (std::size_t i = 0; i < nn; ++i)
      h[i] = static_cast<float>(static_cast<int>(i % 251) - 125) / 256.0f;
    float* fd = f.get(nn);
    ctx.to_device(fd, h.data(), nn);
    cuda::to_bf16(ctx.stream(), fd, a.get(nn), nn);
    cuda::to_bf16(ctx.stream(), fd, b.get(nn), nn);
    c.get(nn);
    f.release();
    cudaEvent_t e0, e1;
    H3_CUDA(cudaEventCreate(&e0));
    H3_CUDA(cudaEventCreate(&e1));
    double best = 0;
    constexpr int kInner = 10;
    for (int r = 0; r < reps + 1; ++r) {
      H3_CUDA(cudaEventRecord(e0, ctx.stream()));
      for (int i = 0; i < kInner; ++i)
        ctx.gemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
      H3_CUDA(cudaEventRecord(e1, ctx.stream()));
      H3_CUDA(cudaEventSynchronize(e1));
      float ms = 0;
      H3_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      if (r == 0) continue;  // warm-up (heuristic, clocks)
      best = std::max(best, kInner * 2.0 * n * n * static_cast<double>(n) / (ms * 1e-3) / 1e12);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return best;
  } catch (const CudaFailure& f) {
    return gpu_error(fmt::format("cuda:{}", ordinal), f);
  }
}

}  // namespace h3pipe::model
