#include "hsdp/device/gemm.hpp"

#include <cblas.h>

#include <string>
#include <type_traits>

#include "hsdp/core/error.hpp"

namespace hsdp::device {
namespace {

CBLAS_TRANSPOSE to_cblas(Op op) { return op == Op::none ? CblasNoTrans : CblasTrans; }

// Row-major storage: op(A) is m x k, so A itself is m x k (lda >= k) or k x m (lda >= m).
void check_leading_dimension(const char* what, Op op, int rows, int cols, int ld) {
  const int needed = op == Op::none ? cols : rows;
  if (ld < needed || ld < 1) {
    throw_internal(std::string("gemm: leading dimension of ") + what + " is " + std::to_string(ld) +
                   ", needs at least " + std::to_string(needed));
  }
}

}  // namespace

template <typename T>
void gemm(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb, T beta,
          T* c, int ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "gemm is for float and double");
  if (m < 0 || n < 0 || k < 0) {
    throw_internal("gemm: negative size m=" + std::to_string(m) + " n=" + std::to_string(n) +
                   " k=" + std::to_string(k));
  }
  if (m == 0 || n == 0) return;
  check_leading_dimension("A", op_a, m, k, lda);
  check_leading_dimension("B", op_b, k, n, ldb);
  check_leading_dimension("C", Op::none, m, n, ldc);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, to_cblas(op_a), to_cblas(op_b), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, to_cblas(op_a), to_cblas(op_b), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

template void gemm<float>(Op, Op, int, int, int, float, const float*, int, const float*, int, float, float*, int);
template void gemm<double>(Op, Op, int, int, int, double, const double*, int, const double*, int, double,
                           double*, int);

}  // namespace hsdp::device
