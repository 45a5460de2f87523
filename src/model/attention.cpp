#include <cmath>
#include <cstdint>
#include <limits>

#include "hsdp/device/parallel.hpp"
#include "hsdp/device/vmath.hpp"
#include "hsdp/model/layers.hpp"

namespace hsdp::model {

namespace {

// One causal attention row of one head: a[j] = softmax_j(scale * q . k_j) for j in [0, t], then
// o = sum_j a[j] v_j. Key j starts at keys + j * stride, value j at values + j * stride. Both the full
// forward and the one-row decode run this code, so a cached decode repeats the forward's operations.
template <typename T>
inline void attend_row(T* o, T* a, const T* q, const T* keys, const T* values, std::int64_t stride, std::int64_t t,
                       int hs, T scale) {
  T max_score = -std::numeric_limits<T>::infinity();
  for (std::int64_t j = 0; j <= t; ++j) {
    const T* k = keys + j * stride;
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int i = 0; i < hs; ++i) dot += q[i] * k[i];
    a[j] = dot * scale;
    max_score = a[j] > max_score ? a[j] : max_score;
  }
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t j = 0; j <= t; ++j) {
    a[j] = device::vexp<T>(a[j] - max_score);
    sum += a[j];
  }
  const T inv_sum = T(1) / sum;
#pragma omp simd
  for (std::int64_t j = 0; j <= t; ++j) a[j] *= inv_sum;
#pragma omp simd
  for (int i = 0; i < hs; ++i) o[i] = T(0);
  for (std::int64_t j = 0; j <= t; ++j) {
    const T* v = values + j * stride;
    const T w = a[j];
#pragma omp simd
    for (int i = 0; i < hs; ++i) o[i] += w * v[i];
  }
}

}  // namespace

// Direct loops rather than GEMMs: causal rows need only j <= t, and at GPT-2 shapes attention is ~1% of
// the FLOPs of a step, while per-head GEMMs of 64 x 64 would be dominated by call overhead.
template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int C, int NH) {
  const int hs = C / NH;
  const std::int64_t C3 = 3 * std::int64_t{C};
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  const std::int64_t rows = std::int64_t{B} * NH * T_;
  device::parallel_for(
      rows,
      [&](std::int64_t row_index) {
        const std::int64_t t = row_index % T_;
        const std::int64_t h = (row_index / T_) % NH;
        const std::int64_t b = row_index / (std::int64_t{T_} * NH);
        const T* base = qkv + b * T_ * C3 + h * hs;
        T* a = att + row_index * T_;  // [b, h, t, :]
        attend_row(out + (b * T_ + t) * C + h * hs, a, base + t * C3, base + C, base + 2 * C, C3, t, hs, scale);
        for (std::int64_t j = t + 1; j < T_; ++j) a[j] = T(0);
      },
      std::int64_t{T_} * hs);
}

template <typename T>
void attention_decode_forward(T* out, T* att_row, const T* q, const T* kv, int t, int C, int NH) {
  const int hs = C / NH;
  const std::int64_t C2 = 2 * std::int64_t{C};
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  const std::int64_t positions = std::int64_t{t} + 1;
  device::parallel_for(
      NH,
      [&](std::int64_t h) {
        attend_row(out + h * hs, att_row + h * positions, q + h * hs, kv + h * hs, kv + C + h * hs, C2, t, hs, scale);
      },
      positions * hs);
}

template <typename T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int T_, int C,
                        int NH) {
  const int hs = C / NH;
  const std::int64_t C3 = 3 * std::int64_t{C};
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  // One task per (b, h): dk and dv rows gather contributions from every later query t, added in t order.
  device::parallel_for(
      std::int64_t{B} * NH,
      [&](std::int64_t bh) {
        const std::int64_t h = bh % NH;
        const std::int64_t b = bh / NH;
        const T* base = qkv + b * T_ * C3 + h * hs;
        T* dbase = dqkv + b * T_ * C3 + h * hs;
        T* datt = scratch + bh * T_;
        for (std::int64_t t = 0; t < T_; ++t) {
          const T* a = att + (bh * T_ + t) * T_;
          const T* d = dout + (b * T_ + t) * C + h * hs;
          const T* q = base + t * C3;
          T* dq = dbase + t * C3;
          // out_t = sum_j a_j v_j
          for (std::int64_t j = 0; j <= t; ++j) {
            const T* v = base + j * C3 + 2 * C;
            T* dv = dbase + j * C3 + 2 * C;
            const T w = a[j];
            T dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int i = 0; i < hs; ++i) {
              dot += d[i] * v[i];
              dv[i] += w * d[i];
            }
            datt[j] = dot;
          }
          // softmax: dscore_j = a_j (datt_j - sum_k a_k datt_k); score_j = scale * q . k_j
          T weighted = 0;
#pragma omp simd reduction(+ : weighted)
          for (std::int64_t j = 0; j <= t; ++j) weighted += a[j] * datt[j];
          for (std::int64_t j = 0; j <= t; ++j) {
            const T dscore = a[j] * (datt[j] - weighted) * scale;
            const T* k = base + j * C3 + C;
            T* dk = dbase + j * C3 + C;
#pragma omp simd
            for (int i = 0; i < hs; ++i) {
              dq[i] += dscore * k[i];
              dk[i] += dscore * q[i];
            }
          }
        }
      },
      std::int64_t{T_} * T_ * hs);
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int);
template void attention_decode_forward<float>(float*, float*, const float*, const float*, int, int, int);
template void attention_decode_forward<double>(double*, double*, const double*, const double*, int, int, int);
template void attention_backward<float>(float*, float*, const float*, const float*, const float*, int, int, int,
                                        int);
template void attention_backward<double>(double*, double*, const double*, const double*, const double*, int, int,
                                         int, int);

}  // namespace hsdp::model
