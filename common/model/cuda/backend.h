#pragma once
// The builtin model's device backend (docs/model.md "Device backend").  A Model loaded with
// "device": "cuda" / "cuda:N" keeps the text encoder on the CPU and runs the DiT sampler, the
// video decoder and the audio decoder through this interface; the CPU path never sees it.
//
// The CUDA implementation (H3PIPE_HAVE_CUDA, common/model/cuda/*.cpp + ops.cu) uploads the
// weights once at load (bf16 copies of the matrices for cuBLASLt, fp32 copies of biases, norms
// and small tensors), keeps every activation of a call in device memory, and mirrors the CPU
// code's operation order so that the CPU/GPU parity test (tests/model/model_gpu_test.cpp)
// measures bf16 rounding only.  UNRUN: this code has been compiled and linked against the CUDA 13
// toolkit but has never executed on a GPU (scripts/gpu_check.sh is the prepared first run).
//
// Threading: one caller at a time (the Model's rule).  Errors are returned, never thrown; a CUDA
// or cuBLAS failure is a "runtime.gpu" error naming the call.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/core/result.h"
#include "common/model/model.h"

namespace h3pipe::model {

class Weights;

// Parsed "device" setting: "cpu" (ordinal -1), "cuda" (ordinal -1: the pool's first GPU, else 0)
// or "cuda:N".
struct DeviceSpec {
  bool cuda = false;
  int ordinal = -1;
};
// Error "config.invalid" (without a path: the caller prefixes it) on anything else.
Result<DeviceSpec> parse_device(const std::string& s);

struct DeviceStats {
  std::uint64_t weight_bytes = 0;  // resident weights
  std::uint64_t peak_bytes = 0;    // peak of this backend's own device allocations
  std::uint64_t live_bytes = 0;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual std::string device() const = 0;  // "cuda:0"
  // Same contracts as the Model methods (model.h); gflop receives the call's GEMM work.
  virtual Status sample(const Tensor& cond, const LatentDims& dims, std::uint32_t steps,
                        std::uint64_t seed, float* video, float* audio, const CancelFn& cancelled,
                        double& gflop) = 0;
  virtual Status decode_video(const float* video, const LatentDims& dims, const DecodePlan& plan,
                              int frames, int out_w, int out_h, const FrameSink& sink,
                              const CancelFn& cancelled, double& gflop) = 0;
  virtual Status decode_audio(const float* audio, int len, std::int64_t samples,
                              std::vector<float>& pcm, double& gflop) = 0;
  virtual DeviceStats stats() const = 0;
};

// The backend for `ordinal` over the kept parts of `ws` (which must outlive it only during this
// call: everything is copied to the device).  Errors: "runtime.permanent.config" when the build
// has no CUDA or no GPU is visible / the ordinal does not exist; "runtime.gpu" on a CUDA error.
Result<std::unique_ptr<DeviceBackend>> make_cuda_backend(const Weights& ws, const ModelConfig& c,
                                                         unsigned parts, int ordinal);

// Measured dense bf16 GEMM rate (TFLOP/s, fp32 accumulation, cuBLASLt) on `ordinal`: best of
// `reps` n x n x n products after one warm-up.  For the benchmark's MFU.
Result<double> cuda_gemm_peak_tflops(int ordinal, int n, int reps);

// Number of CUDA devices this process sees (0 without CUDA or without a driver).
int cuda_device_count();

}  // namespace h3pipe::model
