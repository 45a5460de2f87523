#pragma once
// Row-major GEMM on the CPU through OpenBLAS (cblas_sgemm / cblas_dgemm):
//   C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C[m, n]
// where op(X) is X or its transpose and lda/ldb/ldc are row strides in elements. cblas.h stays private to
// src/device so no other layer depends on the BLAS header.
#include <cstdint>

namespace hsdp::device {

enum class Op { none, transpose };

template <typename T>
void gemm(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb, T beta,
          T* c, int ldc);

// Floating-point operations of one GEMM (a multiply and an add per inner-product term).
constexpr double gemm_flops(std::int64_t m, std::int64_t n, std::int64_t k) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}

}  // namespace hsdp::device
