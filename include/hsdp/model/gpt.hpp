#pragma once
// Gpt<T>: the forward and backward passes of a GPT-style model over parameters it does NOT own: GPT-2 (nanoGPT's
// architecture, llm.c's kernels) or a Llama (model.arch=llama: RMSNorm, RoPE, grouped-query attention, SwiGLU; the
// layers of llama_layers.hpp). Parameters and gradients arrive as one pointer per unit (ModelLayout), so
// the sharding engine can gather a unit just before its forward_block/backward_block and free it after.
//
// Gpt owns the activations and the backward scratch, allocated once at construction for (B, T) and
// charged to MemCategory::activations. With activation checkpointing only each block's input (the
// residual stream) is kept; backward_block recomputes that block's forward first. Results are
// bit-identical with and without checkpointing.
//
// Call order of one training micro-step (what forward()/backward() do):
//   forward_embedding, forward_block(0..L-1), forward_head, backward_head, backward_block(L-1..0),
//   backward_embedding.
// Backward ADDS into the gradient buffers (accumulation over micro-batches); the caller zeroes them.
#include <cstdint>
#include <functional>
#include <span>

#include "hsdp/core/buffer.hpp"
#include "hsdp/core/memory.hpp"
#include "hsdp/model/layout.hpp"

namespace hsdp::model {

template <typename T>
class Gpt {
 public:
  // Throws a config Error if seq_len exceeds block_size or micro_batch / seq_len are not positive.
  Gpt(const ModelLayout& layout, int micro_batch, int seq_len, MemoryAccountant& accountant,
      bool activation_checkpointing = false);

  const ModelLayout& layout() const { return layout_; }
  int micro_batch() const { return B_; }
  int seq_len() const { return T_; }
  bool activation_checkpointing() const { return checkpointing_; }

  // --- per unit -----------------------------------------------------------------------------------
  // tokens: B * T ids in [0, vocab_size) (else a data Error).
  void forward_embedding(std::span<const std::int32_t> tokens, const T* emb_params);
  void forward_block(int block, const T* block_params);
  // Returns the mean cross-entropy over the B * T positions; targets as tokens.
  T forward_head(std::span<const std::int32_t> targets, const T* lnf_params, const T* emb_params);
  // dloss: d(objective) / d(mean loss), e.g. 1 / grad_accum_steps or a loss scale.
  void backward_head(const T* lnf_params, const T* emb_params, T* lnf_grads, T* emb_grads, T dloss);
  void backward_block(int block, const T* block_params, T* block_grads);
  void backward_embedding(T* emb_grads);

  // --- whole model: params/grads hold one pointer per unit (layout().num_units()) ---------------------
  T forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
            std::span<const T* const> params);
  void backward(std::span<const T* const> params, std::span<T* const> grads, T dloss);
  // Forward only, the loss without keeping softmax probabilities. Overwrites the activations, so it must
  // not come between a forward and its backward.
  T evaluate(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
             std::span<const T* const> params);

  // Per-position losses of the last forward_head/evaluate ([B * T]).
  std::span<const T> losses() const { return losses_.span(); }
  // The logits [B * T, padded_vocab_size] of the last evaluate(), row n = position n (columns from vocab_size on
  // are not written). forward() turns them into probabilities and backward() into d-logits in place.
  std::span<const T> logits() const { return logits_.span(); }
  // Bytes of activations and scratch this object holds.
  std::size_t activation_bytes() const;
  // Called between the kernels of a block and of the head, forward and backward (empty: nothing). The sharding
  // engine polls its nonblocking collectives there: MPI moves a message in flight only while a rank is inside an
  // MPI call, so a unit's reduction would otherwise wait for the next unit boundary at every hop.
  void between_kernels(std::function<void()> hook) { between_kernels_ = std::move(hook); }

 private:
  // Pointers into one block's saved activations.
  struct BlockActivations {
    T* ln1;
    T* ln1_mean;
    T* ln1_rstd;
    T* qkv;
    T* att;
    T* atty;
    T* res2;
    T* ln2;
    T* ln2_mean;
    T* ln2_rstd;
    T* fch;
    T* fch_gelu;
  };
  // A Llama block's: ln1, q (rotated), k (rotated), v, att, atty, res2, ln2, gate, up, swiglu, the norms' rstd.
  struct LlamaActivations {
    T* ln1;
    T* ln1_rstd;
    T* q;
    T* k;
    T* v;
    T* att;
    T* atty;
    T* res2;
    T* ln2;
    T* ln2_rstd;
    T* gate;
    T* up;
    T* swiglu;
  };
  std::size_t block_activation_numel() const;
  void tick() const {
    if (between_kernels_) between_kernels_();
  }
  std::function<void()> between_kernels_;
  T* block_set(int block);
  BlockActivations block_activations(int block);
  LlamaActivations llama_activations(int block);
  void llama_block_forward_into(const LlamaActivations& a, const T* x, T* y, const T* params);
  void llama_block_backward(const LlamaActivations& a, const T* x, const T* params, T* grads);
  void gpt2_block_backward(const BlockActivations& a, const T* x, const T* params, T* grads);
  void forward_into(int block, const T* x, T* y, const T* params);
  // The final norm (LayerNorm or RMSNorm) and the LM head's weight (wte, or a Llama's own lm_head).
  void final_norm_forward(const T* lnf_params);
  const T* head_weight(const T* lnf_params, const T* emb_params) const;
  T* residual(int index) { return residual_.data() + static_cast<std::size_t>(index) * N_ * C_; }
  void check_block(int block) const;
  void check_units(std::size_t count, const char* what) const;
  void store_ids(Buffer<std::int32_t>& dest, std::span<const std::int32_t> ids, const char* what);
  void block_forward_into(const BlockActivations& a, const T* x, T* y, const T* params);
  T head_forward(std::span<const std::int32_t> targets, const T* lnf_params, const T* emb_params, bool keep_probs);

  ModelLayout layout_;
  bool llama_;
  int B_, T_, C_, NH_, NKV_, K_, F_, L_, V_, Vp_;
  std::int64_t N_;
  bool checkpointing_;
  int resident_block_ = -1;  // with checkpointing: the block whose activations the single set holds

  Buffer<std::int32_t> tokens_, targets_;
  Buffer<T> residual_;       // x_0 .. x_L: the input of every block and of the head
  Buffer<T> blocks_;         // L sets of block activations, or 1 with checkpointing
  Buffer<T> branch_out_;     // [N, C]: a projection's output before its residual add
  Buffer<T> lnf_, lnf_mean_, lnf_rstd_;
  Buffer<T> logits_;         // [N, Vp]: logits, then probabilities, then d-logits, in place
  Buffer<T> losses_;
  // backward scratch
  Buffer<T> dresidual_;      // d loss / d x_i, carried down the residual stream
  // dqkv: GPT-2's [N, 3C], a Llama's dq | dk | dv ([N, C + 2K]); dfch and dfch_gelu: GPT-2's, a Llama's d-gate and
  // d-swiglu, dup a Llama's d-up ([N, F] each); datt_row GPT-2's attention backward row.
  Buffer<T> dln_, dqkv_, datty_, dfch_, dfch_gelu_, dup_, datt_row_;
};

extern template class Gpt<float>;
extern template class Gpt<double>;

}  // namespace hsdp::model
