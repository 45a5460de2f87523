// Causal self-attention on the GPU (see layers.hpp): cuBLASLt GEMMs for the four products per direction, and two
// row kernels (causal softmax forward, and its backward), one warp per row of a head's T x T matrix.
#include <cmath>
#include <string>
#include <type_traits>

#include "hsdp/core/error.hpp"
#include "hsdp/device/cuda/blas.hpp"
#include "hsdp/device/cuda/kernel_util.cuh"
#include "hsdp/model/cuda/layers.hpp"
#include "hsdp/model/gpu_activations.hpp"

namespace hsdp::model::cuda {
namespace {

namespace detail = hsdp::device::cuda::detail;
using detail::kWarp;
using detail::load;
using detail::store;
using device::cuda::check_launch;
using device::cuda::GemmArgs;

constexpr int kWarpsPerBlock = 8;

template <typename T>
constexpr DType storage_type = std::is_same_v<T, float> ? DType::f32 : DType::bf16;

// rows = NH * T rows of T_ scores each; row r is query t = r % T_ of its head.
template <typename T>
__global__ void causal_softmax_kernel(T* att, const T* scores, int rows, int T_, float scale) {
  const int row = blockIdx.x * kWarpsPerBlock + static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  if (row >= rows) return;
  const int t = row % T_;
  const T* s = scores + static_cast<std::size_t>(row) * T_;
  T* a = att + static_cast<std::size_t>(row) * T_;
  float m = -INFINITY;
  for (int j = lane; j <= t; j += kWarp) m = fmaxf(m, load(s + j) * scale);
  m = detail::warp_max(m);
  float sum = 0.0f;
  for (int j = lane; j <= t; j += kWarp) sum += expf(load(s + j) * scale - m);
  sum = detail::warp_sum(sum);
  const float inv = 1.0f / sum;
  for (int j = lane; j < T_; j += kWarp) store(a + j, j <= t ? expf(load(s + j) * scale - m) * inv : 0.0f);
}

// dS = att (dA - sum_j att dA) * scale below and on the diagonal, 0 above.
template <typename T>
__global__ void causal_softmax_backward_kernel(T* dscores, const T* datt, const T* att, int rows, int T_, float scale) {
  const int row = blockIdx.x * kWarpsPerBlock + static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  if (row >= rows) return;
  const int t = row % T_;
  const std::size_t at = static_cast<std::size_t>(row) * T_;
  float w = 0.0f;
  for (int j = lane; j <= t; j += kWarp) w += load(att + at + j) * load(datt + at + j);
  w = detail::warp_sum(w);
  for (int j = lane; j < T_; j += kWarp) {
    store(dscores + at + j, j <= t ? load(att + at + j) * (load(datt + at + j) - w) * scale : 0.0f);
  }
}

// One head-batched GEMM over strided views: D_h = op(A_h) op(B_h) (+ D_h when accumulate).
struct View {
  const void* p;
  int ld;
  std::int64_t stride;
};
void batched(BlasLt& blas, bool trans_a, bool trans_b, int m, int n, int k, View a, View b, void* d, int ldd,
             std::int64_t stride_d, DType ab_type, DType d_type, bool accumulate, int heads, cudaStream_t stream) {
  GemmArgs g;
  g.trans_a = trans_a, g.trans_b = trans_b;
  g.m = m, g.n = n, g.k = k;
  g.a = a.p, g.lda = a.ld, g.stride_a = a.stride;
  g.b = b.p, g.ldb = b.ld, g.stride_b = b.stride;
  g.d = d, g.ldd = ldd, g.stride_d = stride_d;
  g.ab_type = ab_type, g.d_type = d_type;
  g.beta = accumulate ? 1.0f : 0.0f;
  g.batch = heads;
  blas.gemm(g, stream);
}

void check_shape(int B, int T_, int C, int NH, int NKV) {
  if (B < 1 || T_ < 1 || NH < 1 || NKV < 1 || C % NH != 0 || NH % NKV != 0) {
    throw_internal("attention: bad shape B=" + std::to_string(B) + " T=" + std::to_string(T_) +
                   " C=" + std::to_string(C) + " NH=" + std::to_string(NH) + " NKV=" + std::to_string(NKV));
  }
}

}  // namespace

std::size_t attention_scratch_bytes(int T_, int NH) {
  // The scores (or their gradient) and the softmax gradient, in the storage type (at most 4 bytes each).
  return gpu_attention_scratch_bytes(T_, NH);
}

// Query head h = kvh G + g reads key/value head kvh; for each g the NKV heads kvh = 0..NKV-1 are one batch: Q_h at
// column h hs (batch stride G hs), K and V at NH hs + kvh hs and (NH + NKV) hs + kvh hs (batch stride hs), the scores
// and probabilities of head h at h T^2 (batch stride G T^2), out_h at column h hs of a row of NH hs.
template <typename T>
void gqa_attention_forward(BlasLt& blas, T* out, T* att, const T* qkv, void* scratch, int B, int T_, int NH, int NKV,
                           int hs, cudaStream_t stream) {
  check_shape(B, T_, NH * hs, NH, NKV);
  const int G = NH / NKV, C = NH * hs, K = NKV * hs, RS = C + 2 * K;
  const DType t = storage_type<T>;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::int64_t TT = static_cast<std::int64_t>(T_) * T_;
  auto* scores = static_cast<T*>(scratch);
  const int rows = NH * T_;
  for (int b = 0; b < B; ++b) {
    const T* q = qkv + static_cast<std::size_t>(b) * T_ * RS;
    const T* k = q + C;
    const T* v = k + K;
    T* att_b = att + static_cast<std::size_t>(b) * NH * TT;
    T* out_b = out + static_cast<std::size_t>(b) * T_ * C;
    for (int g = 0; g < G; ++g) {  // S_h[T, T] = Q_h K_kvh^T
      batched(blas, false, true, T_, T_, hs, {q + g * hs, RS, std::int64_t{G} * hs}, {k, RS, hs}, scores + g * TT, T_,
              G * TT, t, t, false, NKV, stream);
    }
    causal_softmax_kernel<<<(rows + kWarpsPerBlock - 1) / kWarpsPerBlock, kWarpsPerBlock * kWarp, 0, stream>>>(
        att_b, scores, rows, T_, scale);
    check_launch("causal_softmax_kernel");
    for (int g = 0; g < G; ++g) {  // out_h[T, hs] = att_h V_kvh
      batched(blas, false, false, T_, hs, T_, {att_b + g * TT, T_, G * TT}, {v, RS, hs}, out_b + g * hs, C,
              std::int64_t{G} * hs, t, t, false, NKV, stream);
    }
  }
}

template <typename T>
void gqa_attention_backward(BlasLt& blas, T* dqkv, void* scratch, const T* dout, const T* qkv, const T* att, int B,
                            int T_, int NH, int NKV, int hs, cudaStream_t stream) {
  check_shape(B, T_, NH * hs, NH, NKV);
  const int G = NH / NKV, C = NH * hs, K = NKV * hs, RS = C + 2 * K;
  const DType t = storage_type<T>;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::int64_t TT = static_cast<std::int64_t>(T_) * T_;
  const std::int64_t Ghs = std::int64_t{G} * hs;
  auto* datt = static_cast<T*>(scratch);
  T* dscores = datt + NH * TT;
  const int rows = NH * T_;
  for (int b = 0; b < B; ++b) {
    const T* q = qkv + static_cast<std::size_t>(b) * T_ * RS;
    const T* k = q + C;
    const T* v = k + K;
    T* dq = dqkv + static_cast<std::size_t>(b) * T_ * RS;
    T* dk = dq + C;
    T* dv = dk + K;
    const T* att_b = att + static_cast<std::size_t>(b) * NH * TT;
    const T* dout_b = dout + static_cast<std::size_t>(b) * T_ * C;
    for (int g = 0; g < G; ++g) {  // dA_h[T, T] = dout_h V_kvh^T
      batched(blas, false, true, T_, T_, hs, {dout_b + g * hs, C, Ghs}, {v, RS, hs}, datt + g * TT, T_, G * TT, t, t,
              false, NKV, stream);
    }
    causal_softmax_backward_kernel<<<(rows + kWarpsPerBlock - 1) / kWarpsPerBlock, kWarpsPerBlock * kWarp, 0, stream>>>(
        dscores, datt, att_b, rows, T_, scale);
    check_launch("causal_softmax_backward_kernel");
    for (int g = 0; g < G; ++g) {
      // dV_kvh += att_h^T dout_h; dQ_h += dS_h K_kvh; dK_kvh += dS_h^T Q_h
      batched(blas, true, false, T_, hs, T_, {att_b + g * TT, T_, G * TT}, {dout_b + g * hs, C, Ghs}, dv, RS, hs, t, t,
              true, NKV, stream);
      batched(blas, false, false, T_, hs, T_, {dscores + g * TT, T_, G * TT}, {k, RS, hs}, dq + g * hs, RS, Ghs, t, t,
              true, NKV, stream);
      batched(blas, true, false, T_, hs, T_, {dscores + g * TT, T_, G * TT}, {q + g * hs, RS, Ghs}, dk, RS, hs, t, t,
              true, NKV, stream);
    }
  }
}

// GPT-2's: q | k | v of C each, every head its own key/value head (G = 1: the same GEMM calls as before GQA).
template <typename T>
void attention_forward(BlasLt& blas, T* out, T* att, const T* qkv, void* scratch, int B, int T_, int C, int NH,
                       cudaStream_t stream) {
  check_shape(B, T_, C, NH, NH);
  gqa_attention_forward(blas, out, att, qkv, scratch, B, T_, NH, NH, C / NH, stream);
}

template <typename T>
void attention_backward(BlasLt& blas, T* dqkv, void* scratch, const T* dout, const T* qkv, const T* att, int B, int T_,
                        int C, int NH, cudaStream_t stream) {
  check_shape(B, T_, C, NH, NH);
  gqa_attention_backward(blas, dqkv, scratch, dout, qkv, att, B, T_, NH, NH, C / NH, stream);
}

template void attention_forward<float>(BlasLt&, float*, float*, const float*, void*, int, int, int, int, cudaStream_t);
template void attention_forward<bf16_t>(BlasLt&, bf16_t*, bf16_t*, const bf16_t*, void*, int, int, int, int,
                                        cudaStream_t);
template void attention_backward<float>(BlasLt&, float*, void*, const float*, const float*, const float*, int, int, int,
                                        int, cudaStream_t);
template void attention_backward<bf16_t>(BlasLt&, bf16_t*, void*, const bf16_t*, const bf16_t*, const bf16_t*, int, int,
                                         int, int, cudaStream_t);
template void gqa_attention_forward<float>(BlasLt&, float*, float*, const float*, void*, int, int, int, int, int,
                                           cudaStream_t);
template void gqa_attention_forward<bf16_t>(BlasLt&, bf16_t*, bf16_t*, const bf16_t*, void*, int, int, int, int, int,
                                            cudaStream_t);
template void gqa_attention_backward<float>(BlasLt&, float*, void*, const float*, const float*, const float*, int, int,
                                            int, int, int, cudaStream_t);
template void gqa_attention_backward<bf16_t>(BlasLt&, bf16_t*, void*, const bf16_t*, const bf16_t*, const bf16_t*, int,
                                             int, int, int, int, cudaStream_t);

}  // namespace hsdp::model::cuda
