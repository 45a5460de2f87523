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

}  // namespace hsdp::device::cuda
