#pragma once
// GEMMs on the GPU through cuBLASLt: a handle that owns its workspace and caches one plan (descriptors and
// the heuristic's algorithm) per shape, and a row-major GEMM. The GEMM layers built on it (matmul, the tied LM
// head, attention) are the model's: hsdp/model/cuda/layers.hpp.
//
// Precision: bf16 A and B run bf16 x bf16 with fp32 accumulation (CUBLAS_COMPUTE_32F) on tensor cores; f32 runs
// true fp32 (no TF32), for tests against the CPU.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "hsdp/core/dtype.hpp"

namespace hsdp::device::cuda {

// What cuBLASLt applies to the product before it stores D (its epilogue), x = alpha op(A) op(B) + beta C + bias:
//   none:  D = x
//   gelu:  D = gelu(x), and aux = x (the GELU's input, kept for the backward)    CUBLASLT_EPILOGUE_GELU_AUX(_BIAS)
//   dgelu: D = x * gelu'(aux) (the gradient through a GELU whose input was aux)  CUBLASLT_EPILOGUE_DGELU
// cuBLASLt's GELU is the tanh approximation (x sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3)), the one hsdp trains;
// GPU tests hold it to the CPU's GELU (AttentionBlasGpu.GemmEpilogues_*, tests/gpu/attention_blas_gpu_test.cpp).
enum class Epilogue { none, gelu, dgelu };

// Row-major D[M, N] = alpha * op(A) @ op(B) + beta * C, optionally + bias[N] on every row, then the epilogue.
// A is [M, K] (lda >= K), or [K, M] when trans_a (lda >= M); B is [K, N] (ldb >= N), or [N, K] when trans_b
// (ldb >= K); D is [M, N] with ldd >= N; C is D unless given (then [M, N] with D's ldd: a residual added in the
// product's epilogue, D = C + op(A) op(B)). ab_type: f32 or bf16 (A and B); d_type: f32 or bf16 (C, D, bias, aux).
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
  const void* bias = nullptr;
  const void* c = nullptr;  // null: C = D
  Epilogue epilogue = Epilogue::none;
  // gelu: written, dgelu: read; [M, N] row-major with ld_aux >= N, a multiple of 8 (cuBLASLt's rule). No batch.
  void* aux = nullptr;
  int ld_aux = 0;
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
  // epilogues = false: every GEMM with a GELU epilogue is declined (try_gemm) as if cuBLASLt had no kernel for it,
  // which is how the callers' separate path is tested on a GPU that has the kernels.
  explicit BlasLt(std::size_t workspace_bytes = kDefaultWorkspaceBytes, bool epilogues = true);
  ~BlasLt();
  BlasLt(const BlasLt&) = delete;
  BlasLt& operator=(const BlasLt&) = delete;

  // Enqueues the GEMM on `stream`; throws an internal Error naming the shape if cuBLASLt has no algorithm for it.
  void gemm(const GemmArgs& args, cudaStream_t stream);
  // The same, but where cuBLASLt has no algorithm for the shape enqueues nothing and returns false (asked once per
  // shape; such a shape is kept in declined()): for a GEMM with an epilogue whose caller has the separate kernels.
  bool try_gemm(const GemmArgs& args, cudaStream_t stream);
  std::size_t cached_plans() const;
  // Each GEMM with an epilogue that try_gemm found no algorithm for, as its error would name it, once, in the order
  // found.
  const std::vector<std::string>& declined() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hsdp::device::cuda
