#pragma once
// A GPT-style model (hsdp/model/gpt.hpp's: GPT-2 or a Llama, the same layout and offset table) on one GPU, as
// kernels enqueued on a stream. T is the compute dtype: the storage type of the activations and of the compute copy
// of the weights (bf16_t for training: cuBLASLt bf16 GEMMs with fp32 accumulation; float: true fp32, for checks
// against the CPU).
// Parameter gradients, layer-norm statistics and losses are fp32 (hsdp/model/cuda/layers.hpp). Nothing here waits
// for the GPU.
//
// Two ways to drive it, the same kernels in the same order (so the same bits):
//  - by unit, as model::UnitModel (hsdp/model/unit_model.hpp), on the stream given at construction: what the
//    sharding engine calls, one gathered unit at a time. With activation checkpointing only each block's input is
//    kept and backward_block recomputes that block's forward first (bit-identical results, as on the CPU).
//  - whole model over flat device buffers laid out as the layout's units one after another (unit u starts at
//    unit_offset(u)): forward/backward, on the stream of each call; the caller owns the buffers. Only the GPU tests
//    call them now (the unit calls are checked against them bit for bit).
// backward ADDS into the gradients (accumulation over micro-batches; zero them at the start of a step).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "hsdp/core/dtype.hpp"
#include "hsdp/device/cuda/blas.hpp"
#include "hsdp/device/cuda/runtime.hpp"
#include "hsdp/model/layout.hpp"
#include "hsdp/model/unit_model.hpp"

namespace hsdp::model::cuda {

class KernelTimer;

template <typename T>
class GptCuda final : public UnitModel {
 public:
  // Activations for micro-batches of B sequences of seq_len tokens (<= block_size, else a config Error). Unit calls
  // are enqueued on `stream`.
  GptCuda(const ModelLayout& layout, int B, int seq_len, cudaStream_t stream = nullptr,
          bool activation_checkpointing = false);

  int batch() const { return B_; }
  std::size_t tokens() const { return N_; }
  bool activation_checkpointing() const { return checkpointing_; }
  // Elements of the flat parameter buffers and where unit u starts in them.
  std::size_t total() const { return total_; }
  std::size_t unit_offset(int u) const { return unit_base_[static_cast<std::size_t>(u)]; }
  // Device bytes this object holds: its arena (activations, logits, scratch, ids: one cudaMalloc, carved as
  // hsdp/model/gpu_activations.hpp says) and the cuBLASLt workspace; model::gpu_activation_bytes, exactly.
  std::size_t activation_bytes() const { return activation_bytes_; }
  // Per-position losses of the last forward or head (device, tokens() floats).
  const float* losses() const { return losses_.data(); }
  // Marks each group of kernels on `timer` (hsdp/model/cuda/kernel_timer.hpp) from now on; null: no more.
  void time_kernels(KernelTimer* timer) { timer_ = timer; }
  // The GEMMs with an epilogue (model.gemm_epilogue=fused) that cuBLASLt had no kernel for here, run by the separate
  // kernels instead: BlasLt::declined, each named once.
  const std::vector<std::string>& declined_epilogues() const { return blas_.declined(); }

  // --- by unit (UnitModel) ---------------------------------------------------------------------------
  const ModelLayout& layout() const override { return layout_; }
  DType compute_dtype() const override;
  int micro_batch() const override { return B_; }
  int seq_len() const override { return T_; }
  void forward_embedding(std::span<const std::int32_t> tokens, const void* emb_params) override;
  void forward_block(int block, const void* block_params) override;
  void forward_head(std::span<const std::int32_t> targets, const void* lnf_params, const void* emb_params, float dloss,
                    double* loss) override;
  void evaluate_head(std::span<const std::int32_t> targets, const void* lnf_params, const void* emb_params,
                     double* loss) override;
  void backward_head(const void* lnf_params, const void* emb_params, float* lnf_grads, float* emb_grads) override;
  void backward_block(int block, const void* block_params, float* block_grads) override;
  void backward_embedding(float* emb_grads) override;

  // --- whole model ----------------------------------------------------------------------------------
  // Forward pass of tokens[B*T] (device) against targets[B*T] (device): per-position losses (losses()) and,
  // over the logits, d-logits for a loss gradient of dloss_per_row per position (the mean loss: 1 / (B*T)).
  void forward(const T* weights, const std::int32_t* tokens, const std::int32_t* targets, float dloss_per_row,
               cudaStream_t stream);
  // Backward pass of the last forward: grads += d loss / d params. on_unit_done(u) runs on the host right after
  // the last kernel that writes unit u's gradient was enqueued (blocks in reverse order, the final norm before
  // them, the embedding last because the tied LM head and the encoder both write it). `tokens` as forward's.
  void backward(const T* weights, float* grads, const std::int32_t* tokens, cudaStream_t stream,
                const std::function<void(int unit)>& on_unit_done = {});

 private:
  // A slice of the arena: device memory, never dereferenced on the host.
  template <typename U>
  struct Slice {
    U* ptr = nullptr;
    U* data() const { return ptr; }
  };
  using Buffer = Slice<T>;
  using FloatBuffer = Slice<float>;
  // One block's activations, kept from forward to backward (one set with checkpointing). The block's input and
  // output are residual(l) and residual(l + 1).
  // A Llama's: qkv holds q | k | v (q and k rotated), fch and fch_gelu the gate and up projections, swiglu their
  // product, fcproj down_proj's output; no means.
  struct BlockActivations {
    Buffer ln1, qkv, att, atty, attproj, residual2, ln2, fch, fch_gelu, fcproj, swiglu;
    FloatBuffer ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;
  };

  std::size_t C() const { return static_cast<std::size_t>(cfg_.n_embd); }
  T* residual(int index) { return residuals_.data() + static_cast<std::size_t>(index) * N_ * C(); }
  BlockActivations& activations(int block) { return blocks_[checkpointing_ ? 0 : static_cast<std::size_t>(block)]; }
  void check_block(int block) const;
  // The host side of an id upload: page-locked, so that the copy never waits for the stream (one from pageable
  // memory may: the driver stages it), refilled after the event of its last copy (a micro-batch ago: long done).
  struct IdStaging {
    device::cuda::PinnedBuffer<std::int32_t> ids;
    device::cuda::Event copied;
  };
  // Host ids checked against the vocabulary, copied through `staging` to `dest` on the unit stream.
  void upload_ids(Slice<std::int32_t> dest, IdStaging& staging, std::span<const std::int32_t> ids, const char* what);

  // The passes, on `stream`; tokens and targets are device ids.
  void embed(const std::int32_t* tokens, const T* emb, cudaStream_t stream);
  void block_forward(int block, const T* p, cudaStream_t stream);
  void llama_block_forward(int block, const T* p, cudaStream_t stream);
  // The kernels enqueued next on `stream` are of `kind` (nullptr: the pass ends); nothing without a timer.
  void mark(const char* kind, cudaStream_t stream);
  void attend(BlockActivations& a, const T* qkv, int NH, int NKV, int hs, cudaStream_t stream);
  void attend_backward(BlockActivations& a, int NH, int NKV, int hs, cudaStream_t stream);
  void llama_block_backward(int block, const T* p, float* g, cudaStream_t stream);
  // The LM head's weight and gradient: the embedding's (tied) or the final unit's lm_head (an untied Llama).
  const T* head_weight(const T* lnf, const T* emb) const;
  float* head_grads(float* lnf_grads, float* emb_grads) const;
  void head_forward(const std::int32_t* targets, const T* lnf, const T* emb, float dloss_per_row, bool for_backward,
                    cudaStream_t stream);
  void head_backward(const T* lnf, const T* emb, float* lnf_grads, float* emb_grads, cudaStream_t stream);
  void block_backward(int block, const T* p, float* g, cudaStream_t stream);
  void project_residual(T* out, const T* x, const T* inp, T* proj, const T* weight, const T* bias, int IC,
                        cudaStream_t stream);
  void embedding_backward(float* emb_grads, cudaStream_t stream);

  const ModelLayout& layout_;
  const GptConfig& cfg_;
  int B_, T_;
  bool llama_;
  int K_, F_;  // key/value width and MLP width
  // model.gemm_epilogue=fused: residual adds in the projections' epilogues; GPT-2's GELU (and its gradient) in the
  // MLP's when cuBLASLt takes its width (gpu_gelu_in_epilogue, as the arena plans it).
  bool residual_epilogue_, gelu_epilogue_;
  std::size_t N_, total_;
  bool checkpointing_;
  cudaStream_t stream_;
  int resident_block_ = -1;                      // with checkpointing: the block whose activations the single set holds
  const std::int32_t* tokens_in_use_ = nullptr;  // device ids of the last forward, for the encoder's backward
  std::vector<std::size_t> unit_base_;
  device::cuda::BlasLt blas_;
  device::cuda::DeviceBuffer<std::uint8_t> arena_;  // every buffer below: one allocation
  Slice<std::int32_t> ids_, target_ids_;            // unit calls' uploaded ids
  IdStaging token_staging_, target_staging_;
  Buffer residuals_;                                // x_0 .. x_L: the input of every block and of the head
  Buffer lnf_, logits_;
  FloatBuffer lnf_mean_, lnf_rstd_, losses_;
  Buffer dresidual_, d_ln_, d_atty_, d_qkv_, d_fch_, d_fch_gelu_, d_up_;
  FloatBuffer column_scratch_;
  Slice<std::uint8_t> att_scratch_;
  std::vector<BlockActivations> blocks_;
  std::size_t activation_bytes_ = 0;
  KernelTimer* timer_ = nullptr;
};

extern template class GptCuda<float>;
extern template class GptCuda<bf16_t>;

// Where each unit starts in GptCuda's flat parameter buffers: the layout's units one after another.
std::vector<std::size_t> unit_offsets(const ModelLayout& layout);

}  // namespace hsdp::model::cuda
