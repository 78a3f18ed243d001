// See gpu_gemm.h: UNVERIFIED cuBLAS bridge, compiled only with H3PIPE_HAVE_CUDA.
#include "common/model/gpu_gemm.h"

#ifdef H3PIPE_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#endif

namespace h3pipe::model {

#ifdef H3PIPE_HAVE_CUDA
namespace {

class CublasGemm final : public GpuGemm {
 public:
  ~CublasGemm() override {
    for (float* p : {a_, w_, c_})
      if (p) cudaFree(p);
    if (handle_) cublasDestroy(handle_);
  }
  bool init() {
    return cudaSetDevice(0) == cudaSuccess && cublasCreate(&handle_) == CUBLAS_STATUS_SUCCESS;
  }

  bool linear(int m, int n, int k, const float* a, int lda, const float* w, int ldw, float* c,
              int ldc, bool accumulate) override {
    // Row-major C = A W^T is column-major C^T (n x m) = W (as k x n col-major, transposed) * A^T.
    if (!reserve(a_, a_cap_, static_cast<std::size_t>(m) * k) ||
        !reserve(w_, w_cap_, static_cast<std::size_t>(n) * k) ||
        !reserve(c_, c_cap_, static_cast<std::size_t>(m) * n))
      return false;
    if (cudaMemcpy2D(a_, sizeof(float) * k, a, sizeof(float) * lda, sizeof(float) * k, m,
                     cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy2D(w_, sizeof(float) * k, w, sizeof(float) * ldw, sizeof(float) * k, n,
                     cudaMemcpyHostToDevice) != cudaSuccess)
      return false;
    if (accumulate && cudaMemcpy2D(c_, sizeof(float) * n, c, sizeof(float) * ldc, sizeof(float) * n,
                                   m, cudaMemcpyHostToDevice) != cudaSuccess)
      return false;
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    if (cublasSgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w_, k, a_, k, &beta, c_, n) !=
        CUBLAS_STATUS_SUCCESS)
      return false;
    return cudaMemcpy2D(c, sizeof(float) * ldc, c_, sizeof(float) * n, sizeof(float) * n, m,
                        cudaMemcpyDeviceToHost) == cudaSuccess;
  }
  const char* device() const override { return "cuda:0"; }

 private:
  static bool reserve(float*& p, std::size_t& cap, std::size_t n) {
    if (n <= cap) return true;
    if (p) cudaFree(p);
    p = nullptr;
    cap = 0;
    if (cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)) != cudaSuccess) return false;
    cap = n;
    return true;
  }

  cublasHandle_t handle_ = nullptr;
  float *a_ = nullptr, *w_ = nullptr, *c_ = nullptr;
  std::size_t a_cap_ = 0, w_cap_ = 0, c_cap_ = 0;
};

}  // namespace

std::unique_ptr<GpuGemm> GpuGemm::create() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) return nullptr;
  auto g = std::make_unique<CublasGemm>();
  if (!g->init()) return nullptr;
  return g;
}
#else
std::unique_ptr<GpuGemm> GpuGemm::create() {
  return nullptr;
}
#endif

}  // namespace h3pipe::model
