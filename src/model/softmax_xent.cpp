#include <cmath>
#include <cstdint>
#include <limits>

#include "hsdp/device/parallel.hpp"
#include "hsdp/device/vmath.hpp"
#include "hsdp/model/layers.hpp"

namespace hsdp::model {
namespace {

template <typename T>
T row_max(const T* row, int V) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (int i = 0; i < V; ++i) m = row[i] > m ? row[i] : m;
  return m;
}

}  // namespace

// Three passes over a row that stays in L2 (50304 floats = 200 KB): max, exp and sum, normalise.
template <typename T>
void softmax_xent_forward(T* probs, T* losses, const T* logits, const std::int32_t* targets, int N, int V, int Vp) {
  device::parallel_for(
      N,
      [&](std::int64_t n) {
        const T* row = logits + n * Vp;
        T* p = probs + n * Vp;
        const T target_logit = row[targets[n]];  // read before p (which may alias row) is written
        const T m = row_max(row, V);
        T sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < V; ++i) {
          p[i] = device::vexp<T>(row[i] - m);
          sum += p[i];
        }
        const T inv_sum = T(1) / sum;
#pragma omp simd
        for (int i = 0; i < V; ++i) p[i] *= inv_sum;
        losses[n] = std::log(sum) - (target_logit - m);
      },
      V);
}

template <typename T>
void softmax_xent_loss(T* losses, const T* logits, const std::int32_t* targets, int N, int V, int Vp) {
  device::parallel_for(
      N,
      [&](std::int64_t n) {
        const T* row = logits + n * Vp;
        const T m = row_max(row, V);
        T sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < V; ++i) sum += device::vexp<T>(row[i] - m);
        losses[n] = std::log(sum) - (row[targets[n]] - m);
      },
      V);
}

template <typename T>
void softmax_xent_backward(T* dlogits, const T* probs, const std::int32_t* targets, T dloss_per_row, int N, int V,
                           int Vp) {
  device::parallel_for(
      N,
      [&](std::int64_t n) {
        const T* p = probs + n * Vp;
        T* d = dlogits + n * Vp;
#pragma omp simd
        for (int i = 0; i < V; ++i) d[i] = p[i] * dloss_per_row;
        d[targets[n]] -= dloss_per_row;
      },
      V);
}

template void softmax_xent_forward<float>(float*, float*, const float*, const std::int32_t*, int, int, int);
template void softmax_xent_forward<double>(double*, double*, const double*, const std::int32_t*, int, int, int);
template void softmax_xent_loss<float>(float*, const float*, const std::int32_t*, int, int, int);
template void softmax_xent_loss<double>(double*, const double*, const std::int32_t*, int, int, int);
template void softmax_xent_backward<float>(float*, const float*, const std::int32_t*, float, int, int, int);
template void softmax_xent_backward<double>(double*, const double*, const std::int32_t*, double, int, int, int);

}  // namespace hsdp::model
