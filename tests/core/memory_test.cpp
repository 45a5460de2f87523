#include "hsdp/core/memory.hpp"

#include <gtest/gtest.h>

#include "hsdp/core/buffer.hpp"
#include "hsdp/core/error.hpp"

namespace hsdp {

TEST(MemoryAccountant, TracksCurrentAndPeakPerCategory) {
  MemoryAccountant m;
  m.allocate(MemCategory::params, 100);
  m.allocate(MemCategory::grads, 50);
  m.release(MemCategory::grads, 50);
  m.allocate(MemCategory::grads, 20);
  EXPECT_EQ(m.current(MemCategory::params), 100);
  EXPECT_EQ(m.current(MemCategory::grads), 20);
  EXPECT_EQ(m.peak(MemCategory::grads), 50);
  EXPECT_EQ(m.current_total(), 120);
  EXPECT_EQ(m.peak_total(), 150);
}

TEST(MemoryAccountant, ResetPeaksRestartsAtCurrent) {
  MemoryAccountant m;
  m.allocate(MemCategory::activations, 1000);
  m.release(MemCategory::activations, 900);
  m.reset_peaks();
  EXPECT_EQ(m.peak(MemCategory::activations), 100);
  EXPECT_EQ(m.peak_total(), 100);
}

TEST(MemoryAccountant, ReleasingMoreThanAllocatedIsAnInternalError) {
  MemoryAccountant m;
  m.allocate(MemCategory::optimizer, 8);
  EXPECT_THROW(m.release(MemCategory::optimizer, 9), Error);
}

TEST(Buffer, ChargesItsCategoryForItsLifetime) {
  MemoryAccountant m;
  {
    Buffer<float> b(1000, m, MemCategory::params);
    EXPECT_EQ(m.current(MemCategory::params), 4000);
    Buffer<float> moved = std::move(b);
    EXPECT_EQ(m.current(MemCategory::params), 4000);
    EXPECT_EQ(moved.size(), 1000u);
  }
  EXPECT_EQ(m.current(MemCategory::params), 0);
  EXPECT_EQ(m.peak(MemCategory::params), 4000);
}

TEST(Buffer, IsAlignedAndZeroed) {
  Buffer<double> b(17);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % kBufferAlignment, 0u);
  for (const double x : b) EXPECT_EQ(x, 0.0);
}

}  // namespace hsdp
