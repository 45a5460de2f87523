#include "hsdp/model/gpu_activations.hpp"

#include <algorithm>

namespace hsdp::model {

namespace {

std::size_t aligned(std::size_t bytes) {
  return (bytes + kGpuArenaAlignment - 1) / kGpuArenaAlignment * kGpuArenaAlignment;
}

}  // namespace

std::size_t gpu_attention_scratch_bytes(std::int64_t seq_len, std::int64_t n_head) {
  return static_cast<std::size_t>(n_head * seq_len * seq_len) * 8;
}

std::size_t gpu_column_scratch_floats(std::int64_t columns, int quantities) {
  return static_cast<std::size_t>(quantities) * kGpuColumnChunks * static_cast<std::size_t>(columns);
}

bool gpu_gelu_in_epilogue(const ActivationShape& a) {
  return a.fused_epilogues && a.arch == Arch::gpt2 && a.ffn % kGpuGeluEpilogueMultiple == 0;
}

GpuActivationArena gpu_activation_arena(const ActivationShape& a, std::int64_t micro_batch, std::int64_t seq_len,
                                        bool checkpointing, std::size_t e) {
  const auto n = static_cast<std::size_t>(micro_batch * seq_len);
  const auto c = static_cast<std::size_t>(a.n_embd), f = static_cast<std::size_t>(a.ffn);
  const bool llama = a.arch == Arch::llama;
  const std::size_t qkv = c + 2 * (llama ? static_cast<std::size_t>(a.kv_width) : c);
  const std::size_t llama_f = llama ? f : 0;  // swiglu, d_up
  const std::size_t mean = llama ? 0 : 1;     // LayerNorm's mean; RMSNorm has none
  const auto scores = static_cast<std::size_t>(micro_batch * a.n_head * seq_len * seq_len);
  const auto rows = static_cast<std::size_t>(micro_batch * a.n_head * seq_len);  // fused: one float per row
  const std::size_t att = a.fused_attention ? sizeof(float) * rows : e * scores;
  const std::size_t att_scratch =
      a.fused_attention ? sizeof(float) * rows : gpu_attention_scratch_bytes(seq_len, a.n_head);
  const std::size_t proj = a.fused_epilogues ? 0 : e * n * c;  // attproj, fcproj
  const std::size_t d_fch_gelu = gpu_gelu_in_epilogue(a) ? 0 : e * n * f;
  GpuActivationArena arena;
  const auto take = [&arena](std::size_t bytes) {
    const GpuActivationArena::Slice slice{arena.bytes, bytes};
    arena.bytes += aligned(bytes);
    return slice;
  };
  constexpr std::size_t i32 = sizeof(std::int32_t), f32 = sizeof(float);
  // In GpuSlice's order.
  for (const std::size_t bytes :
       {i32 * n, i32 * n, e * static_cast<std::size_t>(a.n_layer + 1) * n * c, e * n * c,
        e * n * static_cast<std::size_t>(a.padded_vocab), f32 * n * mean, f32 * n, f32 * n, e * n * c, e * n * c,
        e * n * c, e * n * qkv, e * n * f, d_fch_gelu, f32 * gpu_column_scratch_floats(std::max(a.ffn, a.n_embd), 2),
        att_scratch, e * n * llama_f}) {
    arena.shared.push_back(take(bytes));
  }
  const std::int64_t sets = checkpointing ? 1 : a.n_layer;
  for (std::int64_t s = 0; s < sets; ++s) {
    std::vector<GpuActivationArena::Slice>& block = arena.blocks.emplace_back();
    // In GpuBlockSlice's order.
    for (const std::size_t bytes :
         {e * n * c, e * n * qkv, att, e * n * c, proj, e * n * c, e * n * c, e * n * f, e * n * f, proj,
          f32 * n * mean, f32 * n, f32 * n * mean, f32 * n, e * n * llama_f}) {
      block.push_back(take(bytes));
    }
  }
  return arena;
}

std::int64_t gpu_activation_bytes(const ActivationShape& shape, std::int64_t micro_batch, std::int64_t seq_len,
                                  bool checkpointing, std::size_t element_bytes) {
  return static_cast<std::int64_t>(
      gpu_activation_arena(shape, micro_batch, seq_len, checkpointing, element_bytes).bytes + kGpuBlasWorkspaceBytes);
}

}  // namespace hsdp::model
