#pragma once
// CUDA plumbing of the device backend (host code, compiled by the C++ compiler against the CUDA
// runtime and cuBLASLt headers): error checks, device buffers with a peak-memory count, the
// resident weights, and the cuBLASLt GEMM.  UNRUN on a GPU (backend.h).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/core/result.h"
#include "common/model/cuda/backend.h"
#include "common/model/cuda/ops.h"

namespace h3pipe::model::cuda {

// Thrown inside the backend only, turned into a "runtime.gpu" Error at the backend's API.
struct CudaFailure {
  std::string what;
};
void check(cudaError_t e, const char* call);
void check(cublasStatus_t s, const char* call);
#define H3_CUDA(call) ::h3pipe::model::cuda::check((call), #call)

// Process-wide (per backend) accounting of device allocations.
struct MemCount {
  std::uint64_t live = 0, peak = 0;
  void add(std::uint64_t n) {
    live += n;
    if (live > peak) peak = live;
  }
  void sub(std::uint64_t n) { live -= n; }
};

// A grow-only device buffer of T.
template <typename T>
class Buf {
 public:
  Buf() = default;
  explicit Buf(MemCount* mc) : mc_(mc) {}
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  Buf(Buf&& o) noexcept : p_(o.p_), cap_(o.cap_), mc_(o.mc_) { o.p_ = nullptr, o.cap_ = 0; }
  Buf& operator=(Buf&& o) noexcept {
    if (this != &o) {
      release();
      p_ = o.p_, cap_ = o.cap_, mc_ = o.mc_;
      o.p_ = nullptr, o.cap_ = 0;
    }
    return *this;
  }
  ~Buf() { release(); }
  T* get(std::size_t n) {
    if (n > cap_) {
      release();
      void* p = nullptr;
      H3_CUDA(cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(T)));
      p_ = static_cast<T*>(p);
      cap_ = n;
      if (mc_) mc_->add(cap_ * sizeof(T));
    }
    return p_;
  }
  T* data() const { return p_; }
  std::size_t size() const { return cap_; }
  void release() {
    if (p_) {
      cudaFree(p_);
      if (mc_) mc_->sub(cap_ * sizeof(T));
    }
    p_ = nullptr;
    cap_ = 0;
  }

 private:
  T* p_ = nullptr;
  std::size_t cap_ = 0;
  MemCount* mc_ = nullptr;
};

// One resident tensor: fp32 (biases, norms, small tensors, the RGB head) and/or bf16 (matrices).
struct DTensor {
  const float* f32 = nullptr;
  const bf16* b16 = nullptr;
  std::vector<std::int64_t> shape;
};

// The device context: stream, cuBLASLt handle and workspace, the weights, allocation counts.
class Ctx {
 public:
  Ctx(int ordinal, bool deterministic);
  ~Ctx();
  Ctx(const Ctx&) = delete;
  Ctx& operator=(const Ctx&) = delete;

  int ordinal() const { return ordinal_; }
  cudaStream_t stream() const { return stream_; }
  MemCount& mem() { return mem_; }
  const MemCount& mem() const { return mem_; }
  std::uint64_t weight_bytes() const { return weight_bytes_; }
  double flops = 0;  // GEMM work of the current call (2*M*N*K)

  // Uploads one host tensor: fp32 copy when `f32`, bf16 copy when `b16`.
  void upload(const std::string& name, const Tensor& t, bool f32, bool b16);
  const DTensor& at(const std::string& name) const;  // CudaFailure on an unknown name

  // Row-major C (m x n, ldc) = alpha * op(A) op(B) + beta * C, the CPU sgemm's signature
  // (kernels.h) with bf16 operands, fp32 accumulation and fp32 C.  batch > 1: strided batches
  // (element strides sa, sb, sc).
  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const bf16* a, int lda,
            const bf16* b, int ldb, float beta, float* c, int ldc, int batch = 1, long long sa = 0,
            long long sb = 0, long long sc = 0);

  void sync() { H3_CUDA(cudaStreamSynchronize(stream_)); }
  // The current device is per host thread: every API call of the backend starts with this (a
  // runtime may load on one thread and run on another).
  void activate() { H3_CUDA(cudaSetDevice(ordinal_)); }
  template <typename T>
  void to_device(T* dst, const T* src, std::size_t n) {
    H3_CUDA(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyHostToDevice, stream_));
  }
  template <typename T>
  void to_host(T* dst, const T* src, std::size_t n) {
    H3_CUDA(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost, stream_));
    sync();
  }
  template <typename T>
  void copy(T* dst, const T* src, std::size_t n) {
    H3_CUDA(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, stream_));
  }
  template <typename T>
  void zero(T* dst, std::size_t n) {
    H3_CUDA(cudaMemsetAsync(dst, 0, n * sizeof(T), stream_));
  }
  template <typename T>
  Buf<T> buf() {
    return Buf<T>(&mem_);
  }

 private:
  struct Plan;
  using Key = std::tuple<bool, bool, int, int, int, int, int, int, int, long long, long long,
                         long long, unsigned, bool>;
  Plan& plan(const Key& k);

  int ordinal_;
  bool deterministic_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  MemCount mem_;
  std::uint64_t weight_bytes_ = 0;
  std::map<std::string, DTensor> weights_;
  std::vector<void*> owned_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace h3pipe::model::cuda
