// CUDA plumbing of the device backend (device.h).  UNRUN on a GPU (backend.h).
#include "common/model/cuda/device.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/model/cuda/gemm_layout.h"

namespace h3pipe::model::cuda {

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    throw CudaFailure{fmt::format("{}: {} ({})", call, cudaGetErrorString(e), cudaGetErrorName(e))};
}
void check(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw CudaFailure{fmt::format("{}: cuBLAS status {}", call, static_cast<int>(s))};
}

namespace {
constexpr std::size_t kWorkspaceBytes = 64u << 20;  // cuBLASLt split-K / stream-K workspace

// Largest power of two (<= 256) dividing the address: cuBLASLt's alignment preference.
unsigned alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  unsigned al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

std::uint16_t to_bf16_host(float f) {
  // Round to nearest even, as __float2bfloat16_rn (finite inputs: weights are checked finite).
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
}  // namespace

struct Ctx::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

Ctx::Ctx(int ordinal, bool deterministic) : ordinal_(ordinal), deterministic_(deterministic) {
  H3_CUDA(cudaSetDevice(ordinal));
  H3_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  H3_CUDA(cublasLtCreate(&lt_));
  H3_CUDA(cudaMalloc(&workspace_, kWorkspaceBytes));
  workspace_bytes_ = kWorkspaceBytes;
  mem_.add(kWorkspaceBytes);
}

Ctx::~Ctx() {
  plans_.clear();
  if (stream_) cudaStreamSynchronize(stream_);
  for (void* p : owned_) cudaFree(p);
  if (workspace_) cudaFree(workspace_);
  if (lt_) cublasLtDestroy(lt_);
  if (stream_) cudaStreamDestroy(stream_);
}

void Ctx::upload(const std::string& name, const Tensor& t, bool f32, bool b16) {
  DTensor d;
  d.shape = t.shape;
  const std::size_t n = t.data.size();
  if (f32) {
    void* p = nullptr;
    H3_CUDA(cudaMalloc(&p, n * sizeof(float)));
    owned_.push_back(p);
    H3_CUDA(cudaMemcpy(p, t.data.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    d.f32 = static_cast<const float*>(p);
    weight_bytes_ += n * sizeof(float);
    mem_.add(n * sizeof(float));
  }
  if (b16) {
    std::vector<std::uint16_t> h(n);
    for (std::size_t i = 0; i < n; ++i) h[i] = to_bf16_host(t.data[i]);
    void* p = nullptr;
    H3_CUDA(cudaMalloc(&p, n * sizeof(std::uint16_t)));
    owned_.push_back(p);
    H3_CUDA(cudaMemcpy(p, h.data(), n * sizeof(std::uint16_t), cudaMemcpyHostToDevice));
    d.b16 = static_cast<const bf16*>(p);
    weight_bytes_ += n * sizeof(std::uint16_t);
    mem_.add(n * sizeof(std::uint16_t));
  }
  weights_[name] = std::move(d);
}

const DTensor& Ctx::at(const std::string& name) const {
  const auto it = weights_.find(name);
  if (it == weights_.end()) throw CudaFailure{"no resident tensor " + name};
  return it->second;
}

Ctx::Plan& Ctx::plan(const Key& k) {
  auto it = plans_.find(k);
  if (it != plans_.end()) return *it->second;
  // gemm_layout.h: the row-major call as cuBLASLt's column-major one (operands swapped).
  const auto [ta, tb, m, n, kk, lda, ldb, ldc, batch, sa, sb, sc, align, accumulate] = k;
  (void)accumulate;
  auto p = std::make_unique<Plan>();
  H3_CUDA(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const LtLayout l = lt_layout(ta, tb, m, n, kk, lda, ldb, ldc);
  const cublasOperation_t opa = l.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opb = l.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  H3_CUDA(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  H3_CUDA(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  H3_CUDA(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, l.a_rows, l.a_cols, l.lda));
  H3_CUDA(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, l.b_rows, l.b_cols, l.ldb));
  H3_CUDA(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, l.c_rows, l.c_cols, l.ldc));
  if (batch > 1) {
    const int32_t bc = batch;
    for (auto [l, s] : {std::pair{p->a, sb}, std::pair{p->b, sa}, std::pair{p->c, sc}}) {
      const int64_t st = s;
      H3_CUDA(
          cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof(bc)));
      H3_CUDA(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st,
                                               sizeof(st)));
    }
  }
  cublasLtMatmulPreference_t pref = nullptr;
  H3_CUDA(cublasLtMatmulPreferenceCreate(&pref));
  const std::uint64_t ws = workspace_bytes_;
  H3_CUDA(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                               sizeof(ws)));
  // align packs the four operand alignments (bytes, powers of two <= 256) 8 bits each (log2).
  const std::uint32_t al_b = 1u << (align & 0xff), al_a = 1u << ((align >> 8) & 0xff),
                      al_c = 1u << ((align >> 16) & 0xff);
  H3_CUDA(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                               &al_b, sizeof(al_b)));
  H3_CUDA(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                               &al_a, sizeof(al_a)));
  H3_CUDA(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                               &al_c, sizeof(al_c)));
  H3_CUDA(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                               &al_c, sizeof(al_c)));
  if (deterministic_) {
    // No split-K reduction through atomics: the same algorithm adds partial sums in a fixed
    // order, so repeated calls give identical bytes.
    const std::uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE;
    H3_CUDA(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                 &mask, sizeof(mask)));
  }
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt_, p->op, p->a, p->b, p->c, p->c, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  H3_CUDA(st);
  if (found < 1)
    throw CudaFailure{
        fmt::format("cuBLASLt has no bf16 algorithm for m={} n={} k={} (lda {} ldb {} "
                    "ldc {}, batch {})",
                    m, n, kk, lda, ldb, ldc, batch)};
  p->algo = res.algo;
  return *plans_.emplace(k, std::move(p)).first->second;
}

void Ctx::gemm(bool ta, bool tb, int m, int n, int k, float alpha, const bf16* a, int lda,
               const bf16* b, int ldb, float beta, float* c, int ldc, int batch, long long sa,
               long long sb, long long sc) {
  if (m <= 0 || n <= 0 || batch <= 0) return;
  flops += 2.0 * m * n * k * batch;
  if (k <= 0) {
    throw CudaFailure{"gemm with k = 0"};
  }
  const auto lg = [](unsigned al) {
    unsigned l = 0;
    while ((1u << l) < al) ++l;
    return l;
  };
  const unsigned align = lg(alignment(b)) | (lg(alignment(a)) << 8) | (lg(alignment(c)) << 16);
  Plan& p = plan(Key{ta, tb, m, n, k, lda, ldb, ldc, batch, sa, sb, sc, align, beta != 0.0f});
  H3_CUDA(cublasLtMatmul(lt_, p.op, &alpha, b, p.a, a, p.b, &beta, c, p.c, c, p.c, &p.algo,
                         workspace_, workspace_bytes_, stream_));
}

}  // namespace h3pipe::model::cuda
