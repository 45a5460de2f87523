#include <cmath>
#include <cstdint>

#include "hsdp/device/parallel.hpp"
#include "hsdp/model/layers.hpp"
#include "kernel_util.hpp"

namespace hsdp::model {

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int N, int C) {
  device::parallel_for(
      N,
      [&](std::int64_t n) {
        const T* x = inp + n * C;
        T sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < C; ++c) sum += x[c];
        const T m = sum / static_cast<T>(C);
        T sq = 0;  // two passes: the variance of centred values does not cancel catastrophically
#pragma omp simd reduction(+ : sq)
        for (int c = 0; c < C; ++c) sq += (x[c] - m) * (x[c] - m);
        const T s = T(1) / std::sqrt(sq / static_cast<T>(C) + static_cast<T>(kLayerNormEps));
        T* o = out + n * C;
#pragma omp simd
        for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[n] = m;
        rstd[n] = s;
      },
      3 * C);
}

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int N, int C) {
  device::parallel_for(
      N,
      [&](std::int64_t n) {
        const T* x = inp + n * C;
        const T* d = dout + n * C;
        const T m = mean[n];
        const T s = rstd[n];
        T dnorm_sum = 0;
        T dnorm_norm_sum = 0;
#pragma omp simd reduction(+ : dnorm_sum, dnorm_norm_sum)
        for (int c = 0; c < C; ++c) {
          const T dnorm = weight[c] * d[c];
          dnorm_sum += dnorm;
          dnorm_norm_sum += dnorm * (x[c] - m) * s;
        }
        const T dnorm_mean = dnorm_sum / static_cast<T>(C);
        const T dnorm_norm_mean = dnorm_norm_sum / static_cast<T>(C);
        T* di = dinp + n * C;
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          const T norm = (x[c] - m) * s;
          di[c] += (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
      },
      4 * C);
  detail::for_column_pieces(C, N, [&](std::int64_t c0, std::int64_t c1) {
    T dw[detail::kColumnPiece] = {};
    T db[detail::kColumnPiece] = {};
    const std::int64_t w = c1 - c0;
    for (std::int64_t n = 0; n < N; ++n) {
      const T* x = inp + n * C + c0;
      const T* d = dout + n * C + c0;
      const T m = mean[n];
      const T s = rstd[n];
#pragma omp simd
      for (std::int64_t c = 0; c < w; ++c) {
        dw[c] += (x[c] - m) * s * d[c];
        db[c] += d[c];
      }
    }
    for (std::int64_t c = 0; c < w; ++c) {
      dweight[c0 + c] += dw[c];
      dbias[c0 + c] += db[c];
    }
  });
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*, int, int);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*, const double*, int,
                                        int);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                        const float*, const float*, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const double*, const double*, int, int);

}  // namespace hsdp::model
