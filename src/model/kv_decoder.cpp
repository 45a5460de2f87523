#include "hsdp/model/kv_decoder.hpp"

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
KvDecoder<T>::KvDecoder(const ModelLayout& layout, MemoryAccountant& accountant) : layout_(layout) {
  const GptConfig& cfg = layout_.config();
  C_ = cfg.n_embd;
  NH_ = cfg.n_head;
  L_ = cfg.n_layer;
  V_ = cfg.vocab_size;
  Vp_ = cfg.padded_vocab_size;
  K_ = cfg.kv_heads() * cfg.head_size();
  F_ = cfg.ffn();
  const auto c = static_cast<std::size_t>(C_);
  const auto k = static_cast<std::size_t>(K_), f = static_cast<std::size_t>(F_);
  kv_.reset(static_cast<std::size_t>(L_) * static_cast<std::size_t>(cfg.block_size) * 2 * k, &accountant, kActs);
  x_.reset(c, &accountant, kActs);
  ln_.reset(c, &accountant, kActs);
  mean_.reset(1, &accountant, kActs);
  rstd_.reset(1, &accountant, kActs);
  qkv_.reset(c + 2 * k, &accountant, kActs);
  atty_.reset(c, &accountant, kActs);
  att_row_.reset(static_cast<std::size_t>(NH_) * static_cast<std::size_t>(cfg.block_size), &accountant, kActs);
  branch_out_.reset(c, &accountant, kActs);
  res2_.reset(c, &accountant, kActs);
  fch_.reset(f, &accountant, kActs);
  fch_gelu_.reset(f, &accountant, kActs);
  if (cfg.llama()) swiglu_.reset(f, &accountant, kActs);
  logits_.reset(static_cast<std::size_t>(Vp_), &accountant, kActs);
}

// The same sequence of kernels as Gpt::block_forward_into, on the one row of the new position.
template <typename T>
void KvDecoder<T>::block_step(int block, const T* p) {
  const BlockOffsets& o = layout_.block_offsets();
  const int C = C_;
  const auto c = static_cast<std::size_t>(C);
  T* kv = kv_.data() + static_cast<std::size_t>(block) * static_cast<std::size_t>(capacity()) * 2 * c;
  layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), x_.data(), p + o.ln_1_weight, p + o.ln_1_bias, 1, C);
  matmul_forward(qkv_.data(), ln_.data(), p + o.c_attn_weight, p + o.c_attn_bias, 1, C, 3 * C);
  std::memcpy(kv + static_cast<std::size_t>(position_) * 2 * c, qkv_.data() + c, 2 * c * sizeof(T));  // k | v
  attention_decode_forward(atty_.data(), att_row_.data(), qkv_.data(), kv, position_, C, NH_);
  matmul_forward(branch_out_.data(), atty_.data(), p + o.attn_proj_weight, p + o.attn_proj_bias, 1, C, C);
  residual_forward(res2_.data(), x_.data(), branch_out_.data(), c);
  layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), res2_.data(), p + o.ln_2_weight, p + o.ln_2_bias, 1, C);
  matmul_forward(fch_.data(), ln_.data(), p + o.c_fc_weight, p + o.c_fc_bias, 1, C, 4 * C);
  gelu_forward(fch_gelu_.data(), fch_.data(), 4 * c);
  matmul_forward(branch_out_.data(), fch_gelu_.data(), p + o.mlp_proj_weight, p + o.mlp_proj_bias, 1, 4 * C, C);
  residual_forward(x_.data(), res2_.data(), branch_out_.data(), c);
}

// The same sequence of kernels as Gpt::llama_block_forward_into on the one row; q and k turn by the angle of the
// position, so the cache holds every key already rotated.
template <typename T>
void KvDecoder<T>::llama_block_step(int block, const T* p) {
  const LlamaBlockOffsets& o = layout_.llama_block_offsets();
  const GptConfig& cfg = layout_.config();
  const int C = C_, hs = cfg.head_size(), NKV = cfg.kv_heads();
  const auto c = static_cast<std::size_t>(C), k = static_cast<std::size_t>(K_);
  T* kv = kv_.data() + static_cast<std::size_t>(block) * static_cast<std::size_t>(capacity()) * 2 * k;
  T* q = qkv_.data();
  T* kv_row = kv + static_cast<std::size_t>(position_) * 2 * k;  // k | v, written in place
  const T* none = nullptr;
  rmsnorm_forward(ln_.data(), rstd_.data(), x_.data(), p + o.input_norm, 1, C, cfg.norm_eps);
  matmul_forward(q, ln_.data(), p + o.q_proj, none, 1, C, C);
  matmul_forward(kv_row, ln_.data(), p + o.k_proj, none, 1, C, K_);
  matmul_forward(kv_row + k, ln_.data(), p + o.v_proj, none, 1, C, K_);
  rope_forward(q, 1, 1, NH_, hs, cfg.rope_theta, position_);
  rope_forward(kv_row, 1, 1, NKV, hs, cfg.rope_theta, position_);
  gqa_attention_decode_forward(atty_.data(), att_row_.data(), q, kv, position_, NH_, NKV, hs);
  matmul_forward(branch_out_.data(), atty_.data(), p + o.o_proj, none, 1, C, C);
  residual_forward(res2_.data(), x_.data(), branch_out_.data(), c);
  rmsnorm_forward(ln_.data(), rstd_.data(), res2_.data(), p + o.post_norm, 1, C, cfg.norm_eps);
  matmul_forward(fch_.data(), ln_.data(), p + o.gate_proj, none, 1, C, F_);
  matmul_forward(fch_gelu_.data(), ln_.data(), p + o.up_proj, none, 1, C, F_);
  swiglu_forward(swiglu_.data(), fch_.data(), fch_gelu_.data(), static_cast<std::size_t>(F_));
  matmul_forward(branch_out_.data(), swiglu_.data(), p + o.down_proj, none, 1, F_, C);
  residual_forward(x_.data(), res2_.data(), branch_out_.data(), c);
}

template <typename T>
std::span<const T> KvDecoder<T>::step(std::int32_t token, std::span<const T* const> params) {
  if (params.size() != static_cast<std::size_t>(layout_.num_units())) {
    throw_internal("KvDecoder::step: expected one pointer per unit (" + std::to_string(layout_.num_units()) +
                   "), got " + std::to_string(params.size()));
  }
  if (token < 0 || token >= V_) {
    throw_data("token id " + std::to_string(token) + " is outside the vocabulary [0, " + std::to_string(V_) + ")");
  }
  if (position_ >= capacity()) {
    throw_config("the key/value cache is full: position " + std::to_string(position_) +
                 " is beyond model.block_size (" + std::to_string(capacity()) + ")");
  }
  const T* emb = params[ModelLayout::embedding_unit()];
  const EmbeddingOffsets& e = layout_.embedding_offsets();
  const T* fin = params[layout_.final_norm_unit()];
  const FinalNormOffsets& f = layout_.final_norm_offsets();
  if (layout_.config().llama()) {
    encoder_forward(x_.data(), &token, emb + e.wte, static_cast<const T*>(nullptr), 1, 1, C_);
    for (int i = 0; i < L_; ++i) llama_block_step(i, params[ModelLayout::block_unit(i)]);
    rmsnorm_forward(ln_.data(), rstd_.data(), x_.data(), fin + f.weight, 1, C_, layout_.config().norm_eps);
    lm_head_forward(logits_.data(), ln_.data(), f.head != kNoOffset ? fin + f.head : emb + e.wte, 1, C_, V_, Vp_);
  } else {
    // wpe row `position_` as the row 0 of a one-position sequence
    encoder_forward(x_.data(), &token, emb + e.wte, emb + e.wpe + static_cast<std::size_t>(position_) * C_, 1, 1, C_);
    for (int i = 0; i < L_; ++i) block_step(i, params[ModelLayout::block_unit(i)]);
    layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), x_.data(), fin + f.weight, fin + f.bias, 1, C_);
    lm_head_forward(logits_.data(), ln_.data(), emb + e.wte, 1, C_, V_, Vp_);
  }
  ++position_;
  return logits_.span().first(static_cast<std::size_t>(V_));
}

template class KvDecoder<float>;
template class KvDecoder<double>;

}  // namespace hsdp::model
