#pragma once
// GEMMs on the GPU through cuBLASLt: a handle that owns its workspace and caches one plan (descriptors and
// the heuristic's algorithm) per shape, a row-major GEMM, and the GEMM layers of hsdp/model/layers.hpp
// (matmul, the tied LM head) with the same layouts and the same += contract for backward.
//
// Precision: T = bf16_t runs bf16 x bf16 with fp32 accumulation (CUBLAS_COMPUTE_32F) on tensor cores; T = float
// runs true fp32 (no TF32), for tests against the CPU. Weight gradients are written in fp32 either way.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "hsdp/core/dtype.hpp"

namespace hsdp::device::cuda {

// Row-major D[M, N] = alpha * op(A) @ op(B) + beta * D, optionally + bias[N] on every row.
// A is [M, K] (lda >= K), or [K, M] when trans_a (lda >= M); B is [K, N] (ldb >= N), or [N, K] when trans_b
// (ldb >= K); D is [M, N] with ldd >= N. ab_type: f32 or bf16 (A and B); d_type: f32 or bf16 (D and bias).
struct GemmArgs {
  bool trans_a = false;
  bool trans_b = false;
  int m = 0;
  int n = 0;
  int k = 0;
  const void* a = nullptr;
  int lda = 0;
  const void* b = nullptr;
  int ldb = 0;
  void* d = nullptr;
  int ldd = 0;
  DType ab_type = DType::bf16;
  DType d_type = DType::bf16;
  float alpha = 1.0f;
  float beta = 0.0f;
  const void* bias = nullptr;  // beta must be 0 with a bias
  // Strided batch: `batch` GEMMs, the i-th on a + i * stride_a, b + i * stride_b, d + i * stride_d (elements);
  // the D matrices must not overlap, the A and B matrices may (e.g. the heads of one row-major [T, 3C] tensor).
  int batch = 1;
  std::int64_t stride_a = 0;
  std::int64_t stride_b = 0;
  std::int64_t stride_d = 0;
};

class BlasLt {
 public:
  static constexpr std::size_t kDefaultWorkspaceBytes = std::size_t{32} << 20;  // what cuBLAS asks for on Hopper
  explicit BlasLt(std::size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~BlasLt();
  BlasLt(const BlasLt&) = delete;
  BlasLt& operator=(const BlasLt&) = delete;

  // Enqueues the GEMM on `stream`; throws an internal Error naming the shape if cuBLASLt has no algorithm for it.
  void gemm(const GemmArgs& args, cudaStream_t stream);
  std::size_t cached_plans() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// out[N, OC] = inp[N, IC] @ weight[OC, IC]^T + bias[OC] (bias may be null).
template <typename T>
void matmul_forward(BlasLt& blas, T* out, const T* inp, const T* weight, const T* bias, int N, int IC, int OC,
                    cudaStream_t stream);
// dinp += dout @ weight; dweight += dout^T @ inp; dbias += column sums of dout (when dbias is not null; scratch:
// column_sum_scratch_floats(OC, 1) floats, see layers.hpp).
template <typename T>
void matmul_backward(BlasLt& blas, T* dinp, float* dweight, float* dbias, float* scratch, const T* dout, const T* inp,
                     const T* weight, int N, int IC, int OC, cudaStream_t stream);

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

}  // namespace hsdp::device::cuda
