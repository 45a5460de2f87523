#include "hsdp/model/cuda/gpt.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "hsdp/core/error.hpp"
#include "hsdp/model/cuda/kernel_timer.hpp"
#include "hsdp/model/cuda/layers.hpp"
#include "hsdp/model/gpu_activations.hpp"

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

namespace {

// The CPU model's checks (model::Gpt), before anything is allocated.
int checked_seq_len(const ModelLayout& layout, int B, int T) {
  if (B <= 0) throw_config("train.micro_batch (" + std::to_string(B) + ") must be positive");
  if (T <= 0) throw_config("train.seq_len (" + std::to_string(T) + ") must be positive");
  if (T > layout.config().block_size) {
    throw_config("train.seq_len (" + std::to_string(T) + ") exceeds model.block_size (" +
                 std::to_string(layout.config().block_size) + ")");
  }
  return T;
}

}  // namespace

template <typename T>
GptCuda<T>::GptCuda(const ModelLayout& layout, int B, int seq_len, cudaStream_t stream, bool activation_checkpointing)
    : layout_(layout),
      cfg_(layout.config()),
      B_(B),
      T_(checked_seq_len(layout, B, seq_len)),
      llama_(layout.config().llama()),
      K_(layout.config().kv_heads() * layout.config().head_size()),
      F_(layout.config().ffn()),
      residual_epilogue_(layout.config().fused_epilogues),
      gelu_epilogue_(gpu_gelu_in_epilogue(activation_shape(layout.config()))),
      N_(static_cast<std::size_t>(B) * static_cast<std::size_t>(seq_len)),
      total_(layout.total_numel()),
      checkpointing_(activation_checkpointing),
      stream_(stream),
      unit_base_(unit_offsets(layout)),
      blas_(dc::BlasLt::kDefaultWorkspaceBytes) {
  static_assert(dc::BlasLt::kDefaultWorkspaceBytes == kGpuBlasWorkspaceBytes);
  token_staging_.ids = dc::PinnedBuffer<std::int32_t>(N_);
  target_staging_.ids = dc::PinnedBuffer<std::int32_t>(N_);
  if (cfg_.fused_attention && !fused_attention_supports(cfg_.head_size())) {
    throw_config("model.attention=fused takes head sizes up to 128; model.n_embd / model.n_head is " +
                 std::to_string(cfg_.head_size()) + " (use model.attention=unfused)");
  }
  if (llama_) {  // q, k and v run as one product over their weights back to back (ModelLayout's order)
    const auto& o = layout.llama_block_offsets();
    const std::size_t c = static_cast<std::size_t>(cfg_.n_embd), k = static_cast<std::size_t>(K_);
    if (o.k_proj != o.q_proj + c * c || o.v_proj != o.k_proj + k * c) {
      throw_internal("GptCuda: q_proj, k_proj and v_proj are not back to back in the block unit");
    }
  }
  const GpuActivationArena plan = gpu_activation_arena(activation_shape(cfg_), B, T_, checkpointing_, sizeof(T));
  arena_ = dc::DeviceBuffer<std::uint8_t>(plan.bytes);
  // Points a slice member at its place in the arena (its element type is the member's).
  const auto place = [this](auto& member, const GpuActivationArena::Slice& slice) {
    member.ptr = reinterpret_cast<decltype(member.ptr)>(arena_.data() + slice.offset);
  };
  place(ids_, plan[GpuSlice::ids]);
  place(target_ids_, plan[GpuSlice::target_ids]);
  place(residuals_, plan[GpuSlice::residuals]);
  place(lnf_, plan[GpuSlice::lnf]);
  place(logits_, plan[GpuSlice::logits]);
  place(lnf_mean_, plan[GpuSlice::lnf_mean]);
  place(lnf_rstd_, plan[GpuSlice::lnf_rstd]);
  place(losses_, plan[GpuSlice::losses]);
  place(dresidual_, plan[GpuSlice::dresidual]);
  place(d_ln_, plan[GpuSlice::d_ln]);
  place(d_atty_, plan[GpuSlice::d_atty]);
  place(d_qkv_, plan[GpuSlice::d_qkv]);
  place(d_fch_, plan[GpuSlice::d_fch]);
  place(d_fch_gelu_, plan[GpuSlice::d_fch_gelu]);
  place(d_up_, plan[GpuSlice::d_up]);
  place(column_scratch_, plan[GpuSlice::column_scratch]);
  place(att_scratch_, plan[GpuSlice::att_scratch]);
  using A = BlockActivations;
  using S = GpuBlockSlice;
  static constexpr std::pair<Buffer A::*, S> kBuffers[] = {{&A::ln1, S::ln1},           {&A::qkv, S::qkv},
                                                           {&A::att, S::att},           {&A::atty, S::atty},
                                                           {&A::attproj, S::attproj},   {&A::residual2, S::residual2},
                                                           {&A::ln2, S::ln2},           {&A::fch, S::fch},
                                                           {&A::fch_gelu, S::fch_gelu}, {&A::fcproj, S::fcproj},
                                                           {&A::swiglu, S::swiglu}};
  static constexpr std::pair<FloatBuffer A::*, S> kStatistics[] = {{&A::ln1_mean, S::ln1_mean},
                                                                   {&A::ln1_rstd, S::ln1_rstd},
                                                                   {&A::ln2_mean, S::ln2_mean},
                                                                   {&A::ln2_rstd, S::ln2_rstd}};
  blocks_.resize(plan.blocks.size());
  for (std::size_t set = 0; set < blocks_.size(); ++set) {
    for (const auto& [member, slice] : kBuffers) place(blocks_[set].*member, plan.block(static_cast<int>(set), slice));
    for (const auto& [member, slice] : kStatistics)
      place(blocks_[set].*member, plan.block(static_cast<int>(set), slice));
  }
  activation_bytes_ = plan.bytes + dc::BlasLt::kDefaultWorkspaceBytes;
}

template <typename T>
DType GptCuda<T>::compute_dtype() const {
  return std::is_same_v<T, float> ? DType::f32 : DType::bf16;
}

template <typename T>
void GptCuda<T>::mark(const char* kind, cudaStream_t stream) {
  if (timer_ != nullptr) timer_->mark(kind, stream);
}

template <typename T>
void GptCuda<T>::check_block(int block) const {
  if (block < 0 || block >= cfg_.n_layer) {
    throw_internal("block index " + std::to_string(block) + " out of range [0, " + std::to_string(cfg_.n_layer) + ")");
  }
}

template <typename T>
void GptCuda<T>::upload_ids(Slice<std::int32_t> dest, IdStaging& staging, std::span<const std::int32_t> ids,
                            const char* what) {
  if (ids.size() != N_) {
    throw_internal(std::string(what) + ": expected B*T = " + std::to_string(N_) + " ids, got " +
                   std::to_string(ids.size()));
  }
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= cfg_.vocab_size) {
      throw_data(std::string(what) + " id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                 " is outside the vocabulary [0, " + std::to_string(cfg_.vocab_size) + ")");
    }
  }
  staging.copied.synchronize();  // its last copy (returns at once before the first record)
  std::copy(ids.begin(), ids.end(), staging.ids.data());
  dc::copy_to_device(dest.data(), staging.ids.data(), N_, stream_);
  staging.copied.record(stream_);
}

// ----------------------------------------------------------------------------------------------- the passes

template <typename T>
void GptCuda<T>::embed(const std::int32_t* tokens, const T* emb, cudaStream_t stream) {
  const auto& e = layout_.embedding_offsets();
  mark("encoder", stream);
  encoder_forward(residual(0), tokens, emb + e.wte, llama_ ? nullptr : emb + e.wpe, B_, T_, cfg_.n_embd, stream);
  tokens_in_use_ = tokens;
  resident_block_ = -1;
  mark(nullptr, stream);
}

template <typename T>
void GptCuda<T>::block_forward(int block, const T* p, cudaStream_t stream) {
  if (llama_) {
    llama_block_forward(block, p, stream);
    return;
  }
  const int C = cfg_.n_embd, NH = cfg_.n_head, N = static_cast<int>(N_);
  const auto& o = layout_.block_offsets();
  BlockActivations& a = activations(block);
  const T* x = residual(block);
  mark("layernorm", stream);
  layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, p + o.ln_1_weight, p + o.ln_1_bias, N, C,
                    stream);
  mark("matmul", stream);
  matmul_forward(blas_, a.qkv.data(), a.ln1.data(), p + o.c_attn_weight, p + o.c_attn_bias, N, C, 3 * C, stream);
  mark("attention", stream);
  attend(a, a.qkv.data(), NH, NH, C / NH, stream);
  project_residual(a.residual2.data(), x, a.atty.data(), a.attproj.data(), p + o.attn_proj_weight, p + o.attn_proj_bias,
                   C, stream);
  mark("layernorm", stream);
  layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.residual2.data(), p + o.ln_2_weight,
                    p + o.ln_2_bias, N, C, stream);
  mark("matmul", stream);
  if (gelu_epilogue_) {
    matmul_gelu_forward(blas_, a.fch_gelu.data(), a.fch.data(), a.ln2.data(), p + o.c_fc_weight, p + o.c_fc_bias, N, C,
                        4 * C, stream);
  } else {
    matmul_forward(blas_, a.fch.data(), a.ln2.data(), p + o.c_fc_weight, p + o.c_fc_bias, N, C, 4 * C, stream);
    mark("elementwise", stream);
    gelu_forward(a.fch_gelu.data(), a.fch.data(), N_ * 4 * C, stream);
  }
  project_residual(residual(block + 1), a.residual2.data(), a.fch_gelu.data(), a.fcproj.data(), p + o.mlp_proj_weight,
                   p + o.mlp_proj_bias, 4 * C, stream);
  resident_block_ = block;
  mark(nullptr, stream);
}

// Gpt<T>::llama_block_forward_into's sequence: RMSNorm, q, k, v, RoPE on q and k, grouped-query attention, o_proj,
// residual, RMSNorm, gate and up, SwiGLU, down_proj, residual.
template <typename T>
void GptCuda<T>::llama_block_forward(int block, const T* p, cudaStream_t stream) {
  const int C = cfg_.n_embd, NH = cfg_.n_head, NKV = cfg_.kv_heads(), hs = cfg_.head_size(), N = static_cast<int>(N_);
  const int RS = C + 2 * K_;
  const auto& o = layout_.llama_block_offsets();
  BlockActivations& a = activations(block);
  const T* x = residual(block);
  const auto eps = static_cast<float>(cfg_.norm_eps);
  T* q = a.qkv.data();
  mark("rmsnorm", stream);
  rmsnorm_forward(a.ln1.data(), a.ln1_rstd.data(), x, p + o.input_norm, N, C, eps, stream);
  // q, k and v as one product: their weights lie back to back in the unit ([C + 2K, C], q_proj's rows first).
  mark("matmul", stream);
  matmul_forward(blas_, q, a.ln1.data(), p + o.q_proj, static_cast<const T*>(nullptr), N, C, RS, stream);
  mark("elementwise", stream);
  rope_forward(q, B_, T_, NH, hs, RS, cfg_.rope_theta, stream);
  mark("elementwise", stream);
  rope_forward(q + C, B_, T_, NKV, hs, RS, cfg_.rope_theta, stream);
  mark("attention", stream);
  attend(a, q, NH, NKV, hs, stream);
  project_residual(a.residual2.data(), x, a.atty.data(), a.attproj.data(), p + o.o_proj, nullptr, C, stream);
  mark("rmsnorm", stream);
  rmsnorm_forward(a.ln2.data(), a.ln2_rstd.data(), a.residual2.data(), p + o.post_norm, N, C, eps, stream);
  mark("matmul", stream);
  matmul_forward(blas_, a.fch.data(), a.ln2.data(), p + o.gate_proj, static_cast<const T*>(nullptr), N, C, F_, stream);
  mark("matmul", stream);
  matmul_forward(blas_, a.fch_gelu.data(), a.ln2.data(), p + o.up_proj, static_cast<const T*>(nullptr), N, C, F_,
                 stream);
  mark("elementwise", stream);
  swiglu_forward(a.swiglu.data(), a.fch.data(), a.fch_gelu.data(), N_ * F_, stream);
  project_residual(residual(block + 1), a.residual2.data(), a.swiglu.data(), a.fcproj.data(), p + o.down_proj, nullptr,
                   F_, stream);
  resident_block_ = block;
  mark(nullptr, stream);
}

// out = x + inp @ weight^T (+ bias): a block's output projection and its residual add, in the GEMM's epilogue
// (model.gemm_epilogue=fused) or as the product into proj, then the add.
template <typename T>
void GptCuda<T>::project_residual(T* out, const T* x, const T* inp, T* proj, const T* weight, const T* bias, int IC,
                                  cudaStream_t stream) {
  const int C = cfg_.n_embd, N = static_cast<int>(N_);
  mark("matmul", stream);
  if (residual_epilogue_) {
    matmul_residual_forward(blas_, out, x, inp, weight, bias, N, IC, C, stream);
    return;
  }
  matmul_forward(blas_, proj, inp, weight, bias, N, IC, C, stream);
  mark("elementwise", stream);
  residual_forward(out, x, proj, N_ * C, stream);
}

// Attention over a block's q | k | v rows into atty: the unfused cuBLASLt path (probabilities kept in att) or the
// fused kernels (att holds the rows' log-sum-exp).
template <typename T>
void GptCuda<T>::attend(BlockActivations& a, const T* qkv, int NH, int NKV, int hs, cudaStream_t stream) {
  if (cfg_.fused_attention) {
    fused_attention_forward(a.atty.data(), reinterpret_cast<float*>(a.att.data()), qkv, B_, T_, NH, NKV, hs, stream);
  } else {
    gqa_attention_forward(blas_, a.atty.data(), a.att.data(), qkv, att_scratch_.data(), B_, T_, NH, NKV, hs, stream);
  }
}

template <typename T>
void GptCuda<T>::attend_backward(BlockActivations& a, int NH, int NKV, int hs, cudaStream_t stream) {
  if (cfg_.fused_attention) {  // writes all of d_qkv
    fused_attention_backward(d_qkv_.data(), att_scratch_.data(), d_atty_.data(), a.atty.data(), a.qkv.data(),
                             reinterpret_cast<const float*>(a.att.data()), B_, T_, NH, NKV, hs, stream, Grad::write);
  } else {  // adds into d_qkv from zero: the several products of each key/value head add into their columns
    mark("zero fill", stream);
    dc::zero_on_device(d_qkv_.data(), N_ * static_cast<std::size_t>(cfg_.n_embd + 2 * K_), stream);
    mark("attention", stream);
    gqa_attention_backward(blas_, d_qkv_.data(), att_scratch_.data(), d_atty_.data(), a.qkv.data(), a.att.data(), B_,
                           T_, NH, NKV, hs, stream);
  }
}

template <typename T>
const T* GptCuda<T>::head_weight(const T* lnf, const T* emb) const {
  const std::size_t head = layout_.final_norm_offsets().head;
  return head != kNoOffset ? lnf + head : emb + layout_.embedding_offsets().wte;
}

template <typename T>
float* GptCuda<T>::head_grads(float* lnf_grads, float* emb_grads) const {
  const std::size_t head = layout_.final_norm_offsets().head;
  return head != kNoOffset ? lnf_grads + head : emb_grads + layout_.embedding_offsets().wte;
}

template <typename T>
void GptCuda<T>::head_forward(const std::int32_t* targets, const T* lnf, const T* emb, float dloss_per_row,
                              bool for_backward, cudaStream_t stream) {
  const int C = cfg_.n_embd, N = static_cast<int>(N_);
  const auto& f = layout_.final_norm_offsets();
  if (llama_) {
    mark("rmsnorm", stream);
    rmsnorm_forward(lnf_.data(), lnf_rstd_.data(), residual(cfg_.n_layer), lnf + f.weight, N, C,
                    static_cast<float>(cfg_.norm_eps), stream);
  } else {
    mark("layernorm", stream);
    layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), residual(cfg_.n_layer), lnf + f.weight,
                      lnf + f.bias, N, C, stream);
  }
  mark("lm head", stream);
  lm_head_forward(blas_, logits_.data(), lnf_.data(), head_weight(lnf, emb), N, C, cfg_.vocab_size,
                  cfg_.padded_vocab_size, stream);
  if (for_backward) {
    // Loss and d-logits in one pass, written over the logits.
    mark("cross-entropy", stream);
    softmax_xent_forward_backward(logits_.data(), losses_.data(), logits_.data(), targets, dloss_per_row, N,
                                  cfg_.vocab_size, cfg_.padded_vocab_size, stream);
  } else {
    mark("cross-entropy", stream);
    softmax_xent_forward(logits_.data(), losses_.data(), logits_.data(), targets, N, cfg_.vocab_size,
                         cfg_.padded_vocab_size, stream);
  }
  mark(nullptr, stream);
}

// The residual stream's gradient lives in dresidual_: each residual add passes it through, and each layer norm
// backward adds its input gradient into it.
template <typename T>
void GptCuda<T>::head_backward(const T* lnf, const T* emb, float* lnf_grads, float* emb_grads, cudaStream_t stream) {
  const int C = cfg_.n_embd, N = static_cast<int>(N_);
  const auto& f = layout_.final_norm_offsets();
  mark("zero fill", stream);
  dc::zero_on_device(d_ln_.data(), N_ * C, stream);
  mark("lm head", stream);
  lm_head_backward(blas_, d_ln_.data(), head_grads(lnf_grads, emb_grads), logits_.data(), lnf_.data(),
                   head_weight(lnf, emb), N, C, cfg_.vocab_size, cfg_.padded_vocab_size, stream);
  mark("zero fill", stream);
  dc::zero_on_device(dresidual_.data(), N_ * C, stream);
  if (llama_) {
    mark("rmsnorm", stream);
    rmsnorm_backward(dresidual_.data(), lnf_grads + f.weight, column_scratch_.data(), d_ln_.data(),
                     residual(cfg_.n_layer), lnf + f.weight, lnf_rstd_.data(), N, C, stream);
  } else {
    mark("layernorm", stream);
    layernorm_backward(dresidual_.data(), lnf_grads + f.weight, lnf_grads + f.bias, column_scratch_.data(),
                       d_ln_.data(), residual(cfg_.n_layer), lnf + f.weight, lnf_mean_.data(), lnf_rstd_.data(), N, C,
                       stream);
  }
  mark(nullptr, stream);
}

template <typename T>
void GptCuda<T>::block_backward(int block, const T* p, float* g, cudaStream_t stream) {
  // Recompute this block's activations from its kept input: the same kernels, the same values as the forward.
  if (checkpointing_ && resident_block_ != block) block_forward(block, p, stream);
  if (llama_) {
    llama_block_backward(block, p, g, stream);
    return;
  }
  const int C = cfg_.n_embd, NH = cfg_.n_head, N = static_cast<int>(N_);
  const auto& o = layout_.block_offsets();
  BlockActivations& a = activations(block);
  const T* x = residual(block);
  float* scratch = column_scratch_.data();
  // Each activation gradient's first writer writes it (Grad::write): no zero-fill passes but d_qkv's with the unfused
  // attention, whose several products add into it.
  constexpr Grad write = Grad::write;
  mark("matmul", stream);
  if (gelu_epilogue_) {
    matmul_dgelu_backward(blas_, d_fch_.data(), g + o.mlp_proj_weight, g + o.mlp_proj_bias, scratch, dresidual_.data(),
                          a.fch_gelu.data(), a.fch.data(), p + o.mlp_proj_weight, N, 4 * C, C, stream);
  } else {
    matmul_backward(blas_, d_fch_gelu_.data(), g + o.mlp_proj_weight, g + o.mlp_proj_bias, scratch, dresidual_.data(),
                    a.fch_gelu.data(), p + o.mlp_proj_weight, N, 4 * C, C, stream, write);
    mark("elementwise", stream);
    gelu_backward(d_fch_.data(), a.fch.data(), d_fch_gelu_.data(), N_ * 4 * C, stream, write);
  }
  mark("matmul", stream);
  matmul_backward(blas_, d_ln_.data(), g + o.c_fc_weight, g + o.c_fc_bias, scratch, d_fch_.data(), a.ln2.data(),
                  p + o.c_fc_weight, N, C, 4 * C, stream, write);
  mark("layernorm", stream);
  layernorm_backward(dresidual_.data(), g + o.ln_2_weight, g + o.ln_2_bias, scratch, d_ln_.data(), a.residual2.data(),
                     p + o.ln_2_weight, a.ln2_mean.data(), a.ln2_rstd.data(), N, C, stream);
  mark("matmul", stream);
  matmul_backward(blas_, d_atty_.data(), g + o.attn_proj_weight, g + o.attn_proj_bias, scratch, dresidual_.data(),
                  a.atty.data(), p + o.attn_proj_weight, N, C, C, stream, write);
  mark("attention", stream);
  attend_backward(a, NH, NH, C / NH, stream);
  mark("matmul", stream);
  matmul_backward(blas_, d_ln_.data(), g + o.c_attn_weight, g + o.c_attn_bias, scratch, d_qkv_.data(), a.ln1.data(),
                  p + o.c_attn_weight, N, C, 3 * C, stream, write);
  mark("layernorm", stream);
  layernorm_backward(dresidual_.data(), g + o.ln_1_weight, g + o.ln_1_bias, scratch, d_ln_.data(), x, p + o.ln_1_weight,
                     a.ln1_mean.data(), a.ln1_rstd.data(), N, C, stream);
  mark(nullptr, stream);
}

// The forward's products in reverse.
template <typename T>
void GptCuda<T>::llama_block_backward(int block, const T* p, float* g, cudaStream_t stream) {
  const int C = cfg_.n_embd, NH = cfg_.n_head, NKV = cfg_.kv_heads(), hs = cfg_.head_size(), N = static_cast<int>(N_);
  const int RS = C + 2 * K_;
  const auto& o = layout_.llama_block_offsets();
  BlockActivations& a = activations(block);
  const T* x = residual(block);
  float* scratch = column_scratch_.data();
  float* const none = nullptr;
  const std::size_t NF = N_ * static_cast<std::size_t>(F_);
  // y = res2 + down(swiglu(gate(ln2), up(ln2)))
  constexpr Grad write = Grad::write;  // each activation gradient's first writer writes it (d_qkv aside)
  mark("matmul", stream);
  matmul_backward(blas_, d_fch_gelu_.data(), g + o.down_proj, none, scratch, dresidual_.data(), a.swiglu.data(),
                  p + o.down_proj, N, F_, C, stream, write);  // d swiglu
  mark("elementwise", stream);
  swiglu_backward(d_fch_.data(), d_up_.data(), d_fch_gelu_.data(), a.fch.data(), a.fch_gelu.data(), NF, stream,
                  write);  // d gate, d up
  mark("matmul", stream);
  matmul_backward(blas_, d_ln_.data(), g + o.gate_proj, none, scratch, d_fch_.data(), a.ln2.data(), p + o.gate_proj, N,
                  C, F_, stream, write);
  mark("matmul", stream);
  matmul_backward(blas_, d_ln_.data(), g + o.up_proj, none, scratch, d_up_.data(), a.ln2.data(), p + o.up_proj, N, C,
                  F_, stream);
  mark("rmsnorm", stream);
  rmsnorm_backward(dresidual_.data(), g + o.post_norm, scratch, d_ln_.data(), a.residual2.data(), p + o.post_norm,
                   a.ln2_rstd.data(), N, C, stream);
  // res2 = x + o(attention(rope(q(ln1)), rope(k(ln1)), v(ln1)))
  mark("matmul", stream);
  matmul_backward(blas_, d_atty_.data(), g + o.o_proj, none, scratch, dresidual_.data(), a.atty.data(), p + o.o_proj, N,
                  C, C, stream, write);
  mark("attention", stream);
  attend_backward(a, NH, NKV, hs, stream);
  mark("elementwise", stream);
  rope_backward(d_qkv_.data(), B_, T_, NH, hs, RS, cfg_.rope_theta, stream);
  mark("elementwise", stream);
  rope_backward(d_qkv_.data() + C, B_, T_, NKV, hs, RS, cfg_.rope_theta, stream);
  // q_proj, k_proj, v_proj are back to back in the unit: one [C + 2K, C] product, as in the forward.
  mark("matmul", stream);
  matmul_backward(blas_, d_ln_.data(), g + o.q_proj, none, scratch, d_qkv_.data(), a.ln1.data(), p + o.q_proj, N, C, RS,
                  stream, write);
  mark("rmsnorm", stream);
  rmsnorm_backward(dresidual_.data(), g + o.input_norm, scratch, d_ln_.data(), x, p + o.input_norm, a.ln1_rstd.data(),
                   N, C, stream);
  mark(nullptr, stream);
}

template <typename T>
void GptCuda<T>::embedding_backward(float* emb_grads, cudaStream_t stream) {
  const auto& e = layout_.embedding_offsets();
  mark("encoder", stream);
  encoder_backward(emb_grads + e.wte, llama_ ? nullptr : emb_grads + e.wpe, dresidual_.data(), tokens_in_use_, B_, T_,
                   cfg_.n_embd, stream);
  mark(nullptr, stream);
}

// ------------------------------------------------------------------------------------------------- by unit

namespace {

template <typename T>
const T* typed(const void* p) {
  return static_cast<const T*>(p);
}

}  // namespace

template <typename T>
void GptCuda<T>::forward_embedding(std::span<const std::int32_t> tokens, const void* emb_params) {
  upload_ids(ids_, token_staging_, tokens, "token");
  embed(ids_.data(), typed<T>(emb_params), stream_);
}

template <typename T>
void GptCuda<T>::forward_block(int block, const void* block_params) {
  check_block(block);
  block_forward(block, typed<T>(block_params), stream_);
}

template <typename T>
void GptCuda<T>::forward_head(std::span<const std::int32_t> targets, const void* lnf_params, const void* emb_params,
                              float dloss, double* loss) {
  upload_ids(target_ids_, target_staging_, targets, "target");
  head_forward(target_ids_.data(), typed<T>(lnf_params), typed<T>(emb_params), dloss / static_cast<float>(N_), true,
               stream_);
  mean_loss(loss, losses_.data(), static_cast<int>(N_), stream_);
}

template <typename T>
void GptCuda<T>::evaluate_head(std::span<const std::int32_t> targets, const void* lnf_params, const void* emb_params,
                               double* loss) {
  upload_ids(target_ids_, target_staging_, targets, "target");
  head_forward(target_ids_.data(), typed<T>(lnf_params), typed<T>(emb_params), 0.0f, false, stream_);
  mean_loss(loss, losses_.data(), static_cast<int>(N_), stream_);
}

template <typename T>
void GptCuda<T>::backward_head(const void* lnf_params, const void* emb_params, float* lnf_grads, float* emb_grads) {
  head_backward(typed<T>(lnf_params), typed<T>(emb_params), lnf_grads, emb_grads, stream_);
}

template <typename T>
void GptCuda<T>::backward_block(int block, const void* block_params, float* block_grads) {
  check_block(block);
  block_backward(block, typed<T>(block_params), block_grads, stream_);
}

template <typename T>
void GptCuda<T>::backward_embedding(float* emb_grads) {
  embedding_backward(emb_grads, stream_);
}

// --------------------------------------------------------------------------------------------- whole model

template <typename T>
void GptCuda<T>::forward(const T* weights, const std::int32_t* tokens, const std::int32_t* targets, float dloss_per_row,
                         cudaStream_t stream) {
  const auto w = [&](int unit) { return weights + unit_offset(unit); };
  embed(tokens, w(ModelLayout::embedding_unit()), stream);
  for (int l = 0; l < cfg_.n_layer; ++l) block_forward(l, w(ModelLayout::block_unit(l)), stream);
  head_forward(targets, w(layout_.final_norm_unit()), w(ModelLayout::embedding_unit()), dloss_per_row, true, stream);
}

template <typename T>
void GptCuda<T>::backward(const T* weights, float* grads, const std::int32_t* tokens, cudaStream_t stream,
                          const std::function<void(int unit)>& on_unit_done) {
  const auto w = [&](int unit) { return weights + unit_offset(unit); };
  const auto g = [&](int unit) { return grads + unit_offset(unit); };
  const auto done = [&](int unit) {
    if (on_unit_done) on_unit_done(unit);
  };
  const int emb = ModelLayout::embedding_unit(), fin = layout_.final_norm_unit();
  tokens_in_use_ = tokens;
  head_backward(w(fin), w(emb), g(fin), g(emb), stream);
  done(fin);
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    const int u = ModelLayout::block_unit(l);
    block_backward(l, w(u), g(u), stream);
    done(u);
  }
  embedding_backward(g(emb), stream);
  done(emb);
}

template class GptCuda<float>;
template class GptCuda<bf16_t>;

}  // namespace hsdp::model::cuda
