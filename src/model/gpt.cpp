#include "hsdp/model/gpt.hpp"

#include <cstring>
#include <string>

#include "hsdp/core/error.hpp"
#include "hsdp/model/layers.hpp"

namespace hsdp::model {
namespace {

constexpr MemCategory kActs = MemCategory::activations;

}  // namespace

template <typename T>
Gpt<T>::Gpt(const ModelLayout& layout, int micro_batch, int seq_len, MemoryAccountant& accountant,
            bool activation_checkpointing)
    : layout_(layout), checkpointing_(activation_checkpointing) {
  const GptConfig& cfg = layout_.config();
  if (micro_batch <= 0) throw_config("train.micro_batch (" + std::to_string(micro_batch) + ") must be positive");
  if (seq_len <= 0) throw_config("train.seq_len (" + std::to_string(seq_len) + ") must be positive");
  if (seq_len > cfg.block_size) {
    throw_config("train.seq_len (" + std::to_string(seq_len) + ") exceeds model.block_size (" +
                 std::to_string(cfg.block_size) + ")");
  }
  B_ = micro_batch;
  T_ = seq_len;
  C_ = cfg.n_embd;
  NH_ = cfg.n_head;
  L_ = cfg.n_layer;
  V_ = cfg.vocab_size;
  Vp_ = cfg.padded_vocab_size;
  N_ = std::int64_t{B_} * T_;
  const auto n = static_cast<std::size_t>(N_);
  const auto c = static_cast<std::size_t>(C_);

  tokens_.reset(n, &accountant, kActs);
  targets_.reset(n, &accountant, kActs);
  residual_.reset((static_cast<std::size_t>(L_) + 1) * n * c, &accountant, kActs);
  blocks_.reset((checkpointing_ ? 1 : static_cast<std::size_t>(L_)) * block_activation_numel(), &accountant, kActs);
  branch_out_.reset(n * c, &accountant, kActs);
  lnf_.reset(n * c, &accountant, kActs);
  lnf_mean_.reset(n, &accountant, kActs);
  lnf_rstd_.reset(n, &accountant, kActs);
  logits_.reset(n * static_cast<std::size_t>(Vp_), &accountant, kActs);
  losses_.reset(n, &accountant, kActs);
  dresidual_.reset(n * c, &accountant, kActs);
  dln_.reset(n * c, &accountant, kActs);
  dqkv_.reset(n * 3 * c, &accountant, kActs);
  datty_.reset(n * c, &accountant, kActs);
  dfch_.reset(n * 4 * c, &accountant, kActs);
  dfch_gelu_.reset(n * 4 * c, &accountant, kActs);
  datt_row_.reset(static_cast<std::size_t>(B_) * NH_ * T_, &accountant, kActs);
}

template <typename T>
std::size_t Gpt<T>::block_activation_numel() const {
  const auto n = static_cast<std::size_t>(N_);
  const auto c = static_cast<std::size_t>(C_);
  const std::size_t att = static_cast<std::size_t>(B_) * NH_ * T_ * T_;
  // ln1, qkv, att, atty, res2, ln2, fch, fch_gelu, and the two LayerNorms' mean and rstd
  return n * c + n * 3 * c + att + n * c + n * c + n * c + n * 4 * c + n * 4 * c + 4 * n;
}

template <typename T>
typename Gpt<T>::BlockActivations Gpt<T>::block_activations(int block) {
  const int set = checkpointing_ ? 0 : block;
  T* p = blocks_.data() + static_cast<std::size_t>(set) * block_activation_numel();
  const std::int64_t n = N_;
  const std::int64_t c = C_;
  const auto take = [&p](std::int64_t count) {
    T* start = p;
    p += count;
    return start;
  };
  BlockActivations a{};
  a.ln1 = take(n * c);
  a.ln1_mean = take(n);
  a.ln1_rstd = take(n);
  a.qkv = take(n * 3 * c);
  a.att = take(std::int64_t{B_} * NH_ * T_ * T_);
  a.atty = take(n * c);
  a.res2 = take(n * c);
  a.ln2 = take(n * c);
  a.ln2_mean = take(n);
  a.ln2_rstd = take(n);
  a.fch = take(n * 4 * c);
  a.fch_gelu = take(n * 4 * c);
  return a;
}

template <typename T>
std::size_t Gpt<T>::activation_bytes() const {
  std::size_t bytes = tokens_.size_bytes() + targets_.size_bytes();
  for (const Buffer<T>* b : {&residual_, &blocks_, &branch_out_, &lnf_, &lnf_mean_, &lnf_rstd_, &logits_, &losses_,
                             &dresidual_, &dln_, &dqkv_, &datty_, &dfch_, &dfch_gelu_, &datt_row_}) {
    bytes += b->size_bytes();
  }
  return bytes;
}

template <typename T>
void Gpt<T>::check_block(int block) const {
  if (block < 0 || block >= L_) {
    throw_internal("block index " + std::to_string(block) + " out of range [0, " + std::to_string(L_) + ")");
  }
}

template <typename T>
void Gpt<T>::check_units(std::size_t count, const char* what) const {
  if (count != static_cast<std::size_t>(layout_.num_units())) {
    throw_internal(std::string(what) + ": expected one pointer per unit (" + std::to_string(layout_.num_units()) +
                   "), got " + std::to_string(count));
  }
}

template <typename T>
void Gpt<T>::store_ids(Buffer<std::int32_t>& dest, std::span<const std::int32_t> ids, const char* what) {
  if (ids.size() != dest.size()) {
    throw_internal(std::string(what) + ": expected B*T = " + std::to_string(dest.size()) + " ids, got " +
                   std::to_string(ids.size()));
  }
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= V_) {
      throw_data(std::string(what) + " id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                 " is outside the vocabulary [0, " + std::to_string(V_) + ")");
    }
  }
  std::memcpy(dest.data(), ids.data(), ids.size_bytes());
}

// ----------------------------------------------------------------------------------------------- forward

template <typename T>
void Gpt<T>::forward_embedding(std::span<const std::int32_t> tokens, const T* emb_params) {
  store_ids(tokens_, tokens, "token");
  const EmbeddingOffsets& o = layout_.embedding_offsets();
  encoder_forward(residual(0), tokens_.data(), emb_params + o.wte, emb_params + o.wpe, B_, T_, C_);
  resident_block_ = -1;
}

template <typename T>
void Gpt<T>::block_forward_into(const BlockActivations& a, const T* x, T* y, const T* p) {
  const BlockOffsets& o = layout_.block_offsets();
  const int N = static_cast<int>(N_);
  const int C = C_;
  const auto NC = static_cast<std::size_t>(N_) * C;
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p + o.ln_1_weight, p + o.ln_1_bias, N, C);
  matmul_forward(a.qkv, a.ln1, p + o.c_attn_weight, p + o.c_attn_bias, N, C, 3 * C);
  tick();
  attention_forward(a.atty, a.att, a.qkv, B_, T_, C, NH_);
  tick();
  matmul_forward(branch_out_.data(), a.atty, p + o.attn_proj_weight, p + o.attn_proj_bias, N, C, C);
  tick();
  residual_forward(a.res2, x, branch_out_.data(), NC);
  layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p + o.ln_2_weight, p + o.ln_2_bias, N, C);
  matmul_forward(a.fch, a.ln2, p + o.c_fc_weight, p + o.c_fc_bias, N, C, 4 * C);
  tick();
  gelu_forward(a.fch_gelu, a.fch, NC * 4);
  matmul_forward(branch_out_.data(), a.fch_gelu, p + o.mlp_proj_weight, p + o.mlp_proj_bias, N, 4 * C, C);
  tick();
  residual_forward(y, a.res2, branch_out_.data(), NC);
}

template <typename T>
void Gpt<T>::forward_block(int block, const T* block_params) {
  check_block(block);
  block_forward_into(block_activations(block), residual(block), residual(block + 1), block_params);
  resident_block_ = block;
}

template <typename T>
T Gpt<T>::head_forward(std::span<const std::int32_t> targets, const T* lnf_params, const T* emb_params,
                       bool keep_probs) {
  store_ids(targets_, targets, "target");
  const FinalNormOffsets& f = layout_.final_norm_offsets();
  const int N = static_cast<int>(N_);
  layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), residual(L_), lnf_params + f.weight,
                    lnf_params + f.bias, N, C_);
  lm_head_forward(logits_.data(), lnf_.data(), emb_params + layout_.embedding_offsets().wte, N, C_, V_, Vp_);
  tick();
  if (keep_probs) {
    softmax_xent_forward(logits_.data(), losses_.data(), logits_.data(), targets_.data(), N, V_, Vp_);
  } else {
    softmax_xent_loss(losses_.data(), logits_.data(), targets_.data(), N, V_, Vp_);
  }
  T sum = 0;  // in position order: deterministic
  for (std::int64_t i = 0; i < N_; ++i) sum += losses_[static_cast<std::size_t>(i)];
  return sum / static_cast<T>(N_);
}

template <typename T>
T Gpt<T>::forward_head(std::span<const std::int32_t> targets, const T* lnf_params, const T* emb_params) {
  return head_forward(targets, lnf_params, emb_params, true);
}

// ---------------------------------------------------------------------------------------------- backward

template <typename T>
void Gpt<T>::backward_head(const T* lnf_params, const T* emb_params, T* lnf_grads, T* emb_grads, T dloss) {
  const FinalNormOffsets& f = layout_.final_norm_offsets();
  const std::size_t wte = layout_.embedding_offsets().wte;
  const int N = static_cast<int>(N_);
  // d loss_mean / d loss_n = 1 / N
  softmax_xent_backward(logits_.data(), logits_.data(), targets_.data(), dloss / static_cast<T>(N_), N, V_, Vp_);
  dln_.fill_zero();
  lm_head_backward(dln_.data(), emb_grads + wte, logits_.data(), lnf_.data(), emb_params + wte, N, C_, V_, Vp_);
  tick();
  dresidual_.fill_zero();
  layernorm_backward(dresidual_.data(), lnf_grads + f.weight, lnf_grads + f.bias, dln_.data(), residual(L_),
                     lnf_params + f.weight, lnf_mean_.data(), lnf_rstd_.data(), N, C_);
}

template <typename T>
void Gpt<T>::backward_block(int block, const T* p, T* g) {
  check_block(block);
  const BlockActivations a = block_activations(block);
  const T* x = residual(block);
  if (checkpointing_ && resident_block_ != block) {
    // Recompute this block's activations from its kept input; same code, same values as the forward.
    block_forward_into(a, x, residual(block + 1), p);
    resident_block_ = block;
  }
  const BlockOffsets& o = layout_.block_offsets();
  const int N = static_cast<int>(N_);
  const int C = C_;
  const auto NC = static_cast<std::size_t>(N_) * C;
  T* dres = dresidual_.data();  // holds d x_{block+1}; leaves holding d x_block

  // y = res2 + mlp(ln_2(res2)): the residual passes dres through unchanged to res2 (dres keeps
  // accumulating in place) and hands the same dres to the MLP branch.
  dfch_gelu_.fill_zero();
  matmul_backward(dfch_gelu_.data(), g + o.mlp_proj_weight, g + o.mlp_proj_bias, dres, a.fch_gelu,
                  p + o.mlp_proj_weight, N, 4 * C, C);
  tick();
  dfch_.fill_zero();
  gelu_backward(dfch_.data(), a.fch, dfch_gelu_.data(), NC * 4);
  dln_.fill_zero();
  matmul_backward(dln_.data(), g + o.c_fc_weight, g + o.c_fc_bias, dfch_.data(), a.ln2, p + o.c_fc_weight, N, C,
                  4 * C);
  tick();
  layernorm_backward(dres, g + o.ln_2_weight, g + o.ln_2_bias, dln_.data(), a.res2, p + o.ln_2_weight, a.ln2_mean,
                     a.ln2_rstd, N, C);

  // res2 = x + attn(ln_1(x)): likewise.
  datty_.fill_zero();
  matmul_backward(datty_.data(), g + o.attn_proj_weight, g + o.attn_proj_bias, dres, a.atty, p + o.attn_proj_weight,
                  N, C, C);
  tick();
  dqkv_.fill_zero();
  attention_backward(dqkv_.data(), datt_row_.data(), datty_.data(), a.qkv, a.att, B_, T_, C, NH_);
  tick();
  dln_.fill_zero();
  matmul_backward(dln_.data(), g + o.c_attn_weight, g + o.c_attn_bias, dqkv_.data(), a.ln1, p + o.c_attn_weight, N,
                  C, 3 * C);
  tick();
  layernorm_backward(dres, g + o.ln_1_weight, g + o.ln_1_bias, dln_.data(), x, p + o.ln_1_weight, a.ln1_mean,
                     a.ln1_rstd, N, C);
}

template <typename T>
void Gpt<T>::backward_embedding(T* emb_grads) {
  const EmbeddingOffsets& o = layout_.embedding_offsets();
  encoder_backward(emb_grads + o.wte, emb_grads + o.wpe, dresidual_.data(), tokens_.data(), B_, T_, C_);
}

// ------------------------------------------------------------------------------------------ whole model

template <typename T>
T Gpt<T>::forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                  std::span<const T* const> params) {
  check_units(params.size(), "Gpt::forward params");
  const int emb = ModelLayout::embedding_unit();
  forward_embedding(tokens, params[emb]);
  for (int i = 0; i < L_; ++i) forward_block(i, params[ModelLayout::block_unit(i)]);
  return forward_head(targets, params[layout_.final_norm_unit()], params[emb]);
}

template <typename T>
void Gpt<T>::backward(std::span<const T* const> params, std::span<T* const> grads, T dloss) {
  check_units(params.size(), "Gpt::backward params");
  check_units(grads.size(), "Gpt::backward grads");
  const int emb = ModelLayout::embedding_unit();
  const int fin = layout_.final_norm_unit();
  backward_head(params[fin], params[emb], grads[fin], grads[emb], dloss);
  for (int i = L_ - 1; i >= 0; --i) backward_block(i, params[ModelLayout::block_unit(i)], grads[ModelLayout::block_unit(i)]);
  backward_embedding(grads[emb]);
}

template <typename T>
T Gpt<T>::evaluate(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                   std::span<const T* const> params) {
  check_units(params.size(), "Gpt::evaluate params");
  const int emb = ModelLayout::embedding_unit();
  forward_embedding(tokens, params[emb]);
  for (int i = 0; i < L_; ++i) forward_block(i, params[ModelLayout::block_unit(i)]);
  return head_forward(targets, params[layout_.final_norm_unit()], params[emb], false);
}

template class Gpt<float>;
template class Gpt<double>;

}  // namespace hsdp::model
