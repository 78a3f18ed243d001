#pragma once
// How a row-major product (the CPU sgemm's signature, kernels.h) is handed to cuBLASLt, which
// is column-major: C (m x n) = op(A) op(B) is C^T (n x m) = op(B)^T op(A)^T, and a row-major
// matrix of r x c with leading dimension ld is the column-major c x r matrix with the same ld.
// So cuBLASLt's A is the row-major B, its B the row-major A.  Free of CUDA headers so that the
// mapping is unit-tested on machines without a GPU (tests/model/model_device_test.cpp).
#include <cstdint>

namespace h3pipe::model::cuda {

struct LtLayout {
  bool trans_a = false, trans_b = false;  // cuBLASLt's transa / transb
  std::uint64_t a_rows = 0, a_cols = 0;   // stored (column-major) shape of cuBLASLt's A
  std::uint64_t b_rows = 0, b_cols = 0;
  std::uint64_t c_rows = 0, c_cols = 0;
  int lda = 0, ldb = 0, ldc = 0;  // leading dimensions of cuBLASLt's A, B, C
  int m = 0, n = 0, k = 0;        // cuBLASLt's M x N result, inner dimension K
  bool a_is_rowmajor_b = true;    // cuBLASLt's A pointer is the caller's B
};

constexpr LtLayout lt_layout(bool ta, bool tb, int m, int n, int k, int lda, int ldb, int ldc) {
  LtLayout l;
  l.trans_a = tb;  // op on the caller's B
  l.trans_b = ta;  // op on the caller's A
  l.a_rows = static_cast<std::uint64_t>(tb ? k : n);
  l.a_cols = static_cast<std::uint64_t>(tb ? n : k);
  l.b_rows = static_cast<std::uint64_t>(ta ? m : k);
  l.b_cols = static_cast<std::uint64_t>(ta ? k : m);
  l.c_rows = static_cast<std::uint64_t>(n);
  l.c_cols = static_cast<std::uint64_t>(m);
  l.lda = ldb;
  l.ldb = lda;
  l.ldc = ldc;
  l.m = n;
  l.n = m;
  l.k = k;
  return l;
}

}  // namespace h3pipe::model::cuda
