// The GEMM layers on the GPU (see layers.hpp): matmul and the tied LM head as cuBLASLt GEMMs (BlasLt), the bias
// gradient as a column-sum kernel (layers.cu).
#include <type_traits>
#include <utility>

#include "hsdp/device/cuda/blas.hpp"
#include "hsdp/model/cuda/layers.hpp"
#include "hsdp/model/gpu_activations.hpp"

namespace hsdp::model::cuda {
namespace {

using device::cuda::GemmArgs;

template <typename T>
constexpr DType dtype_v = std::is_same_v<T, float> ? DType::f32 : DType::bf16;

// The vocabulary is split into [0, Va) with Va = V rounded down to a multiple of 8, and the < 8 columns after it:
// with an odd V (GPT-2's 50257) the whole product would only get cuBLASLt's unvectorized (align1) kernels, about 6x
// slower; the aligned part gets tensor-core kernels and the tail is a sliver. Padded columns stay untouched.
int aligned_vocab(int V) {
  return V - V % 8;
}

// out[N, OC] = inp[N, IC] @ weight[OC, IC]^T + bias[OC]: the forward product, before any epilogue.
template <typename T>
GemmArgs forward_args(T* out, const T* inp, const T* weight, const T* bias, int N, int IC, int OC) {
  GemmArgs g;
  g.trans_b = true;
  g.m = N, g.n = OC, g.k = IC;
  g.a = inp, g.lda = IC;
  g.b = weight, g.ldb = IC;
  g.d = out, g.ldd = OC;
  g.ab_type = g.d_type = dtype_v<T>;
  g.bias = bias;
  return g;
}

// dinp[N, IC] = dout[N, OC] @ weight[OC, IC]: the data gradient's product, before any epilogue or accumulation.
template <typename T>
GemmArgs data_args(T* dinp, const T* dout, const T* weight, int N, int IC, int OC) {
  GemmArgs data;
  data.m = N, data.n = IC, data.k = OC;
  data.a = dout, data.lda = OC;
  data.b = weight, data.ldb = IC;
  data.d = dinp, data.ldd = IC;
  data.ab_type = data.d_type = dtype_v<T>;
  return data;
}

// dweight[OC, IC] += dout^T @ inp; dbias += column sums of dout (when not null).
template <typename T>
void weight_backward(BlasLt& blas, float* dweight, float* dbias, float* scratch, const T* dout, const T* inp, int N,
                     int IC, int OC, cudaStream_t stream) {
  GemmArgs wgrad;
  wgrad.trans_a = true;
  wgrad.m = OC, wgrad.n = IC, wgrad.k = N;
  wgrad.a = dout, wgrad.lda = OC;
  wgrad.b = inp, wgrad.ldb = IC;
  wgrad.d = dweight, wgrad.ldd = IC;
  wgrad.ab_type = dtype_v<T>;
  wgrad.d_type = DType::f32;
  wgrad.beta = 1.0f;
  blas.gemm(wgrad, stream);
  if (dbias != nullptr) bias_backward(dbias, scratch, dout, N, OC, stream);
}

}  // namespace

template <typename T>
void matmul_forward(BlasLt& blas, T* out, const T* inp, const T* weight, const T* bias, int N, int IC, int OC,
                    cudaStream_t stream) {
  blas.gemm(forward_args(out, inp, weight, bias, N, IC, OC), stream);
}

template <typename T>
void matmul_backward(BlasLt& blas, T* dinp, float* dweight, float* dbias, float* scratch, const T* dout, const T* inp,
                     const T* weight, int N, int IC, int OC, cudaStream_t stream, Grad dinp_mode) {
  GemmArgs data = data_args(dinp, dout, weight, N, IC, OC);  // dinp (+)= dout @ weight
  data.beta = dinp_mode == Grad::add ? 1.0f : 0.0f;
  blas.gemm(data, stream);
  weight_backward(blas, dweight, dbias, scratch, dout, inp, N, IC, OC, stream);
}

bool gelu_epilogue_supports(int width) {
  return width % kGpuGeluEpilogueMultiple == 0;
}

template <typename T>
void matmul_gelu_forward(BlasLt& blas, T* out, T* pre_gelu, const T* inp, const T* weight, const T* bias, int N, int IC,
                         int OC, cudaStream_t stream) {
  GemmArgs g = forward_args(out, inp, weight, bias, N, IC, OC);
  g.epilogue = device::cuda::Epilogue::gelu;
  g.aux = pre_gelu, g.ld_aux = OC;
  if (gelu_epilogue_supports(OC) && blas.try_gemm(g, stream)) return;
  // No fused kernel for this shape and type here (BlasLt::declined names it): the separate kernels.
  matmul_forward(blas, pre_gelu, inp, weight, bias, N, IC, OC, stream);
  gelu_forward(out, static_cast<const T*>(pre_gelu), static_cast<std::size_t>(N) * OC, stream);
}

template <typename T>
void matmul_residual_forward(BlasLt& blas, T* out, const T* residual, const T* inp, const T* weight, const T* bias,
                             int N, int IC, int OC, cudaStream_t stream) {
  GemmArgs g = forward_args(out, inp, weight, bias, N, IC, OC);
  g.c = residual;
  g.beta = 1.0f;
  blas.gemm(g, stream);
}

template <typename T>
void matmul_dgelu_backward(BlasLt& blas, T* dpre, float* dweight, float* dbias, float* scratch, const T* dout,
                           const T* inp, const T* pre_gelu, const T* weight, int N, int IC, int OC,
                           cudaStream_t stream) {
  GemmArgs data = data_args(dpre, dout, weight, N, IC, OC);  // dpre = (dout @ weight) * gelu'(pre_gelu)
  data.epilogue = device::cuda::Epilogue::dgelu;
  data.aux = const_cast<T*>(pre_gelu), data.ld_aux = IC;  // read only: the dgelu epilogue's input
  // No fused kernel here: the product into dpre, then the GELU's gradient in place.
  if (!gelu_epilogue_supports(IC) || !blas.try_gemm(data, stream)) {
    data.epilogue = device::cuda::Epilogue::none;
    data.aux = nullptr, data.ld_aux = 0;
    blas.gemm(data, stream);
    gelu_backward(dpre, pre_gelu, static_cast<const T*>(dpre), static_cast<std::size_t>(N) * IC, stream, Grad::write);
  }
  weight_backward(blas, dweight, dbias, scratch, dout, inp, N, IC, OC, stream);
}

template <typename T>
void lm_head_forward(BlasLt& blas, T* logits, const T* inp, const T* wte, int N, int C, int V, int Vp,
                     cudaStream_t stream) {
  const int Va = aligned_vocab(V);
  for (const auto& [begin, count] : {std::pair{0, Va}, std::pair{Va, V - Va}}) {
    GemmArgs g;  // logits[N, begin:begin+count] = inp @ wte[begin:begin+count]^T
    g.trans_b = true;
    g.m = N, g.n = count, g.k = C;
    g.a = inp, g.lda = C;
    g.b = wte + static_cast<std::size_t>(begin) * C, g.ldb = C;
    g.d = logits + begin, g.ldd = Vp;
    g.ab_type = g.d_type = dtype_v<T>;
    blas.gemm(g, stream);
  }
}

template <typename T>
void lm_head_backward(BlasLt& blas, T* dinp, float* dwte, const T* dlogits, const T* inp, const T* wte, int N, int C,
                      int V, int Vp, cudaStream_t stream) {
  const int Va = aligned_vocab(V);
  for (const auto& [begin, count] : {std::pair{0, Va}, std::pair{Va, V - Va}}) {
    GemmArgs data;  // dinp[N, C] += dlogits[N, part] @ wte[part, C]
    data.m = N, data.n = C, data.k = count;
    data.a = dlogits + begin, data.lda = Vp;
    data.b = wte + static_cast<std::size_t>(begin) * C, data.ldb = C;
    data.d = dinp, data.ldd = C;
    data.ab_type = data.d_type = dtype_v<T>;
    data.beta = 1.0f;
    blas.gemm(data, stream);
    GemmArgs wgrad;  // dwte[part, C] += dlogits[:, part]^T @ inp
    wgrad.trans_a = true;
    wgrad.m = count, wgrad.n = C, wgrad.k = N;
    wgrad.a = dlogits + begin, wgrad.lda = Vp;
    wgrad.b = inp, wgrad.ldb = C;
    wgrad.d = dwte + static_cast<std::size_t>(begin) * C, wgrad.ldd = C;
    wgrad.ab_type = dtype_v<T>;
    wgrad.d_type = DType::f32;
    wgrad.beta = 1.0f;
    blas.gemm(wgrad, stream);
  }
}

template void matmul_forward<float>(BlasLt&, float*, const float*, const float*, const float*, int, int, int,
                                    cudaStream_t);
template void matmul_forward<bf16_t>(BlasLt&, bf16_t*, const bf16_t*, const bf16_t*, const bf16_t*, int, int, int,
                                     cudaStream_t);
template void matmul_backward<float>(BlasLt&, float*, float*, float*, float*, const float*, const float*, const float*,
                                     int, int, int, cudaStream_t, Grad);
template void matmul_backward<bf16_t>(BlasLt&, bf16_t*, float*, float*, float*, const bf16_t*, const bf16_t*,
                                      const bf16_t*, int, int, int, cudaStream_t, Grad);
template void matmul_gelu_forward<float>(BlasLt&, float*, float*, const float*, const float*, const float*, int, int,
                                         int, cudaStream_t);
template void matmul_gelu_forward<bf16_t>(BlasLt&, bf16_t*, bf16_t*, const bf16_t*, const bf16_t*, const bf16_t*, int,
                                          int, int, cudaStream_t);
template void matmul_residual_forward<float>(BlasLt&, float*, const float*, const float*, const float*, const float*,
                                             int, int, int, cudaStream_t);
template void matmul_residual_forward<bf16_t>(BlasLt&, bf16_t*, const bf16_t*, const bf16_t*, const bf16_t*,
                                              const bf16_t*, int, int, int, cudaStream_t);
template void matmul_dgelu_backward<float>(BlasLt&, float*, float*, float*, float*, const float*, const float*,
                                           const float*, const float*, int, int, int, cudaStream_t);
template void matmul_dgelu_backward<bf16_t>(BlasLt&, bf16_t*, float*, float*, float*, const bf16_t*, const bf16_t*,
                                            const bf16_t*, const bf16_t*, int, int, int, cudaStream_t);
template void lm_head_forward<float>(BlasLt&, float*, const float*, const float*, int, int, int, int, cudaStream_t);
template void lm_head_forward<bf16_t>(BlasLt&, bf16_t*, const bf16_t*, const bf16_t*, int, int, int, int, cudaStream_t);
template void lm_head_backward<float>(BlasLt&, float*, float*, const float*, const float*, const float*, int, int, int,
                                      int, cudaStream_t);
template void lm_head_backward<bf16_t>(BlasLt&, bf16_t*, float*, const bf16_t*, const bf16_t*, const bf16_t*, int, int,
                                       int, int, cudaStream_t);

}  // namespace hsdp::model::cuda
