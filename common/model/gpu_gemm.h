#pragma once
// Optional cuBLAS path for the model's linear layers (H3PIPE_CUDA=ON with the CUDA toolkit).
// UNVERIFIED: written against the cuBLAS v2 API but never compiled or run in this repository's
// development environment (no CUDA toolkit, no GPU).  Without H3PIPE_HAVE_CUDA, create() returns
// nullptr and the model stays on OpenBLAS.
//
// Each call copies its operands to the device, runs one SGEMM and copies the result back: a
// correctness-first bridge, not a resident-GPU model (attention and convolutions stay on CPU).
#include <memory>

namespace h3pipe::model {

class GpuGemm {
 public:
  virtual ~GpuGemm() = default;
  // C (m x n, ldc) = A (m x k, lda) * W^T (W: n x k, ldw) [+ C when accumulate]; row-major.
  // Returns false on any CUDA error (the caller then computes on the CPU).
  virtual bool linear(int m, int n, int k, const float* a, int lda, const float* w, int ldw,
                      float* c, int ldc, bool accumulate) = 0;
  virtual const char* device() const = 0;  // "cuda:0"

  // nullptr when not built with CUDA or no device is present.
  static std::unique_ptr<GpuGemm> create();
};

}  // namespace h3pipe::model
