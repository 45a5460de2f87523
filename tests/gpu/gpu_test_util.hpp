#pragma once
// What the GPU tests share: the fixture that skips (visibly, for ctest) when no CUDA device is visible, uploads
// and downloads, random inputs, bf16 helpers, and a closeness check that names the first element out of tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "hsdp/core/dtype.hpp"
#include "hsdp/device/cuda/runtime.hpp"

namespace hsdp::gpu_testing {

namespace cuda = hsdp::device::cuda;

// ctest's SKIP_REGULAR_EXPRESSION for the gpu label matches this text.
inline constexpr const char* kNoDevice = "no CUDA device visible: ";

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    if (cuda::visible_device_count(&reason) == 0) GTEST_SKIP() << kNoDevice << reason;
    cuda::check(cudaSetDevice(0), "cudaSetDevice(0)");
    stream_.emplace();
  }
  cudaStream_t stream() const { return stream_->get(); }
  void sync() const { stream_->synchronize(); }

  template <typename T>
  cuda::DeviceBuffer<T> upload(const std::vector<T>& host) {
    cuda::DeviceBuffer<T> device(host.size());
    cuda::copy_to_device(device.data(), host.data(), host.size(), stream());
    sync();
    return device;
  }
  template <typename T>
  std::vector<T> download(const cuda::DeviceBuffer<T>& device) {
    std::vector<T> host(device.size());
    cuda::copy_to_host(host.data(), device.data(), device.size(), stream());
    sync();
    return host;
  }

 private:
  std::optional<cuda::Stream> stream_;
};

inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(lo, hi);
  std::vector<float> x(n);
  for (float& v : x) v = uniform(rng);
  return x;
}

inline std::vector<bf16_t> to_bf16(const std::vector<float>& x) {
  std::vector<bf16_t> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = float_to_bf16(x[i]);
  return out;
}
inline std::vector<float> to_float(const std::vector<bf16_t>& x) {
  std::vector<float> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = bf16_to_float(x[i]);
  return out;
}
// The values as bf16 would store them (so a bf16 GPU input and the CPU's float input are the same numbers).
inline std::vector<float> rounded_to_bf16(const std::vector<float>& x) {
  return to_float(to_bf16(x));
}

// The storage type of a test's device buffers, from float host values, and back.
template <typename T>
std::vector<T> as(const std::vector<float>& x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return to_bf16(x);
}
template <typename T>
std::vector<float> floats(const std::vector<T>& x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return to_float(x);
}

// Tolerance: |got - want| <= rel * |want| + scale_rel * max|want| (the second term covers elements near zero in
// a tensor whose typical magnitude is larger).
struct Tolerance {
  double rel;
  double scale_rel;
};

inline double max_abs(const std::vector<float>& x) {
  double scale = 0.0;
  for (const float v : x) scale = std::max(scale, std::abs(static_cast<double>(v)));
  return scale;
}

// The tolerance's rule for one element, given max|want| (scale); false for NaN.
inline bool within(float got, float want, double scale, Tolerance tol) {
  const double err = std::abs(static_cast<double>(got) - want);
  return err <= tol.rel * std::abs(static_cast<double>(want)) + tol.scale_rel * scale;
}

inline ::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want, Tolerance tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  }
  const double scale = max_abs(want);
  std::size_t bad = 0;
  std::size_t first = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!within(got[i], want[i], scale, tol)) {
      if (bad == 0) first = i;
      ++bad;
    }
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]) / (scale > 0 ? scale : 1.0));
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << want.size() << " elements out of tolerance (rel " << tol.rel
                                       << ", " << tol.scale_rel << " of max |want| " << scale << "); first at " << first
                                       << ": got " << got[first] << ", want " << want[first]
                                       << "; worst error / max|want| = " << worst;
}

// Where the elements out of tolerance lie, for rows of `width` values (row b T + t, t < T): their counts by tile of
// `tile` rows of t and group of `group` columns (a kernel's row tiles and heads), "(tile, group): count", the 12
// largest; empty when none is out. A kernel's bug shows its shape: one tile edge, one warp's rows, the last tile.
inline std::string where_out_of_tolerance(const std::vector<float>& got, const std::vector<float>& want, Tolerance tol,
                                          int T, int width, int tile, int group) {
  if (got.size() != want.size() || width < 1 || T < 1 || tile < 1 || group < 1) return {};
  const double scale = max_abs(want);
  std::map<std::pair<int, int>, int> by_place;  // (tile, group) -> count
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (within(got[i], want[i], scale, tol)) continue;
    const int t = static_cast<int>(i / static_cast<std::size_t>(width)) % T;
    ++by_place[{t / tile, static_cast<int>(i % static_cast<std::size_t>(width)) / group}];
  }
  if (by_place.empty()) return {};
  std::vector<std::pair<std::pair<int, int>, int>> counts(by_place.begin(), by_place.end());
  std::stable_sort(counts.begin(), counts.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string text =
      "; out of tolerance by (" + std::to_string(tile) + "-row tile of t, " + std::to_string(group) + "-column group):";
  for (std::size_t k = 0; k < counts.size() && k < 12; ++k) {
    text += " (" + std::to_string(counts[k].first.first) + ", " + std::to_string(counts[k].first.second) +
            "): " + std::to_string(counts[k].second);
  }
  if (counts.size() > 12) text += " ... (" + std::to_string(counts.size()) + " places)";
  return text;
}

// The q, k and v parts of N rows laid out q (C) | k (K) | v (K), as three row-major buffers (a Llama's and the GPU
// attention's layout; GPT-2's with K = C).
struct QkvParts {
  std::vector<float> q, k, v;
};
inline QkvParts split_qkv(const std::vector<float>& rows, int N, int C, int K) {
  QkvParts parts;
  const std::size_t rs = static_cast<std::size_t>(C + 2 * K);
  for (std::size_t n = 0; n < static_cast<std::size_t>(N); ++n) {
    const auto row = rows.begin() + static_cast<std::ptrdiff_t>(n * rs);
    parts.q.insert(parts.q.end(), row, row + C);
    parts.k.insert(parts.k.end(), row + C, row + C + K);
    parts.v.insert(parts.v.end(), row + C + K, row + C + 2 * K);
  }
  return parts;
}

}  // namespace hsdp::gpu_testing
