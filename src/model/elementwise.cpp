// GELU (tanh approximation) and the residual add.
#include <cmath>
#include <cstdint>

#include "hsdp/device/parallel.hpp"
#include "hsdp/device/vmath.hpp"
#include "hsdp/model/layers.hpp"

namespace hsdp::model {
namespace {

// sqrt(2 / pi) and the cubic coefficient of GPT-2's GELU.
constexpr double kGeluScale = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

}  // namespace

// 0.5 x (1 + tanh u) = x * sigmoid(2u), since 1 + tanh u = 2 sigmoid(2u).
template <typename T>
void gelu_forward(T* out, const T* inp, std::size_t n) {
  const T k0 = static_cast<T>(kGeluScale);
  const T k1 = static_cast<T>(kGeluCubic);
  device::parallel_blocks(static_cast<std::int64_t>(n), [&](std::int64_t begin, std::int64_t end) {
    const T* in = inp + begin;
    T* o = out + begin;
    const int len = static_cast<int>(end - begin);
#pragma omp simd
    for (int i = 0; i < len; ++i) {
      const T x = in[i];
      const T u = k0 * (x + k1 * x * x * x);
      o[i] = x / (T(1) + device::vexp<T>(T(-2) * u));
    }
  });
}

// d/dx [x s(2u)] = s + x * 2 s (1 - s) * u',  u' = k0 (1 + 3 k1 x^2)
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n) {
  const T k0 = static_cast<T>(kGeluScale);
  const T k1 = static_cast<T>(kGeluCubic);
  device::parallel_blocks(static_cast<std::int64_t>(n), [&](std::int64_t begin, std::int64_t end) {
    const T* in = inp + begin;
    const T* d = dout + begin;
    T* di = dinp + begin;
    const int len = static_cast<int>(end - begin);
#pragma omp simd
    for (int i = 0; i < len; ++i) {
      const T x = in[i];
      const T u = k0 * (x + k1 * x * x * x);
      const T s = T(1) / (T(1) + device::vexp<T>(T(-2) * u));
      const T du = k0 * (T(1) + T(3) * k1 * x * x);
      di[i] += d[i] * (s + T(2) * x * s * (T(1) - s) * du);
    }
  });
}

template <typename T>
void residual_forward(T* out, const T* inp1, const T* inp2, std::size_t n) {
  device::parallel_blocks(static_cast<std::int64_t>(n), [&](std::int64_t begin, std::int64_t end) {
#pragma omp simd
    for (std::int64_t i = begin; i < end; ++i) out[i] = inp1[i] + inp2[i];
  });
}

template <typename T>
void residual_backward(T* dinp1, T* dinp2, const T* dout, std::size_t n) {
  device::parallel_blocks(static_cast<std::int64_t>(n), [&](std::int64_t begin, std::int64_t end) {
#pragma omp simd
    for (std::int64_t i = begin; i < end; ++i) {
      dinp1[i] += dout[i];
      dinp2[i] += dout[i];
    }
  });
}

template void gelu_forward<float>(float*, const float*, std::size_t);
template void gelu_forward<double>(double*, const double*, std::size_t);
template void gelu_backward<float>(float*, const float*, const float*, std::size_t);
template void gelu_backward<double>(double*, const double*, const double*, std::size_t);
template void residual_forward<float>(float*, const float*, const float*, std::size_t);
template void residual_forward<double>(double*, const double*, const double*, std::size_t);
template void residual_backward<float>(float*, float*, const float*, std::size_t);
template void residual_backward<double>(double*, double*, const double*, std::size_t);

}  // namespace hsdp::model
