#pragma once
// Row-major GEMM on the CPU through OpenBLAS (cblas_sgemm / cblas_dgemm):
//   C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C[m, n]
// where op(X) is X or its transpose and lda/ldb/ldc are row strides in elements. cblas.h stays private to
// src/device so no other layer depends on the BLAS header.
//
// gemm() is what the kernels use: it splits C into panels along its longer side (or, when k dwarfs m and
// n, splits k into slices summed in a fixed order) and the OpenMP threads take panels dynamically, each
// running a single-threaded OpenBLAS call. The kernels' other loops run on the same OpenMP team, so no
// second thread pool competes for the cores: with OpenBLAS's own pool, its spinning workers and OpenMP's
// took turns stealing the cores (measured: a quarter of a GPT-2 step lost on 2 cores). The split depends
// on the shape only, so results are bit-identical run to run and for any thread count. Called inside a
// parallel region it runs the same panels on the calling thread.
//
// blas_gemm() is one plain call with OpenBLAS's own threading (openblas_get_num_threads() threads), for
// callers outside the kernels and as the reference a benchmark compares against.
#include <cstdint>

namespace hsdp::device {

enum class Op { none, transpose };

template <typename T>
void gemm(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb, T beta,
          T* c, int ldc);

template <typename T>
void blas_gemm(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb, T beta,
               T* c, int ldc);

// Floating-point operations of one GEMM (a multiply and an add per inner-product term).
constexpr double gemm_flops(std::int64_t m, std::int64_t n, std::int64_t k) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}

}  // namespace hsdp::device
