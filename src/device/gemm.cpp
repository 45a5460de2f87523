#include "hsdp/device/gemm.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstddef>
#include <vector>
#include <string>
#include <type_traits>

#include "hsdp/core/error.hpp"
#include "hsdp/device/parallel.hpp"

namespace hsdp::device {
namespace {

// Below this many multiply-adds a GEMM runs as one call on the calling thread.
constexpr double kSplitMinMacs = 1 << 20;
// Panel boundaries are multiples of this many rows/columns (whole SIMD vectors of the BLAS kernels).
constexpr int kPanelAlign = 16;
// A panel has at least this many multiply-adds (~1 ms on one core), and there are at most kMaxPanels.
constexpr double kPanelMinMacs = 64.0 * (1 << 20);
constexpr int kMaxPanels = 64;
// Depth splitting: when k >= kSplitDepthRatio * max(m, n), into kDepthSlices slices.
constexpr int kSplitDepthRatio = 16;
constexpr int kDepthSlices = 8;

CBLAS_TRANSPOSE to_cblas(Op op) { return op == Op::none ? CblasNoTrans : CblasTrans; }

// Row-major storage: op(A) is m x k, so A itself is m x k (lda >= k) or k x m (lda >= m).
void check_leading_dimension(const char* what, Op op, int rows, int cols, int ld) {
  const int needed = op == Op::none ? cols : rows;
  if (ld < needed || ld < 1) {
    throw_internal(std::string("gemm: leading dimension of ") + what + " is " + std::to_string(ld) +
                   ", needs at least " + std::to_string(needed));
  }
}

template <typename T>
void check_arguments(Op op_a, Op op_b, int m, int n, int k, int lda, int ldb, int ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "gemm is for float and double");
  if (m < 0 || n < 0 || k < 0) {
    throw_internal("gemm: negative size m=" + std::to_string(m) + " n=" + std::to_string(n) +
                   " k=" + std::to_string(k));
  }
  if (m == 0 || n == 0) return;
  check_leading_dimension("A", op_a, m, k, lda);
  check_leading_dimension("B", op_b, k, n, ldb);
  check_leading_dimension("C", Op::none, m, n, ldc);
}

template <typename T>
void cblas_call(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb, T beta,
                T* c, int ldc) {
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, to_cblas(op_a), to_cblas(op_b), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, to_cblas(op_a), to_cblas(op_b), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

// OpenBLAS's pool is held at one thread while the OpenMP threads make their calls, then restored. Only
// outside a parallel region: the setting is global, and threads of a team must not race on it (a call
// from inside a region with a larger pool still works; OpenBLAS then queues it on its own threads).
class SingleThreadedBlas {
 public:
  SingleThreadedBlas() : previous_(omp_in_parallel() ? 1 : openblas_get_num_threads()) {
    if (previous_ != 1) openblas_set_num_threads(1);
  }
  ~SingleThreadedBlas() {
    if (previous_ != 1) openblas_set_num_threads(previous_);
  }
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  int previous_;
};

// Panels of C, fixed by the shape alone (not by the thread count): at least kPanelMinMacs multiply-adds
// each and whole multiples of kPanelAlign, at most kMaxPanels. Handed out dynamically, they keep both
// cores busy when the OS takes one away for a while.
struct GemmPanels {
  int width;
  int count;
};

GemmPanels plan_panels(int extent, double macs) {
  const double per_unit = macs / extent;  // multiply-adds per row (or column) of C
  int width = static_cast<int>(std::ceil(kPanelMinMacs / per_unit));
  width = std::max(width, (extent + kMaxPanels - 1) / kMaxPanels);
  width = (width + kPanelAlign - 1) / kPanelAlign * kPanelAlign;
  width = std::min(width, extent);
  return {width, (extent + width - 1) / width};
}

// A GEMM whose depth k dwarfs m and n (the LM head's d-input: 256 x 768 x 50257): panels of C would
// each re-pack all of the long operand, so split k into fixed slices instead, compute each slice's
// product into its own buffer, and add the slices in slice order (deterministic for any thread count).
template <typename T>
void split_depth(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb, T beta,
                 T* c, int ldc) {
  const int slices = std::min(kDepthSlices, std::max(1, k / kPanelAlign));
  const std::size_t slice_size = static_cast<std::size_t>(m) * n;
  std::vector<T> partial(slice_size * static_cast<std::size_t>(slices));
#pragma omp parallel for schedule(dynamic, 1)
  for (int s = 0; s < slices; ++s) {
    const Range r = split_range(k, slices, s);
    const int k0 = static_cast<int>(r.begin);
    const int len = static_cast<int>(r.end - r.begin);
    const T* a_slice = op_a == Op::none ? a + k0 : a + static_cast<std::ptrdiff_t>(k0) * lda;
    const T* b_slice = op_b == Op::none ? b + static_cast<std::ptrdiff_t>(k0) * ldb : b + k0;
    cblas_call(op_a, op_b, m, n, len, T(1), a_slice, lda, b_slice, ldb, T(0), partial.data() + slice_size * s, n);
  }
#pragma omp parallel for schedule(static)
  for (int i = 0; i < m; ++i) {
    T* row = c + static_cast<std::ptrdiff_t>(i) * ldc;
    for (int j = 0; j < n; ++j) {
      T sum = partial[static_cast<std::size_t>(i) * n + j];
      for (int s = 1; s < slices; ++s) sum += partial[slice_size * s + static_cast<std::size_t>(i) * n + j];
      row[j] = beta == T(0) ? alpha * sum : alpha * sum + beta * row[j];
    }
  }
}

}  // namespace

template <typename T>
void gemm(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb, T beta,
          T* c, int ldc) {
  check_arguments<T>(op_a, op_b, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  SingleThreadedBlas single;
  // The split depends on the shape only, never on the thread count, so that results are the same for
  // any number of threads (one thread works through the same panels in turn).
  const double macs = static_cast<double>(m) * n * k;
  if (macs < kSplitMinMacs) {
    cblas_call(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (k >= kSplitDepthRatio * std::max(m, n)) {
    split_depth(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Split the longer side of C: each panel packs its share of the larger operand and all of the smaller.
  const bool split_rows = m > n;
  const GemmPanels panels = plan_panels(split_rows ? m : n, macs);
#pragma omp parallel for schedule(dynamic, 1)
  for (int p = 0; p < panels.count; ++p) {
    const int begin = p * panels.width;
    const int len = std::min(panels.width, (split_rows ? m : n) - begin);
    if (split_rows) {
      const T* a_panel = op_a == Op::none ? a + static_cast<std::ptrdiff_t>(begin) * lda : a + begin;
      cblas_call(op_a, op_b, len, n, k, alpha, a_panel, lda, b, ldb, beta,
                 c + static_cast<std::ptrdiff_t>(begin) * ldc, ldc);
    } else {
      const T* b_panel = op_b == Op::none ? b + begin : b + static_cast<std::ptrdiff_t>(begin) * ldb;
      cblas_call(op_a, op_b, m, len, k, alpha, a, lda, b_panel, ldb, beta, c + begin, ldc);
    }
  }
}

template <typename T>
void blas_gemm(Op op_a, Op op_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb, T beta,
               T* c, int ldc) {
  check_arguments<T>(op_a, op_b, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  cblas_call(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template void gemm<float>(Op, Op, int, int, int, float, const float*, int, const float*, int, float, float*, int);
template void gemm<double>(Op, Op, int, int, int, double, const double*, int, const double*, int, double,
                           double*, int);
template void blas_gemm<float>(Op, Op, int, int, int, float, const float*, int, const float*, int, float, float*,
                               int);
template void blas_gemm<double>(Op, Op, int, int, int, double, const double*, int, const double*, int, double,
                                double*, int);

}  // namespace hsdp::device
