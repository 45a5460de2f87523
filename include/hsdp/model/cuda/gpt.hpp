#pragma once
// GPT-2 (hsdp/model/gpt.hpp's model, the same layout and offset table) on one GPU, as kernels enqueued on a
// stream: bf16 activations and bf16 compute weights, cuBLASLt bf16 GEMMs with fp32 accumulation, fp32 parameter
// gradients, fp32 layer-norm statistics and losses (hsdp/model/cuda/layers.hpp). Nothing here waits for the GPU.
//
// Parameters live in flat device buffers laid out as the layout's units one after another (unit u starts at
// unit_offset(u)): the caller owns them (hsdp/train/cuda/parameters.hpp's GptParameters holds a training run's)
// and passes the bf16 compute copy and the gradients to forward/backward. backward ADDS into the gradients
// (accumulation over micro-batches; zero them at the start of a step) and tells the caller, while it enqueues, when
// each unit's gradient is complete, so that its reduction can be issued while the rest of backward still runs.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "hsdp/core/dtype.hpp"
#include "hsdp/device/cuda/blas.hpp"
#include "hsdp/device/cuda/runtime.hpp"
#include "hsdp/model/layout.hpp"

namespace hsdp::model::cuda {

class GptCuda {
 public:
  // Activations for micro-batches of B sequences of T tokens (T <= block_size).
  GptCuda(const ModelLayout& layout, int B, int T);

  int batch() const { return B_; }
  int seq_len() const { return T_; }
  std::size_t tokens() const { return N_; }
  // Elements of the flat parameter buffers and where unit u starts in them.
  std::size_t total() const { return total_; }
  std::size_t unit_offset(int u) const { return unit_base_[static_cast<std::size_t>(u)]; }
  // Device bytes this object holds (activations, logits, scratch, the cuBLASLt workspace).
  std::size_t activation_bytes() const { return activation_bytes_; }

  // Forward pass of tokens[B*T] (device) against targets[B*T] (device): per-position losses (losses()) and,
  // over the logits, d-logits for a loss gradient of dloss_per_row per position (the mean loss: 1 / (B*T)).
  void forward(const bf16_t* weights, const std::int32_t* tokens, const std::int32_t* targets, float dloss_per_row,
               cudaStream_t stream);
  // Backward pass of the last forward: grads += d loss / d params. on_unit_done(u) runs on the host right after
  // the last kernel that writes unit u's gradient was enqueued (blocks in reverse order, the final norm before
  // them, the embedding last because the tied LM head and the encoder both write it).
  void backward(const bf16_t* weights, float* grads, const std::int32_t* tokens, cudaStream_t stream,
                const std::function<void(int unit)>& on_unit_done = {});
  // Per-position losses of the last forward (device, tokens() floats).
  const float* losses() const { return losses_.data(); }

 private:
  using Bf16Buffer = device::cuda::DeviceBuffer<bf16_t>;
  using FloatBuffer = device::cuda::DeviceBuffer<float>;
  // One block's activations, kept from forward to backward.
  struct BlockActivations {
    Bf16Buffer ln1, qkv, att, atty, attproj, residual2, ln2, fch, fch_gelu, fcproj, residual3;
    FloatBuffer ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;
    BlockActivations(std::size_t N, std::size_t C, std::size_t att_n);
    std::size_t bytes() const;
  };

  std::size_t C() const { return static_cast<std::size_t>(cfg_.n_embd); }

  const ModelLayout& layout_;
  const GptConfig& cfg_;
  int B_, T_;
  std::size_t N_, total_;
  std::vector<std::size_t> unit_base_;
  device::cuda::BlasLt blas_;
  Bf16Buffer encoded_, lnf_, logits_;
  FloatBuffer lnf_mean_, lnf_rstd_, losses_;
  Bf16Buffer dresidual_, d_ln_, d_atty_, d_qkv_, d_fch_, d_fch_gelu_;
  FloatBuffer column_scratch_;
  device::cuda::DeviceBuffer<std::uint8_t> att_scratch_;
  std::vector<BlockActivations> blocks_;
  std::size_t activation_bytes_ = 0;
};

// Where each unit starts in GptCuda's flat parameter buffers: the layout's units one after another.
std::vector<std::size_t> unit_offsets(const ModelLayout& layout);

}  // namespace hsdp::model::cuda
