#pragma once
// Vectorizable elementary functions for the CPU kernels. glibc's expf is a scalar call that stops GCC from
// vectorizing a loop (its SIMD variants need -ffast-math), so float uses a Cephes-style exp written with
// plain arithmetic (max relative error ~2 ulp over the clamped range); double keeps std::exp, whose
// accuracy the finite-difference tests rely on.
#include <bit>
#include <cmath>
#include <cstdint>

namespace hsdp::device {

inline float exp_approx(float x) {
  // exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln2 / 2. Inputs are clamped so 2^n stays a normal
  // float: exp(-87.3) ~ 1e-38 stands in for smaller results (their effect on a softmax sum is nil).
  x = x > 88.37f ? 88.37f : x;
  x = x < -87.33f ? -87.33f : x;
  // Round x / ln2 to the nearest integer by the 1.5 * 2^23 trick (std::floor does not vectorize without
  // -fno-trapping-math); the integer n is read from the low mantissa bits of `shifted`.
  constexpr float kRoundShift = 12582912.0f;
  const float shifted = x * 1.44269504088896341f + kRoundShift;
  const float n = shifted - kRoundShift;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  const float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r2 + r + 1.0f;
  const std::int32_t bits = (std::bit_cast<std::int32_t>(shifted) - std::bit_cast<std::int32_t>(kRoundShift) + 127)
                            << 23;
  return p * std::bit_cast<float>(bits);
}

template <typename T>
inline T vexp(T x);
template <>
inline float vexp<float>(float x) {
  return exp_approx(x);
}
template <>
inline double vexp<double>(double x) {
  return std::exp(x);
}

}  // namespace hsdp::device
