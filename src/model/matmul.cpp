#include <cstdint>

#include "hsdp/device/gemm.hpp"
#include "hsdp/device/parallel.hpp"
#include "hsdp/model/layers.hpp"
#include "kernel_util.hpp"

namespace hsdp::model {

using device::gemm;
using device::Op;

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int IC, int OC) {
  // The bias is laid down first and the GEMM adds onto it (beta = 1): no separate pass over `out`.
  if (bias != nullptr) {
    device::parallel_for(
        N,
        [&](std::int64_t n) {
          T* o = out + n * OC;
#pragma omp simd
          for (int c = 0; c < OC; ++c) o[c] = bias[c];
        },
        OC);
  }
  gemm<T>(Op::none, Op::transpose, N, OC, IC, T(1), inp, IC, weight, IC, bias != nullptr ? T(1) : T(0), out, OC);
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int IC,
                     int OC) {
  gemm<T>(Op::none, Op::none, N, IC, OC, T(1), dout, OC, weight, IC, T(1), dinp, IC);
  gemm<T>(Op::transpose, Op::none, OC, IC, N, T(1), dout, OC, inp, IC, T(1), dweight, IC);
  if (dbias == nullptr) return;
  detail::for_column_pieces(OC, N, [&](std::int64_t c0, std::int64_t c1) {
    T db[detail::kColumnPiece] = {};
    const std::int64_t w = c1 - c0;
    for (std::int64_t n = 0; n < N; ++n) {
      const T* d = dout + n * OC + c0;
#pragma omp simd
      for (std::int64_t c = 0; c < w; ++c) db[c] += d[c];
    }
    for (std::int64_t c = 0; c < w; ++c) dbias[c0 + c] += db[c];
  });
}

template <typename T>
void lm_head_forward(T* logits, const T* inp, const T* wte, int N, int C, int V, int Vp) {
  gemm<T>(Op::none, Op::transpose, N, V, C, T(1), inp, C, wte, C, T(0), logits, Vp);
}

template <typename T>
void lm_head_backward(T* dinp, T* dwte, const T* dlogits, const T* inp, const T* wte, int N, int C, int V,
                      int Vp) {
  gemm<T>(Op::none, Op::none, N, C, V, T(1), dlogits, Vp, wte, C, T(1), dinp, C);
  gemm<T>(Op::transpose, Op::none, V, C, N, T(1), dlogits, Vp, inp, C, T(1), dwte, C);
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int, int, int);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int, int, int);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*, const float*, int, int,
                                     int);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*, const double*, int,
                                      int, int);
template void lm_head_forward<float>(float*, const float*, const float*, int, int, int, int);
template void lm_head_forward<double>(double*, const double*, const double*, int, int, int, int);
template void lm_head_backward<float>(float*, float*, const float*, const float*, const float*, int, int, int, int);
template void lm_head_backward<double>(double*, double*, const double*, const double*, const double*, int, int, int,
                                       int);

}  // namespace hsdp::model
