#include "hsdp/device/threads.hpp"

#include <gtest/gtest.h>

#include "hsdp/device/parallel.hpp"

namespace hsdp::device {
namespace {

TEST(ThreadCountScope, SetsBothPools_AndRestoresThemOnExit) {
  const int blas_before = blas_threads();
  const int omp_before = omp_threads();
  {
    ThreadCountScope scope(1, 2);
    EXPECT_EQ(blas_threads(), 1);
    EXPECT_EQ(omp_threads(), 2);
    {
      ThreadCountScope inner(1);
      EXPECT_EQ(omp_threads(), 1);
    }
    EXPECT_EQ(omp_threads(), 2);
  }
  EXPECT_EQ(blas_threads(), blas_before);
  EXPECT_EQ(omp_threads(), omp_before);
}

TEST(ThreadCountScope, NonPositiveCount_Throws) { EXPECT_ANY_THROW(ThreadCountScope(0)); }

TEST(AvailableCores, IsAtLeastOne) { EXPECT_GE(available_cores(), 1); }

TEST(SplitRange, CoversEveryIndexOnce_InNearlyEqualPieces) {
  for (std::int64_t n : {0, 1, 7, 64, 1000}) {
    for (std::int64_t parts : {1, 2, 3, 16}) {
      std::int64_t next = 0;
      for (std::int64_t p = 0; p < parts; ++p) {
        const Range r = split_range(n, parts, p);
        EXPECT_EQ(r.begin, next);
        EXPECT_LE(r.end - r.begin, n / parts + 1);
        next = r.end;
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(ParallelFor, VisitsEveryIndexExactlyOnce) {
  std::vector<int> hits(100000, 0);
  parallel_for(static_cast<std::int64_t>(hits.size()), [&](std::int64_t i) { hits[static_cast<std::size_t>(i)] += 1; });
  for (const int h : hits) ASSERT_EQ(h, 1);
  std::vector<int> block_hits(50001, 0);
  parallel_blocks(static_cast<std::int64_t>(block_hits.size()), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) block_hits[static_cast<std::size_t>(i)] += 1;
  });
  for (const int h : block_hits) ASSERT_EQ(h, 1);
}

}  // namespace
}  // namespace hsdp::device
