#include "hsdp/device/gemm.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "hsdp/core/error.hpp"
#include "hsdp/device/threads.hpp"

namespace hsdp::device {
namespace {

// Reference: the textbook triple loop in double.
template <typename T>
void naive_gemm(Op op_a, Op op_b, int m, int n, int k, double alpha, const std::vector<T>& a, int lda,
                const std::vector<T>& b, int ldb, double beta, std::vector<double>& c, int ldc) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p) {
        const double av = op_a == Op::none ? a[i * lda + p] : a[p * lda + i];
        const double bv = op_b == Op::none ? b[p * ldb + j] : b[j * ldb + p];
        s += av * bv;
      }
      c[i * ldc + j] = alpha * s + beta * c[i * ldc + j];
    }
  }
}

template <typename T>
void check_all_transposes(double tolerance) {
  const int m = 7, n = 5, k = 9, pad = 3;
  for (const Op op_a : {Op::none, Op::transpose}) {
    for (const Op op_b : {Op::none, Op::transpose}) {
      const int a_rows = op_a == Op::none ? m : k, a_cols = op_a == Op::none ? k : m;
      const int b_rows = op_b == Op::none ? k : n, b_cols = op_b == Op::none ? n : k;
      const int lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
      std::vector<T> a(a_rows * lda), b(b_rows * ldb), c(m * ldc);
      std::vector<double> expected(m * ldc);
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<T>(std::sin(0.37 * i));
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<T>(std::cos(0.11 * i));
      for (std::size_t i = 0; i < c.size(); ++i) c[i] = static_cast<T>(0.5 - 0.01 * i);
      for (std::size_t i = 0; i < c.size(); ++i) expected[i] = c[i];
      gemm<T>(op_a, op_b, m, n, k, T(1.5), a.data(), lda, b.data(), ldb, T(0.25), c.data(), ldc);
      naive_gemm(op_a, op_b, m, n, k, 1.5, a, lda, b, ldb, 0.25, expected, ldc);
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < ldc; ++j) EXPECT_NEAR(c[i * ldc + j], expected[i * ldc + j], tolerance);
      }
    }
  }
}

// Tolerances: k = 9 products of values <= 1 in magnitude; float rounding ~ 9 * 6e-8 * |terms| < 1e-5,
// double ~ 1e-15 (1e-12 leaves room). Padding columns are checked too: they must be untouched.
TEST(Gemm, FloatMatchesNaiveLoops_ForAllTransposes) { check_all_transposes<float>(1e-5); }
TEST(Gemm, DoubleMatchesNaiveLoops_ForAllTransposes) { check_all_transposes<double>(1e-12); }

TEST(Gemm, EmptyProblem_DoesNothing) {
  float c = 3.0f;
  gemm<float>(Op::none, Op::none, 0, 1, 1, 1.0f, nullptr, 1, nullptr, 1, 0.0f, &c, 1);
  EXPECT_EQ(c, 3.0f);
}

TEST(Gemm, TooSmallLeadingDimension_ThrowsInternalError) {
  std::vector<float> a(16), b(16), c(16);
  try {
    gemm<float>(Op::none, Op::none, 4, 4, 4, 1.0f, a.data(), 3, b.data(), 4, 0.0f, c.data(), 4);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::internal);
  }
}

// Shapes large enough for gemm() to split: into column panels, row panels, and depth slices. Compared with one
// plain OpenBLAS call and with the exact result (double), element by element, to a bound derived from the depth,
// not fitted to one CPU: any float evaluation of alpha * sum_p a_ip b_pj + beta c_ij, in any order of summation,
// blocked or not, with or without FMA (whatever the x86-64 kernel does), is within
//   gamma_{k+2} (|alpha| sum_p |a_ip b_pj| + |beta c_ij|),   gamma_n = n u / (1 - n u), u = 2^-24
// of the exact value (Higham, Accuracy and Stability of Numerical Algorithms, 3.1: k products, k-1 additions, the
// scaling by alpha and the addition of beta c). The split and the plain call each satisfy it, so they differ by at
// most twice that. (A panel or slice computed wrongly, or twice, misses by a multiple of the terms themselves.)
struct SplitCase {
  const char* what;
  Op op_a, op_b;
  int m, n, k;
};
void PrintTo(const SplitCase& c, std::ostream* out) { *out << c.what; }

class GemmSplit : public ::testing::TestWithParam<SplitCase> {};

TEST_P(GemmSplit, MatchesOnePlainBlasCall_AndIsBitIdenticalForOneAndTwoThreads) {
  const SplitCase s = GetParam();
  const int lda = s.op_a == Op::none ? s.k : s.m, ldb = s.op_b == Op::none ? s.n : s.k;
  std::vector<float> a(static_cast<std::size_t>(s.m) * s.k), b(static_cast<std::size_t>(s.k) * s.n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(std::sin(0.013 * static_cast<double>(i)));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(std::cos(0.007 * static_cast<double>(i)));
  const std::size_t cn = static_cast<std::size_t>(s.m) * s.n;
  std::vector<float> c_init(cn);
  for (std::size_t i = 0; i < cn; ++i) c_init[i] = static_cast<float>(0.001 * static_cast<double>(i % 101));
  constexpr float alpha = 0.5f, beta = 2.0f;
  std::vector<float> expected = c_init, one = c_init, two = c_init;
  blas_gemm<float>(s.op_a, s.op_b, s.m, s.n, s.k, alpha, a.data(), lda, b.data(), ldb, beta, expected.data(), s.n);
  {
    ThreadCountScope scope(1);
    gemm<float>(s.op_a, s.op_b, s.m, s.n, s.k, alpha, a.data(), lda, b.data(), ldb, beta, one.data(), s.n);
  }
  {
    ThreadCountScope scope(2);
    gemm<float>(s.op_a, s.op_b, s.m, s.n, s.k, alpha, a.data(), lda, b.data(), ldb, beta, two.data(), s.n);
  }
  const double u = std::ldexp(1.0, -24);
  const double gamma = (s.k + 2) * u / (1 - (s.k + 2) * u);
  const auto at_a = [&](int i, int p) { return static_cast<double>(s.op_a == Op::none ? a[i * lda + p] : a[p * lda + i]); };
  const auto at_b = [&](int p, int j) { return static_cast<double>(s.op_b == Op::none ? b[p * ldb + j] : b[j * ldb + p]); };
  for (int i = 0; i < s.m; ++i) {
    for (int j = 0; j < s.n; ++j) {
      double exact = 0, magnitude = 0;
      for (int p = 0; p < s.k; ++p) {
        const double product = at_a(i, p) * at_b(p, j);
        exact += product;
        magnitude += std::fabs(product);
      }
      const std::size_t e = static_cast<std::size_t>(i) * s.n + j;
      const double c = c_init[e];
      exact = alpha * exact + beta * c;
      const double bound = gamma * (alpha * magnitude + beta * std::fabs(c));
      ASSERT_LE(std::fabs(two[e] - exact), bound) << s.what << " at (" << i << ", " << j << ")";
      ASSERT_LE(std::fabs(expected[e] - exact), bound) << "plain BLAS at (" << i << ", " << j << ")";
      ASSERT_LE(std::fabs(two[e] - expected[e]), 2 * bound) << s.what << " at (" << i << ", " << j << ")";
    }
  }
  // The split is fixed by the shape: one thread works through the same panels/slices.
  ASSERT_EQ(one, two) << s.what;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmSplit,
                         ::testing::Values(SplitCase{"column_panels", Op::none, Op::transpose, 64, 4096, 512},
                                           SplitCase{"row_panels", Op::transpose, Op::none, 4096, 64, 512},
                                           SplitCase{"depth_slices", Op::none, Op::none, 32, 48, 8192}),
                         [](const auto& info) { return std::string(info.param.what); });

TEST(Gemm, DepthSlices_IgnoreNanInC_WhenBetaIsZero) {
  const int m = 16, n = 16, k = 8192;
  std::vector<float> a(static_cast<std::size_t>(m) * k, 0.5f), b(static_cast<std::size_t>(k) * n, 0.25f);
  std::vector<float> c(static_cast<std::size_t>(m) * n, std::nanf(""));
  ThreadCountScope scope(2);
  gemm<float>(Op::none, Op::none, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  for (const float v : c) ASSERT_EQ(v, 1024.0f);  // 8192 * 0.125, exact in float
}

TEST(Gemm, FlopCount_IsTwoMNK) { EXPECT_EQ(gemm_flops(2, 3, 4), 48.0); }

}  // namespace
}  // namespace hsdp::device
