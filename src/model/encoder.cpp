#include <cstdint>

#include "hsdp/device/parallel.hpp"
#include "hsdp/model/layers.hpp"
#include "kernel_util.hpp"

namespace hsdp::model {

template <typename T>
void encoder_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, int B, int T_, int C) {
  const std::int64_t N = std::int64_t{B} * T_;
  device::parallel_for(
      N,
      [&](std::int64_t n) {
        const T* te = wte + std::int64_t{tokens[n]} * C;
        T* o = out + n * C;
        if (wpe == nullptr) {
          for (int c = 0; c < C; ++c) o[c] = te[c];
          return;
        }
        const T* pe = wpe + (n % T_) * C;
#pragma omp simd
        for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
      },
      C);
}

template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens, int B, int T_, int C) {
  const std::int64_t N = std::int64_t{B} * T_;
  // wte: rows of repeated tokens collide, so split by columns and add rows in order.
  detail::for_column_pieces(C, N, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t n = 0; n < N; ++n) {
      T* dte = dwte + std::int64_t{tokens[n]} * C;
      const T* d = dout + n * C;
#pragma omp simd
      for (std::int64_t c = c0; c < c1; ++c) dte[c] += d[c];
    }
  });
  // wpe: position t gathers its B rows, in batch order.
  if (dwpe == nullptr) return;
  device::parallel_for(
      T_,
      [&](std::int64_t t) {
        T* dpe = dwpe + t * C;
        for (int b = 0; b < B; ++b) {
          const T* d = dout + (std::int64_t{b} * T_ + t) * C;
#pragma omp simd
          for (int c = 0; c < C; ++c) dpe[c] += d[c];
        }
      },
      std::int64_t{B} * C);
}

template void encoder_forward<float>(float*, const std::int32_t*, const float*, const float*, int, int, int);
template void encoder_forward<double>(double*, const std::int32_t*, const double*, const double*, int, int, int);
template void encoder_backward<float>(float*, float*, const float*, const std::int32_t*, int, int, int);
template void encoder_backward<double>(double*, double*, const double*, const std::int32_t*, int, int, int);

}  // namespace hsdp::model
