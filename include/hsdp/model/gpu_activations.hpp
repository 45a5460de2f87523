#pragma once
// GptCuda's activations (hsdp/model/cuda/gpt.hpp) as one arena: its slices, their sizes and places. CPU code, so
// that the GPU model carves its one allocation from it and hsdp-plan and hsdp-train's memory check size a GPU's
// activations by the same function: the planned bytes are the allocated bytes by construction.
//
// Per micro-batch of B sequences of T tokens, N = B T, element size e (sizeof the compute dtype: 2 for bf16, 4 for
// fp32), s = L sets of block activations (1 with activation checkpointing), F the MLP's width, each slice rounded up
// to kGpuArenaAlignment bytes:
//   shared   ids, target ids (int32, N each); x_0..x_L (e (L+1) N C); lnf (e N C); logits (e N Vp); lnf mean and
//            rstd, losses (float, N each); dresidual, d_ln, d_atty (e N C each), d_qkv (e 3 N C), d_fch, d_fch_gelu
//            (e N F each); the column sums' partial rows (float, 2 x kGpuColumnChunks x F); one sequence's
//            attention scores and their gradients (8 H T^2 bytes)
//   s sets   ln1, atty, attproj, residual2, ln2, fcproj (e N C each), qkv (e 3 N C), fch, fch_gelu (e N F each),
//            the attention probabilities (e B H T^2), two LayerNorms' mean and rstd (float, N each)
// A Llama (K = n_kv_head x head size): qkv and d_qkv hold q | k | v (e N (C + 2K)); fch, fch_gelu are the gate and up
// projections, d_fch, d_fch_gelu their gradients' gate and swiglu, d_up (shared) and swiglu (per set) e N F each;
// RMSNorm keeps no mean (those slices are empty); fcproj is down_proj's output. GPT-2's d_up and swiglu are empty.
// With fused attention (model.attention=fused) no scores are stored: a set's att slice holds the rows' log-sum-exp
// (float, B H T) and att_scratch the backward's dO.O (float, B H T).
// With the GEMM epilogues (model.gemm_epilogue=fused) the output projections write the residual stream directly:
// attproj and fcproj are empty; a GPT-2 whose GELU runs in the epilogue (gpu_gelu_in_epilogue) has no d_fch_gelu.
// gpu_activation_bytes adds the cuBLASLt workspace (kGpuBlasWorkspaceBytes), which cuBLASLt's handle owns.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hsdp/model/config.hpp"

namespace hsdp::model {

inline constexpr std::size_t kGpuArenaAlignment = 256;                        // cudaMalloc's, for every slice
inline constexpr std::size_t kGpuBlasWorkspaceBytes = std::size_t{32} << 20;  // what cuBLAS asks for on Hopper
inline constexpr int kGpuColumnChunks = 64;                                   // partial rows of a column sum
inline constexpr int kGpuGeluEpilogueMultiple = 8;  // cuBLASLt: the kept GELU input's leading dimension divides by it

enum class GpuSlice : int {
  ids,
  target_ids,
  residuals,
  lnf,
  logits,
  lnf_mean,
  lnf_rstd,
  losses,
  dresidual,
  d_ln,
  d_atty,
  d_qkv,
  d_fch,
  d_fch_gelu,
  column_scratch,
  att_scratch,
  d_up,
  count
};
enum class GpuBlockSlice : int {
  ln1,
  qkv,
  att,
  atty,
  attproj,
  residual2,
  ln2,
  fch,
  fch_gelu,
  fcproj,
  ln1_mean,
  ln1_rstd,
  ln2_mean,
  ln2_rstd,
  swiglu,
  count
};

struct GpuActivationArena {
  struct Slice {
    std::size_t offset = 0, bytes = 0;
  };
  std::vector<Slice> shared;               // by GpuSlice
  std::vector<std::vector<Slice>> blocks;  // per set (L, or 1 with checkpointing), by GpuBlockSlice
  std::size_t bytes = 0;                   // the whole arena

  const Slice& operator[](GpuSlice s) const { return shared[static_cast<std::size_t>(s)]; }
  const Slice& block(int set, GpuBlockSlice s) const {
    return blocks[static_cast<std::size_t>(set)][static_cast<std::size_t>(s)];
  }
};

GpuActivationArena gpu_activation_arena(const ActivationShape& shape, std::int64_t micro_batch, std::int64_t seq_len,
                                        bool checkpointing, std::size_t element_bytes);

// Whether GptCuda runs GPT-2's GELU and its gradient in cuBLASLt's epilogues: model.gemm_epilogue=fused and an MLP
// width cuBLASLt takes for the kept GELU input (a multiple of kGpuGeluEpilogueMultiple).
bool gpu_gelu_in_epilogue(const ActivationShape& shape);

// Device bytes GptCuda holds for activations: the arena and the cuBLASLt workspace.
std::int64_t gpu_activation_bytes(const ActivationShape& shape, std::int64_t micro_batch, std::int64_t seq_len,
                                  bool checkpointing, std::size_t element_bytes);

// The attention kernels' scratch: one sequence's scores and their gradients, H x T^2 values of at most 4 bytes each.
std::size_t gpu_attention_scratch_bytes(std::int64_t seq_len, std::int64_t n_head);
// Floats of partial column sums for `quantities` sums over C columns.
std::size_t gpu_column_scratch_floats(std::int64_t columns, int quantities);

}  // namespace hsdp::model
