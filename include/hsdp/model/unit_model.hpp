#pragma once
// UnitModel: GPT-2 by unit, as the sharding engine drives it, on whichever device holds the parameters. The
// engine gathers one unit (ModelLayout: the embedding, each block, the final norm) into the model's compute dtype,
// calls that unit's forward or backward, and frees it; the model owns the activations in between.
//
// Implemented by CpuUnitModel (below: model::Gpt<float> on the host) and by model::cuda::GptCuda<T> (kernels on the
// stream it was built with; hsdp/model/cuda/gpt.hpp). Pointers to parameters, gradients and the loss are the
// device's memory (host memory on the CPU); token ids come from the host and are checked against the vocabulary
// there (a data Error names the first bad one).
//
// Call order of one micro-batch:
//   forward_embedding, forward_block(0..L-1), forward_head, backward_head, backward_block(L-1..0),
//   backward_embedding
// and of an evaluation: forward_embedding, forward_block(0..L-1), evaluate_head.
// Backward ADDS into the fp32 gradient buffers (accumulation over micro-batches); the caller zeroes them.
// dloss is d(objective) / d(mean loss) (1 / grad_accum, times a loss scale for fp16). It is given to forward_head,
// not backward_head, so that a model can fuse the loss and the d-logits into one pass over the logits (the GPU's).
#include <cstdint>
#include <functional>
#include <span>
#include <utility>

#include "hsdp/core/dtype.hpp"
#include "hsdp/model/gpt.hpp"
#include "hsdp/model/layout.hpp"

namespace hsdp::model {

class UnitModel {
 public:
  virtual ~UnitModel() = default;
  virtual const ModelLayout& layout() const = 0;
  // The dtype of the parameters forward and backward read (the compute copy the engine gathers into): f32 on the
  // CPU, bf16 or f32 on the GPU. Gradients are fp32 on every device.
  virtual DType compute_dtype() const = 0;
  virtual int micro_batch() const = 0;
  virtual int seq_len() const = 0;

  // tokens: micro_batch * seq_len ids in [0, vocab_size), host memory.
  virtual void forward_embedding(std::span<const std::int32_t> tokens, const void* emb_params) = 0;
  virtual void forward_block(int block, const void* block_params) = 0;
  // *loss (one double of device memory) = the mean cross-entropy over the micro-batch's positions; keeps what
  // backward_head needs for a gradient of dloss.
  virtual void forward_head(std::span<const std::int32_t> targets, const void* lnf_params, const void* emb_params,
                            float dloss, double* loss) = 0;
  // forward_head for an evaluation: the loss only (no backward follows).
  virtual void evaluate_head(std::span<const std::int32_t> targets, const void* lnf_params, const void* emb_params,
                             double* loss) = 0;
  virtual void backward_head(const void* lnf_params, const void* emb_params, float* lnf_grads, float* emb_grads) = 0;
  virtual void backward_block(int block, const void* block_params, float* block_grads) = 0;
  virtual void backward_embedding(float* emb_grads) = 0;
  // A hook the host runs between a unit's kernels (Gpt::between_kernels), where the model runs on the host
  // thread; a model whose kernels only enqueue (the GPU's) never calls it.
  virtual void between_kernels(std::function<void()> hook) { (void)hook; }
};

// model::Gpt<float> as a UnitModel: every call delegates; the loss is written to host memory (the CPU device's).
class CpuUnitModel final : public UnitModel {
 public:
  explicit CpuUnitModel(Gpt<float>& gpt) : gpt_(gpt) {}

  const ModelLayout& layout() const override { return gpt_.layout(); }
  DType compute_dtype() const override { return DType::f32; }
  int micro_batch() const override { return gpt_.micro_batch(); }
  int seq_len() const override { return gpt_.seq_len(); }

  void forward_embedding(std::span<const std::int32_t> tokens, const void* emb_params) override;
  void forward_block(int block, const void* block_params) override;
  void forward_head(std::span<const std::int32_t> targets, const void* lnf_params, const void* emb_params, float dloss,
                    double* loss) override;
  void evaluate_head(std::span<const std::int32_t> targets, const void* lnf_params, const void* emb_params,
                     double* loss) override;
  void backward_head(const void* lnf_params, const void* emb_params, float* lnf_grads, float* emb_grads) override;
  void backward_block(int block, const void* block_params, float* block_grads) override;
  void backward_embedding(float* emb_grads) override;
  void between_kernels(std::function<void()> hook) override { gpt_.between_kernels(std::move(hook)); }

  Gpt<float>& gpt() { return gpt_; }

 private:
  Gpt<float>& gpt_;
  float dloss_ = 1.0f;  // forward_head's, for backward_head
};

}  // namespace hsdp::model
