#include "hsdp/model/llama_layers.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "hsdp/device/parallel.hpp"

namespace hsdp::model {

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, double eps) {
  device::parallel_for(
      N,
      [&](std::int64_t n) {
        const T* x = inp + n * C;
        T sq = 0;
        for (int c = 0; c < C; ++c) sq += x[c] * x[c];
        const T s = T(1) / std::sqrt(sq / static_cast<T>(C) + static_cast<T>(eps));
        T* o = out + n * C;
        for (int c = 0; c < C; ++c) o[c] = x[c] * s * weight[c];
        rstd[n] = s;
      },
      2 * C);
}

// d x_j = r (w_j dy_j - x_j r^2 mean_c(w_c dy_c x_c)), d w_c = sum_n dy_c x_c r.
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int N, int C) {
  device::parallel_for(
      N,
      [&](std::int64_t n) {
        const T* x = inp + n * C;
        const T* d = dout + n * C;
        const T s = rstd[n];
        T dot = 0;
        for (int c = 0; c < C; ++c) dot += weight[c] * d[c] * x[c];
        const T k = s * s * dot / static_cast<T>(C);
        T* di = dinp + n * C;
        for (int c = 0; c < C; ++c) di[c] += s * (weight[c] * d[c] - x[c] * k);
      },
      3 * C);
  // Each weight's gradient summed over the rows in row order, by one thread (deterministic).
  device::parallel_for(
      C,
      [&](std::int64_t c) {
        T sum = 0;
        for (std::int64_t n = 0; n < N; ++n) sum += dout[n * C + c] * inp[n * C + c] * rstd[n];
        dweight[c] += sum;
      },
      N);
}

namespace {

// Turns the pairs (i, i + hs/2) of every head of every row by sign * pos * inv_freq[i].
template <typename T>
void rotate(T* x, int B, int T_, int H, int hs, double theta, int offset, double sign) {
  const int half = hs / 2;
  std::vector<double> inv_freq(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) inv_freq[static_cast<std::size_t>(i)] = std::pow(theta, -2.0 * i / hs);
  device::parallel_for(
      static_cast<std::int64_t>(B) * T_,
      [&](std::int64_t row) {
        const double pos = static_cast<double>(row % T_ + offset);
        T* r = x + row * static_cast<std::int64_t>(H) * hs;
        for (int i = 0; i < half; ++i) {
          const double angle = sign * pos * inv_freq[static_cast<std::size_t>(i)];
          const T c = static_cast<T>(std::cos(angle)), s = static_cast<T>(std::sin(angle));
          for (int h = 0; h < H; ++h) {
            T* head = r + static_cast<std::int64_t>(h) * hs;
            const T a = head[i], b = head[i + half];
            head[i] = a * c - b * s;
            head[i + half] = b * c + a * s;
          }
        }
      },
      static_cast<std::int64_t>(H) * hs * 4);
}

}  // namespace

template <typename T>
void rope_forward(T* x, int B, int T_, int H, int hs, double theta, int offset) {
  rotate(x, B, T_, H, hs, theta, offset, 1.0);
}

// A rotation's transpose is the rotation by the opposite angle.
template <typename T>
void rope_backward(T* dx, int B, int T_, int H, int hs, double theta, int offset) {
  rotate(dx, B, T_, H, hs, theta, offset, -1.0);
}

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, std::size_t n) {
  device::parallel_for(
      static_cast<std::int64_t>(n),
      [&](std::int64_t i) {
        const T g = gate[i];
        out[i] = g / (T(1) + std::exp(-g)) * up[i];
      },
      8);
}

// silu(g) = g sigmoid(g); silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, std::size_t n) {
  device::parallel_for(
      static_cast<std::int64_t>(n),
      [&](std::int64_t i) {
        const T g = gate[i];
        const T sig = T(1) / (T(1) + std::exp(-g));
        dgate[i] += dout[i] * up[i] * sig * (T(1) + g * (T(1) - sig));
        dup[i] += dout[i] * g * sig;
      },
      12);
}

namespace {

// One query row over keys and values 0..t (k_j at k + j * stride, v_j likewise): the scaled scores, their softmax into
// a[0..t] and the weighted values into o[hs]. The forward's every row and the decoder's one row run this code.
template <typename T>
void attend_row(T* o, T* a, const T* qr, const T* k, const T* v, std::int64_t stride, std::int64_t t, int hs, T scale) {
  T max_score = -std::numeric_limits<T>::infinity();
  for (std::int64_t j = 0; j <= t; ++j) {
    const T* kr = k + j * stride;
    T dot = 0;
    for (int i = 0; i < hs; ++i) dot += qr[i] * kr[i];
    a[j] = dot * scale;
    max_score = a[j] > max_score ? a[j] : max_score;
  }
  T sum = 0;
  for (std::int64_t j = 0; j <= t; ++j) {
    a[j] = std::exp(a[j] - max_score);
    sum += a[j];
  }
  for (std::int64_t j = 0; j <= t; ++j) a[j] /= sum;
  for (int i = 0; i < hs; ++i) o[i] = T(0);
  for (std::int64_t j = 0; j <= t; ++j) {
    const T* vr = v + j * stride;
    for (int i = 0; i < hs; ++i) o[i] += a[j] * vr[i];
  }
}

}  // namespace

template <typename T>
void gqa_attention_forward(T* out, T* att, const T* q, const T* k, const T* v, int B, int T_, int NH, int NKV,
                           int hs) {
  const int group = NH / NKV;
  const std::int64_t qs = static_cast<std::int64_t>(NH) * hs, ks = static_cast<std::int64_t>(NKV) * hs;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  device::parallel_for(
      static_cast<std::int64_t>(B) * NH * T_,
      [&](std::int64_t item) {
        const std::int64_t t = item % T_, h = (item / T_) % NH, b = item / (static_cast<std::int64_t>(T_) * NH);
        const std::int64_t kv_at = b * T_ * ks + h / group * hs;
        T* a = att + ((b * NH + h) * T_ + t) * T_;
        attend_row(out + (b * T_ + t) * qs + h * hs, a, q + (b * T_ + t) * qs + h * hs, k + kv_at, v + kv_at, ks, t,
                   hs, scale);
        for (std::int64_t j = t + 1; j < T_; ++j) a[j] = T(0);
      },
      static_cast<std::int64_t>(T_) * hs);
}

// One row of gqa_attention_forward, by the same code (attend_row) over the cache's rows k | v.
template <typename T>
void gqa_attention_decode_forward(T* out, T* att_row, const T* q, const T* kv, int t, int NH, int NKV, int hs) {
  const int group = NH / NKV;
  const std::int64_t ks = static_cast<std::int64_t>(NKV) * hs;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  device::parallel_for(
      NH,
      [&](std::int64_t h) {
        const T* k = kv + h / group * hs;
        attend_row(out + h * hs, att_row + h * (t + 1), q + h * hs, k, k + ks, 2 * ks, t, hs, scale);
      },
      static_cast<std::int64_t>(t + 1) * hs);
}

// Per (batch, key/value head): the group's query heads in order, each row t in order, so every dk and dv element is
// summed by one thread in a fixed order.
template <typename T>
void gqa_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* att,
                            int B, int T_, int NH, int NKV, int hs) {
  const int group = NH / NKV;
  const std::int64_t qs = static_cast<std::int64_t>(NH) * hs, ks = static_cast<std::int64_t>(NKV) * hs;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  device::parallel_for(
      static_cast<std::int64_t>(B) * NKV,
      [&](std::int64_t item) {
        const std::int64_t kvh = item % NKV, b = item / NKV;
        std::vector<T> datt(static_cast<std::size_t>(T_));
        for (std::int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
          for (std::int64_t t = 0; t < T_; ++t) {
            const T* a = att + ((b * NH + h) * T_ + t) * T_;
            const T* d = dout + (b * T_ + t) * qs + h * hs;
            // d att_j = dout . v_j; dv_j += att_j dout
            T dot_sum = 0;
            for (std::int64_t j = 0; j <= t; ++j) {
              const T* vr = v + (b * T_ + j) * ks + kvh * hs;
              T* dvr = dv + (b * T_ + j) * ks + kvh * hs;
              T dd = 0;
              for (int i = 0; i < hs; ++i) {
                dd += d[i] * vr[i];
                dvr[i] += a[j] * d[i];
              }
              datt[static_cast<std::size_t>(j)] = dd;
              dot_sum += a[j] * dd;
            }
            // softmax: d score_j = att_j (d att_j - sum_l att_l d att_l); score = scale q . k_j
            const T* qr = q + (b * T_ + t) * qs + h * hs;
            T* dqr = dq + (b * T_ + t) * qs + h * hs;
            for (std::int64_t j = 0; j <= t; ++j) {
              const T ds = a[j] * (datt[static_cast<std::size_t>(j)] - dot_sum) * scale;
              const T* kr = k + (b * T_ + j) * ks + kvh * hs;
              T* dkr = dk + (b * T_ + j) * ks + kvh * hs;
              for (int i = 0; i < hs; ++i) {
                dqr[i] += ds * kr[i];
                dkr[i] += ds * qr[i];
              }
            }
          }
        }
      },
      static_cast<std::int64_t>(T_) * T_ * hs * group);
}

#define HSDP_LLAMA_LAYERS(T)                                                                                        \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int, int, double);                                 \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int, int);                    \
  template void rope_forward<T>(T*, int, int, int, int, double, int);                                             \
  template void rope_backward<T>(T*, int, int, int, int, double, int);                                            \
  template void swiglu_forward<T>(T*, const T*, const T*, std::size_t);                                           \
  template void swiglu_backward<T>(T*, T*, const T*, const T*, const T*, std::size_t);                            \
  template void gqa_attention_forward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int, int);          \
  template void gqa_attention_decode_forward<T>(T*, T*, const T*, const T*, int, int, int, int);               \
  template void gqa_attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int, int, \
                                          int, int, int);
HSDP_LLAMA_LAYERS(float)
HSDP_LLAMA_LAYERS(double)
#undef HSDP_LLAMA_LAYERS

}  // namespace hsdp::model
