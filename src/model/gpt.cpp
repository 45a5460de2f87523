#include "hsdp/model/gpt.hpp"

#include <cstring>
#include <string>

#include "hsdp/core/error.hpp"
#include "hsdp/model/layers.hpp"
#include "hsdp/model/llama_layers.hpp"

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
  llama_ = cfg.llama();
  B_ = micro_batch;
  T_ = seq_len;
  C_ = cfg.n_embd;
  NH_ = cfg.n_head;
  NKV_ = cfg.kv_heads();
  K_ = NKV_ * cfg.head_size();
  F_ = cfg.ffn();
  L_ = cfg.n_layer;
  V_ = cfg.vocab_size;
  Vp_ = cfg.padded_vocab_size;
  N_ = std::int64_t{B_} * T_;
  const auto n = static_cast<std::size_t>(N_);
  const auto c = static_cast<std::size_t>(C_);
  const auto k = static_cast<std::size_t>(K_);
  const auto f = static_cast<std::size_t>(F_);

  tokens_.reset(n, &accountant, kActs);
  targets_.reset(n, &accountant, kActs);
  residual_.reset((static_cast<std::size_t>(L_) + 1) * n * c, &accountant, kActs);
  blocks_.reset((checkpointing_ ? 1 : static_cast<std::size_t>(L_)) * block_activation_numel(), &accountant, kActs);
  branch_out_.reset(n * c, &accountant, kActs);
  lnf_.reset(n * c, &accountant, kActs);
  if (!llama_) lnf_mean_.reset(n, &accountant, kActs);  // RMSNorm keeps no mean
  lnf_rstd_.reset(n, &accountant, kActs);
  logits_.reset(n * static_cast<std::size_t>(Vp_), &accountant, kActs);
  losses_.reset(n, &accountant, kActs);
  dresidual_.reset(n * c, &accountant, kActs);
  dln_.reset(n * c, &accountant, kActs);
  dqkv_.reset(n * (c + 2 * k), &accountant, kActs);
  datty_.reset(n * c, &accountant, kActs);
  dfch_.reset(n * f, &accountant, kActs);
  dfch_gelu_.reset(n * f, &accountant, kActs);
  if (llama_) {
    dup_.reset(n * f, &accountant, kActs);
  } else {
    datt_row_.reset(static_cast<std::size_t>(B_) * NH_ * T_, &accountant, kActs);
  }
}

template <typename T>
std::size_t Gpt<T>::block_activation_numel() const {
  const auto n = static_cast<std::size_t>(N_);
  const auto c = static_cast<std::size_t>(C_);
  const std::size_t att = static_cast<std::size_t>(B_) * NH_ * T_ * T_;
  if (llama_) {
    const auto k = static_cast<std::size_t>(K_), f = static_cast<std::size_t>(F_);
    // ln1, q, atty, res2, ln2; k, v; gate, up, swiglu; att; the two RMSNorms' rstd
    return 5 * n * c + 2 * n * k + 3 * n * f + att + 2 * n;
  }
  // ln1, qkv, att, atty, res2, ln2, fch, fch_gelu, and the two LayerNorms' mean and rstd
  return n * c + n * 3 * c + att + n * c + n * c + n * c + n * 4 * c + n * 4 * c + 4 * n;
}

template <typename T>
T* Gpt<T>::block_set(int block) {
  const int set = checkpointing_ ? 0 : block;
  return blocks_.data() + static_cast<std::size_t>(set) * block_activation_numel();
}

template <typename T>
typename Gpt<T>::LlamaActivations Gpt<T>::llama_activations(int block) {
  T* p = block_set(block);
  const std::int64_t n = N_;
  const auto take = [&p](std::int64_t count) {
    T* start = p;
    p += count;
    return start;
  };
  LlamaActivations a{};
  a.ln1 = take(n * C_);
  a.ln1_rstd = take(n);
  a.q = take(n * C_);
  a.k = take(n * K_);
  a.v = take(n * K_);
  a.att = take(std::int64_t{B_} * NH_ * T_ * T_);
  a.atty = take(n * C_);
  a.res2 = take(n * C_);
  a.ln2 = take(n * C_);
  a.ln2_rstd = take(n);
  a.gate = take(n * F_);
  a.up = take(n * F_);
  a.swiglu = take(n * F_);
  return a;
}

template <typename T>
typename Gpt<T>::BlockActivations Gpt<T>::block_activations(int block) {
  T* p = block_set(block);
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
                             &dresidual_, &dln_, &dqkv_, &datty_, &dfch_, &dfch_gelu_, &dup_, &datt_row_}) {
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
  encoder_forward(residual(0), tokens_.data(), emb_params + o.wte, llama_ ? nullptr : emb_params + o.wpe, B_, T_, C_);
  resident_block_ = -1;
}

template <typename T>
void Gpt<T>::llama_block_forward_into(const LlamaActivations& a, const T* x, T* y, const T* p) {
  const LlamaBlockOffsets& o = layout_.llama_block_offsets();
  const GptConfig& cfg = layout_.config();
  const int N = static_cast<int>(N_);
  const int C = C_, hs = cfg.head_size();
  const auto NC = static_cast<std::size_t>(N_) * C;
  rmsnorm_forward(a.ln1, a.ln1_rstd, x, p + o.input_norm, N, C, cfg.norm_eps);
  matmul_forward(a.q, a.ln1, p + o.q_proj, static_cast<const T*>(nullptr), N, C, C);
  matmul_forward(a.k, a.ln1, p + o.k_proj, static_cast<const T*>(nullptr), N, C, K_);
  matmul_forward(a.v, a.ln1, p + o.v_proj, static_cast<const T*>(nullptr), N, C, K_);
  tick();
  rope_forward(a.q, B_, T_, NH_, hs, cfg.rope_theta);
  rope_forward(a.k, B_, T_, NKV_, hs, cfg.rope_theta);
  gqa_attention_forward(a.atty, a.att, a.q, a.k, a.v, B_, T_, NH_, NKV_, hs);
  tick();
  matmul_forward(branch_out_.data(), a.atty, p + o.o_proj, static_cast<const T*>(nullptr), N, C, C);
  tick();
  residual_forward(a.res2, x, branch_out_.data(), NC);
  rmsnorm_forward(a.ln2, a.ln2_rstd, a.res2, p + o.post_norm, N, C, cfg.norm_eps);
  matmul_forward(a.gate, a.ln2, p + o.gate_proj, static_cast<const T*>(nullptr), N, C, F_);
  matmul_forward(a.up, a.ln2, p + o.up_proj, static_cast<const T*>(nullptr), N, C, F_);
  tick();
  swiglu_forward(a.swiglu, a.gate, a.up, static_cast<std::size_t>(N_) * F_);
  matmul_forward(branch_out_.data(), a.swiglu, p + o.down_proj, static_cast<const T*>(nullptr), N, F_, C);
  tick();
  residual_forward(y, a.res2, branch_out_.data(), NC);
}

template <typename T>
void Gpt<T>::forward_into(int block, const T* x, T* y, const T* params) {
  if (llama_) {
    llama_block_forward_into(llama_activations(block), x, y, params);
  } else {
    block_forward_into(block_activations(block), x, y, params);
  }
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
  forward_into(block, residual(block), residual(block + 1), block_params);
  resident_block_ = block;
}

template <typename T>
void Gpt<T>::final_norm_forward(const T* lnf_params) {
  const FinalNormOffsets& f = layout_.final_norm_offsets();
  const int N = static_cast<int>(N_);
  if (llama_) {
    rmsnorm_forward(lnf_.data(), lnf_rstd_.data(), residual(L_), lnf_params + f.weight, N, C_,
                    layout_.config().norm_eps);
  } else {
    layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), residual(L_), lnf_params + f.weight,
                      lnf_params + f.bias, N, C_);
  }
}

template <typename T>
const T* Gpt<T>::head_weight(const T* lnf_params, const T* emb_params) const {
  const std::size_t head = layout_.final_norm_offsets().head;
  return head != kNoOffset ? lnf_params + head : emb_params + layout_.embedding_offsets().wte;
}

template <typename T>
T Gpt<T>::head_forward(std::span<const std::int32_t> targets, const T* lnf_params, const T* emb_params,
                       bool keep_probs) {
  store_ids(targets_, targets, "target");
  const int N = static_cast<int>(N_);
  final_norm_forward(lnf_params);
  lm_head_forward(logits_.data(), lnf_.data(), head_weight(lnf_params, emb_params), N, C_, V_, Vp_);
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
  const int N = static_cast<int>(N_);
  // d loss_mean / d loss_n = 1 / N
  softmax_xent_backward(logits_.data(), logits_.data(), targets_.data(), dloss / static_cast<T>(N_), N, V_, Vp_);
  dln_.fill_zero();
  T* head_grads = f.head != kNoOffset ? lnf_grads + f.head : emb_grads + layout_.embedding_offsets().wte;
  lm_head_backward(dln_.data(), head_grads, logits_.data(), lnf_.data(), head_weight(lnf_params, emb_params), N, C_,
                   V_, Vp_);
  tick();
  dresidual_.fill_zero();
  if (llama_) {
    rmsnorm_backward(dresidual_.data(), lnf_grads + f.weight, dln_.data(), residual(L_), lnf_params + f.weight,
                     lnf_rstd_.data(), N, C_);
  } else {
    layernorm_backward(dresidual_.data(), lnf_grads + f.weight, lnf_grads + f.bias, dln_.data(), residual(L_),
                       lnf_params + f.weight, lnf_mean_.data(), lnf_rstd_.data(), N, C_);
  }
}

template <typename T>
void Gpt<T>::backward_block(int block, const T* p, T* g) {
  check_block(block);
  const T* x = residual(block);
  if (checkpointing_ && resident_block_ != block) {
    // Recompute this block's activations from its kept input; same code, same values as the forward.
    forward_into(block, x, residual(block + 1), p);
    resident_block_ = block;
  }
  if (llama_) {
    llama_block_backward(llama_activations(block), x, p, g);
  } else {
    gpt2_block_backward(block_activations(block), x, p, g);
  }
}

template <typename T>
void Gpt<T>::llama_block_backward(const LlamaActivations& a, const T* x, const T* p, T* g) {
  const LlamaBlockOffsets& o = layout_.llama_block_offsets();
  const GptConfig& cfg = layout_.config();
  const int N = static_cast<int>(N_);
  const int C = C_, hs = cfg.head_size();
  const auto NF = static_cast<std::size_t>(N_) * F_;
  T* dres = dresidual_.data();  // holds d x_{block+1}; leaves holding d x_block
  T* const none = nullptr;      // no biases

  // y = res2 + down(swiglu(gate(ln2), up(ln2))), ln2 = rmsnorm(res2)
  T* dswiglu = dfch_gelu_.data();
  dfch_gelu_.fill_zero();
  matmul_backward(dswiglu, g + o.down_proj, none, dres, a.swiglu, p + o.down_proj, N, F_, C);
  tick();
  dfch_.fill_zero();
  dup_.fill_zero();
  swiglu_backward(dfch_.data(), dup_.data(), dswiglu, a.gate, a.up, NF);
  dln_.fill_zero();
  matmul_backward(dln_.data(), g + o.gate_proj, none, dfch_.data(), a.ln2, p + o.gate_proj, N, C, F_);
  matmul_backward(dln_.data(), g + o.up_proj, none, dup_.data(), a.ln2, p + o.up_proj, N, C, F_);
  tick();
  rmsnorm_backward(dres, g + o.post_norm, dln_.data(), a.res2, p + o.post_norm, a.ln2_rstd, N, C);

  // res2 = x + o(attention(rope(q(ln1)), rope(k(ln1)), v(ln1))), ln1 = rmsnorm(x)
  datty_.fill_zero();
  matmul_backward(datty_.data(), g + o.o_proj, none, dres, a.atty, p + o.o_proj, N, C, C);
  tick();
  dqkv_.fill_zero();
  T* dq = dqkv_.data();
  T* dk = dq + N_ * C;
  T* dv = dk + N_ * K_;
  gqa_attention_backward(dq, dk, dv, datty_.data(), a.q, a.k, a.v, a.att, B_, T_, NH_, NKV_, hs);
  rope_backward(dq, B_, T_, NH_, hs, cfg.rope_theta);
  rope_backward(dk, B_, T_, NKV_, hs, cfg.rope_theta);
  tick();
  dln_.fill_zero();
  matmul_backward(dln_.data(), g + o.q_proj, none, dq, a.ln1, p + o.q_proj, N, C, C);
  matmul_backward(dln_.data(), g + o.k_proj, none, dk, a.ln1, p + o.k_proj, N, C, K_);
  matmul_backward(dln_.data(), g + o.v_proj, none, dv, a.ln1, p + o.v_proj, N, C, K_);
  tick();
  rmsnorm_backward(dres, g + o.input_norm, dln_.data(), x, p + o.input_norm, a.ln1_rstd, N, C);
}

template <typename T>
void Gpt<T>::gpt2_block_backward(const BlockActivations& a, const T* x, const T* p, T* g) {
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
  encoder_backward(emb_grads + o.wte, llama_ ? nullptr : emb_grads + o.wpe, dresidual_.data(), tokens_.data(), B_, T_,
                   C_);
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
