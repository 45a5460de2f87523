#include "hsdp/model/cuda/gpt.hpp"

#include "hsdp/model/cuda/layers.hpp"

namespace hsdp::model::cuda {

namespace dc = hsdp::device::cuda;

std::vector<std::size_t> unit_offsets(const ModelLayout& layout) {
  std::vector<std::size_t> offsets;
  std::size_t base = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    offsets.push_back(base);
    base += layout.unit(u).numel;
  }
  return offsets;
}

GptCuda::BlockActivations::BlockActivations(std::size_t N, std::size_t C, std::size_t att_n)
    : ln1(N * C),
      qkv(N * 3 * C),
      att(att_n),
      atty(N * C),
      attproj(N * C),
      residual2(N * C),
      ln2(N * C),
      fch(N * 4 * C),
      fch_gelu(N * 4 * C),
      fcproj(N * C),
      residual3(N * C),
      ln1_mean(N),
      ln1_rstd(N),
      ln2_mean(N),
      ln2_rstd(N) {}

std::size_t GptCuda::BlockActivations::bytes() const {
  std::size_t total = 0;
  for (const Bf16Buffer* b :
       {&ln1, &qkv, &att, &atty, &attproj, &residual2, &ln2, &fch, &fch_gelu, &fcproj, &residual3})
    total += b->size_bytes();
  for (const FloatBuffer* b : {&ln1_mean, &ln1_rstd, &ln2_mean, &ln2_rstd}) total += b->size_bytes();
  return total;
}

GptCuda::GptCuda(const ModelLayout& layout, int B, int T)
    : layout_(layout),
      cfg_(layout.config()),
      B_(B),
      T_(T),
      N_(static_cast<std::size_t>(B) * static_cast<std::size_t>(T)),
      total_(layout.total_numel()),
      unit_base_(unit_offsets(layout)),
      encoded_(N_ * C()),
      lnf_(N_ * C()),
      logits_(N_ * static_cast<std::size_t>(cfg_.padded_vocab_size)),
      lnf_mean_(N_),
      lnf_rstd_(N_),
      losses_(N_),
      dresidual_(N_ * C()),
      d_ln_(N_ * C()),
      d_atty_(N_ * C()),
      d_qkv_(N_ * 3 * C()),
      d_fch_(N_ * 4 * C()),
      d_fch_gelu_(N_ * 4 * C()),
      column_scratch_(column_sum_scratch_floats(4 * cfg_.n_embd, 2)),
      att_scratch_(attention_scratch_bytes(T, cfg_.n_head)) {
  const std::size_t att_n = static_cast<std::size_t>(B) * static_cast<std::size_t>(cfg_.n_head) *
                            static_cast<std::size_t>(T) * static_cast<std::size_t>(T);
  blocks_.reserve(static_cast<std::size_t>(cfg_.n_layer));
  for (int l = 0; l < cfg_.n_layer; ++l) blocks_.emplace_back(N_, C(), att_n);
  activation_bytes_ = dc::BlasLt::kDefaultWorkspaceBytes;
  for (const auto& b : blocks_) activation_bytes_ += b.bytes();
  for (const Bf16Buffer* b :
       {&encoded_, &lnf_, &logits_, &dresidual_, &d_ln_, &d_atty_, &d_qkv_, &d_fch_, &d_fch_gelu_})
    activation_bytes_ += b->size_bytes();
  for (const FloatBuffer* b : {&lnf_mean_, &lnf_rstd_, &losses_, &column_scratch_})
    activation_bytes_ += b->size_bytes();
  activation_bytes_ += att_scratch_.size_bytes();
}

void GptCuda::forward(const bf16_t* weights, const std::int32_t* tokens, const std::int32_t* targets,
                      float dloss_per_row, cudaStream_t stream) {
  const int C = cfg_.n_embd, NH = cfg_.n_head, N = static_cast<int>(N_);
  const auto& e = layout_.embedding_offsets();
  const auto& o = layout_.block_offsets();
  const auto w = [&](int unit, std::size_t offset) { return weights + unit_offset(unit) + offset; };
  const int emb = ModelLayout::embedding_unit();
  encoder_forward(encoded_.data(), tokens, w(emb, e.wte), w(emb, e.wpe), B_, T_, C, stream);
  const bf16_t* x = encoded_.data();
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const int u = ModelLayout::block_unit(l);
    BlockActivations& a = blocks_[static_cast<std::size_t>(l)];
    layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, w(u, o.ln_1_weight), w(u, o.ln_1_bias), N,
                      C, stream);
    matmul_forward(blas_, a.qkv.data(), a.ln1.data(), w(u, o.c_attn_weight), w(u, o.c_attn_bias), N, C, 3 * C, stream);
    attention_forward(blas_, a.atty.data(), a.att.data(), a.qkv.data(), att_scratch_.data(), B_, T_, C, NH, stream);
    matmul_forward(blas_, a.attproj.data(), a.atty.data(), w(u, o.attn_proj_weight), w(u, o.attn_proj_bias), N, C, C,
                   stream);
    residual_forward(a.residual2.data(), x, a.attproj.data(), N_ * C, stream);
    layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.residual2.data(), w(u, o.ln_2_weight),
                      w(u, o.ln_2_bias), N, C, stream);
    matmul_forward(blas_, a.fch.data(), a.ln2.data(), w(u, o.c_fc_weight), w(u, o.c_fc_bias), N, C, 4 * C, stream);
    gelu_forward(a.fch_gelu.data(), a.fch.data(), N_ * 4 * C, stream);
    matmul_forward(blas_, a.fcproj.data(), a.fch_gelu.data(), w(u, o.mlp_proj_weight), w(u, o.mlp_proj_bias), N, 4 * C,
                   C, stream);
    residual_forward(a.residual3.data(), a.residual2.data(), a.fcproj.data(), N_ * C, stream);
    x = a.residual3.data();
  }
  const int fin = layout_.final_norm_unit();
  const auto& f = layout_.final_norm_offsets();
  layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), x, w(fin, f.weight), w(fin, f.bias), N, C, stream);
  lm_head_forward(blas_, logits_.data(), lnf_.data(), w(emb, e.wte), N, C, cfg_.vocab_size, cfg_.padded_vocab_size,
                  stream);
  // Loss and d-logits in one pass, written over the logits.
  softmax_xent_forward_backward(logits_.data(), losses_.data(), logits_.data(), targets, dloss_per_row, N,
                                cfg_.vocab_size, cfg_.padded_vocab_size, stream);
}

// The residual stream's gradient lives in dresidual_: each residual add passes it through, and each layer norm
// backward adds its input gradient into it.
void GptCuda::backward(const bf16_t* weights, float* grads, const std::int32_t* tokens, cudaStream_t stream,
                       const std::function<void(int unit)>& on_unit_done) {
  const int C = cfg_.n_embd, NH = cfg_.n_head, N = static_cast<int>(N_);
  const auto& e = layout_.embedding_offsets();
  const auto& o = layout_.block_offsets();
  const auto& f = layout_.final_norm_offsets();
  const auto w = [&](int unit, std::size_t offset) { return weights + unit_offset(unit) + offset; };
  const auto g = [&](int unit, std::size_t offset) { return grads + unit_offset(unit) + offset; };
  const auto done = [&](int unit) {
    if (on_unit_done) on_unit_done(unit);
  };
  const int emb = ModelLayout::embedding_unit(), fin = layout_.final_norm_unit();
  float* scratch = column_scratch_.data();
  dc::zero_on_device(d_ln_.data(), N_ * C, stream);
  lm_head_backward(blas_, d_ln_.data(), g(emb, e.wte), logits_.data(), lnf_.data(), w(emb, e.wte), N, C,
                   cfg_.vocab_size, cfg_.padded_vocab_size, stream);
  dc::zero_on_device(dresidual_.data(), N_ * C, stream);
  const bf16_t* last = cfg_.n_layer > 0 ? blocks_.back().residual3.data() : encoded_.data();
  layernorm_backward(dresidual_.data(), g(fin, f.weight), g(fin, f.bias), scratch, d_ln_.data(), last, w(fin, f.weight),
                     lnf_mean_.data(), lnf_rstd_.data(), N, C, stream);
  done(fin);
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    const int u = ModelLayout::block_unit(l);
    BlockActivations& a = blocks_[static_cast<std::size_t>(l)];
    const bf16_t* x = l > 0 ? blocks_[static_cast<std::size_t>(l - 1)].residual3.data() : encoded_.data();
    dc::zero_on_device(d_fch_gelu_.data(), N_ * 4 * C, stream);
    matmul_backward(blas_, d_fch_gelu_.data(), g(u, o.mlp_proj_weight), g(u, o.mlp_proj_bias), scratch,
                    dresidual_.data(), a.fch_gelu.data(), w(u, o.mlp_proj_weight), N, 4 * C, C, stream);
    dc::zero_on_device(d_fch_.data(), N_ * 4 * C, stream);
    gelu_backward(d_fch_.data(), a.fch.data(), d_fch_gelu_.data(), N_ * 4 * C, stream);
    dc::zero_on_device(d_ln_.data(), N_ * C, stream);
    matmul_backward(blas_, d_ln_.data(), g(u, o.c_fc_weight), g(u, o.c_fc_bias), scratch, d_fch_.data(), a.ln2.data(),
                    w(u, o.c_fc_weight), N, C, 4 * C, stream);
    layernorm_backward(dresidual_.data(), g(u, o.ln_2_weight), g(u, o.ln_2_bias), scratch, d_ln_.data(),
                       a.residual2.data(), w(u, o.ln_2_weight), a.ln2_mean.data(), a.ln2_rstd.data(), N, C, stream);
    dc::zero_on_device(d_atty_.data(), N_ * C, stream);
    matmul_backward(blas_, d_atty_.data(), g(u, o.attn_proj_weight), g(u, o.attn_proj_bias), scratch, dresidual_.data(),
                    a.atty.data(), w(u, o.attn_proj_weight), N, C, C, stream);
    dc::zero_on_device(d_qkv_.data(), N_ * 3 * C, stream);
    attention_backward(blas_, d_qkv_.data(), att_scratch_.data(), d_atty_.data(), a.qkv.data(), a.att.data(), B_, T_, C,
                       NH, stream);
    dc::zero_on_device(d_ln_.data(), N_ * C, stream);
    matmul_backward(blas_, d_ln_.data(), g(u, o.c_attn_weight), g(u, o.c_attn_bias), scratch, d_qkv_.data(),
                    a.ln1.data(), w(u, o.c_attn_weight), N, C, 3 * C, stream);
    layernorm_backward(dresidual_.data(), g(u, o.ln_1_weight), g(u, o.ln_1_bias), scratch, d_ln_.data(), x,
                       w(u, o.ln_1_weight), a.ln1_mean.data(), a.ln1_rstd.data(), N, C, stream);
    done(u);
  }
  encoder_backward(g(emb, e.wte), g(emb, e.wpe), dresidual_.data(), tokens, B_, T_, C, stream);
  done(emb);
}

}  // namespace hsdp::model::cuda
