#pragma once
// The GPT-2 layers on the GPU: the same *_forward / *_backward pairs, layouts and contracts as
// hsdp/model/layers.hpp (read that first), as kernels enqueued on a stream. Every pointer is device memory.
//
// Types: T is the storage type of activations and of the compute copy of the parameters, float or bf16_t;
// arithmetic is fp32 throughout. Parameter gradients (dweight, dbias, dwte, dwpe) are always fp32, so they
// accumulate over micro-batches without bf16 rounding. Layer-norm statistics and losses are fp32.
//
// Contract, as on the CPU: every *_backward ADDS into what it produces (callers zero first), except
// softmax_xent_backward / softmax_xent_forward_backward, which write d-logits.
// Determinism: no floating-point atomics; every sum has a fixed order, so a run repeats bit for bit.
// The GEMM layers (matmul, the tied LM head, attention; at the end) run their products through cuBLASLt
// (hsdp/device/cuda/blas.hpp): T = bf16_t runs bf16 x bf16 with fp32 accumulation on tensor cores, T = float
// true fp32 (no TF32), for tests against the CPU; weight gradients are fp32 either way.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "hsdp/core/dtype.hpp"
#include "hsdp/device/cuda/blas.hpp"

namespace hsdp::model::cuda {

// What a backward does with the activation gradient it produces: adds into it (the contract above), or writes it
// (when it is that buffer's first writer in the step's order: no zero-fill pass before it, one read fewer).
enum class Grad { add, write };

// out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]; wpe (and dwpe) null: no position table (a Llama's embedding).
template <typename T>
void encoder_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, int B, int T_, int C,
                     cudaStream_t stream);
// Rows of a repeated token are added in row order (bit-identical to the CPU in fp32).
template <typename T>
void encoder_backward(float* dwte, float* dwpe, const T* dout, const std::int32_t* tokens, int B, int T_, int C,
                      cudaStream_t stream);

template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias, int N, int C,
                       cudaStream_t stream);
// scratch: column_sum_scratch_floats(C, 2) floats of device memory.
template <typename T>
void layernorm_backward(T* dinp, float* dweight, float* dbias, float* scratch, const T* dout, const T* inp,
                        const T* weight, const float* mean, const float* rstd, int N, int C, cudaStream_t stream);

// ---- the Llama family's layers (hsdp/model/llama_layers.hpp) ----
// RMSNorm: out = x * rstd * weight, rstd [N] (fp32) kept; backward adds into dinp and dweight (dweight's column
// sums in a fixed order; scratch: column_sum_scratch_floats(C, 1) floats).
template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int N, int C, float eps, cudaStream_t stream);
template <typename T>
void rmsnorm_backward(T* dinp, float* dweight, float* scratch, const T* dout, const T* inp, const T* weight,
                      const float* rstd, int N, int C, cudaStream_t stream);
// RoPE in place on H heads of hs channels at the start of each row of x (row n = position n % T_ of its sequence;
// rows row_stride elements apart: q, k inside a q | k | v row), the rotate-half layout; backward turns the gradient
// back. The angles are computed in double, as on the CPU, and rounded to fp32.
template <typename T>
void rope_forward(T* x, int B, int T_, int H, int hs, int row_stride, double theta, cudaStream_t stream);
template <typename T>
void rope_backward(T* dx, int B, int T_, int H, int hs, int row_stride, double theta, cudaStream_t stream);
// SwiGLU: out = silu(gate) * up; backward adds into dgate and dup.
template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, std::size_t n, cudaStream_t stream);
template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, std::size_t n, cudaStream_t stream,
                     Grad mode = Grad::add);

// dbias[c] += sum over rows n of dout[n, c] (the bias gradient of a matmul); scratch: column_sum_scratch_floats(C, 1).
template <typename T>
void bias_backward(float* dbias, float* scratch, const T* dout, int N, int C, cudaStream_t stream);
// Scratch floats of a column sum of `quantities` values per column over C columns.
std::size_t column_sum_scratch_floats(int C, int quantities);

// GELU, tanh approximation (x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)); backward adds into dinp.
template <typename T>
void gelu_forward(T* out, const T* inp, std::size_t n, cudaStream_t stream);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n, cudaStream_t stream, Grad mode = Grad::add);

template <typename T>
void residual_forward(T* out, const T* inp1, const T* inp2, std::size_t n, cudaStream_t stream);
template <typename T>
void residual_backward(T* dinp1, T* dinp2, const T* dout, std::size_t n, cudaStream_t stream);

// Fused softmax + cross-entropy over the first V of each row's Vp logits (columns V..Vp-1 untouched);
// probs may alias logits.
template <typename T>
void softmax_xent_forward(T* probs, float* losses, const T* logits, const std::int32_t* targets, int N, int V, int Vp,
                          cudaStream_t stream);
// dlogits[n, :V] = dloss_per_row * (probs[n, :V] - onehot(targets[n])); dlogits may alias probs.
template <typename T>
void softmax_xent_backward(T* dlogits, const T* probs, const std::int32_t* targets, float dloss_per_row, int N, int V,
                           int Vp, cudaStream_t stream);
// Both in one pass over the logits (what a training step needs): losses, and d-logits written over the logits
// (dlogits may alias logits); the probabilities are never stored.
template <typename T>
void softmax_xent_forward_backward(T* dlogits, float* losses, const T* logits, const std::int32_t* targets,
                                   float dloss_per_row, int N, int V, int Vp, cudaStream_t stream);

// *loss = the mean of losses[0, N) (device memory), summed in double in a fixed order: one scalar the host reads
// once, instead of N floats.
void mean_loss(double* loss, const float* losses, int N, cudaStream_t stream);

// Element type conversions (the bf16 compute copy of fp32 parameters, and back for checks).
void convert(bf16_t* out, const float* in, std::size_t n, cudaStream_t stream);
void convert(float* out, const bf16_t* in, std::size_t n, cudaStream_t stream);

// ---- the GEMM layers ----
using device::cuda::BlasLt;

// out[N, OC] = inp[N, IC] @ weight[OC, IC]^T + bias[OC] (bias may be null).
template <typename T>
void matmul_forward(BlasLt& blas, T* out, const T* inp, const T* weight, const T* bias, int N, int IC, int OC,
                    cudaStream_t stream);
// dinp += dout @ weight (Grad::write: dinp = ...); dweight += dout^T @ inp; dbias += column sums of dout (when dbias is
// not null; scratch: column_sum_scratch_floats(OC, 1) floats).
template <typename T>
void matmul_backward(BlasLt& blas, T* dinp, float* dweight, float* dbias, float* scratch, const T* dout, const T* inp,
                     const T* weight, int N, int IC, int OC, cudaStream_t stream, Grad dinp_mode = Grad::add);

// ---- the same layers with their neighbours in the GEMM's epilogue (model.gemm_epilogue=fused; BlasLt's Epilogue):
// one pass over the output instead of two or three. cuBLASLt rounds once from fp32 where the separate kernels round
// the product to T first, so bf16 results differ from the separate path's by a rounding.
// The GELU epilogues need the GELU's width % 8 == 0 (OC of matmul_gelu_forward, IC of matmul_dgelu_backward:
// cuBLASLt's rule for the kept GELU input, kGpuGeluEpilogueMultiple, the arena's rule too,
// hsdp/model/gpu_activations.hpp); other widths, and shapes cuBLASLt declines, take the separate kernels.
bool gelu_epilogue_supports(int width);
// out = gelu(inp @ weight^T + bias), pre_gelu = the GELU's input (matmul_forward, then gelu_forward).
template <typename T>
void matmul_gelu_forward(BlasLt& blas, T* out, T* pre_gelu, const T* inp, const T* weight, const T* bias, int N, int IC,
                         int OC, cudaStream_t stream);
// out = residual + inp @ weight^T + bias (matmul_forward, then residual_forward); out must not alias residual's
// rows other than its own (out == residual is allowed).
template <typename T>
void matmul_residual_forward(BlasLt& blas, T* out, const T* residual, const T* inp, const T* weight, const T* bias,
                             int N, int IC, int OC, cudaStream_t stream);
// matmul_backward of a product whose input went through a GELU (inp = gelu(pre_gelu)): dpre = (dout @ weight) *
// gelu'(pre_gelu) written (matmul_backward with Grad::write, then gelu_backward with Grad::write, without the
// intermediate gradient); dweight += dout^T @ inp; dbias += column sums of dout (scratch as matmul_backward's).
template <typename T>
void matmul_dgelu_backward(BlasLt& blas, T* dpre, float* dweight, float* dbias, float* scratch, const T* dout,
                           const T* inp, const T* pre_gelu, const T* weight, int N, int IC, int OC,
                           cudaStream_t stream);

// logits[N, :V] (row stride Vp) = inp[N, C] @ wte[:V]^T; padded columns are never written.
template <typename T>
void lm_head_forward(BlasLt& blas, T* logits, const T* inp, const T* wte, int N, int C, int V, int Vp,
                     cudaStream_t stream);
// dinp += dlogits[:, :V] @ wte[:V]; dwte[:V] += dlogits[:, :V]^T @ inp; padded rows of dwte get nothing.
template <typename T>
void lm_head_backward(BlasLt& blas, T* dinp, float* dwte, const T* dlogits, const T* inp, const T* wte, int N, int C,
                      int V, int Vp, cudaStream_t stream);

// Causal self-attention over qkv [B, T, 3C] (q, k, v of head h at columns h*hs, C + h*hs, 2C + h*hs, hs = C / NH);
// att [B, NH, T, T] keeps the probabilities (zeros above the diagonal); out [B, T, C]. Per sequence, batched over
// the heads through strided views of qkv and out (no permutation copies), with cuBLASLt GEMMs:
//   S = Q K^T, att = causal softmax(S / sqrt(hs)), out_h = att V;
//   backward: dA = dout_h V^T, dS = att (dA - rowsum(att dA)) / sqrt(hs), dV += att^T dout_h,
//   dQ += dS K, dK += dS^T Q  (dqkv is added into, as every backward).
// S and dA are stored in T, as att is (bf16 for a bf16 model, as llm.c does: half the bytes of fp32 scores, which
// dominate attention's memory traffic), accumulated in fp32 by the GEMMs; the softmax arithmetic is fp32.
// The softmax kernels take one warp per row with fixed-order sums, so results repeat bit for bit.
// scratch: attention_scratch_bytes(T, NH) bytes of device memory (one sequence's scores and their gradients,
// 8 bytes per score: enough for T = float).
std::size_t attention_scratch_bytes(int T_, int NH);
template <typename T>
void attention_forward(BlasLt& blas, T* out, T* att, const T* qkv, void* scratch, int B, int T_, int C, int NH,
                       cudaStream_t stream);
template <typename T>
void attention_backward(BlasLt& blas, T* dqkv, void* scratch, const T* dout, const T* qkv, const T* att, int B, int T_,
                        int C, int NH, cudaStream_t stream);
// Grouped-query attention (a Llama's): NH query heads over NKV key/value heads of hs channels; rows of qkv are
// q (NH hs) | k (NKV hs) | v (NKV hs), query head h reads key/value head h / (NH / NKV); out [B, T, NH hs]. The same
// GEMMs and kernels as attention_forward (which is the case NKV = NH), batched per position in the group: query
// heads g, g + G, ... share a batch (G = NH / NKV); the gradients of a key/value head add its G query heads in
// order g = 0..G-1, so results repeat bit for bit.
template <typename T>
void gqa_attention_forward(BlasLt& blas, T* out, T* att, const T* qkv, void* scratch, int B, int T_, int NH, int NKV,
                           int hs, cudaStream_t stream);
template <typename T>
void gqa_attention_backward(BlasLt& blas, T* dqkv, void* scratch, const T* dout, const T* qkv, const T* att, int B,
                            int T_, int NH, int NKV, int hs, cudaStream_t stream);

// Fused causal attention (model.attention=fused, FlashAttention-2's algorithm; flash_attention.cu): the same rows as
// gqa_attention_forward (NKV = NH: GPT-2's), but the T x T scores are never stored: the forward keeps lse [B, NH, T]
// (fp32: each row's log-sum-exp of its scaled scores), the backward recomputes the probabilities from it and adds
// into dqkv (Grad::write: writes every element of it, no zero fill before). bf16 with head sizes 16, 32, 64 and 128
// runs on tensor cores where the GPU has them (compute capability 8.0+) and the shared memory, the rest on CUDA
// cores (flash_attention.cu). Head sizes 1..128 (fused_attention_supports). scratch:
// fused_attention_scratch_bytes(B, T, NH) bytes.
// No atomics: dQ is owned per query row, dK and dV per key row (its G query heads added in order).
bool fused_attention_supports(int head_size);
std::size_t fused_attention_scratch_bytes(int B, int T_, int NH);
template <typename T>
void fused_attention_forward(T* out, float* lse, const T* qkv, int B, int T_, int NH, int NKV, int hs,
                             cudaStream_t stream);
template <typename T>
void fused_attention_backward(T* dqkv, void* scratch, const T* dout, const T* out, const T* qkv, const float* lse,
                              int B, int T_, int NH, int NKV, int hs, cudaStream_t stream, Grad mode = Grad::add);

}  // namespace hsdp::model::cuda
