// GptCuda's arena (hsdp/model/gpu_activations.hpp) against its closed form, written here from the buffers' list.
#include "hsdp/model/gpu_activations.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace hsdp::model {
namespace {

struct Case {
  GptConfig config;
  std::int64_t B, T;
  bool checkpointing;
  std::size_t element;
};

std::vector<Case> cases() {
  GptConfig tiny;
  tiny.n_layer = 3, tiny.n_head = 5, tiny.n_embd = 40, tiny.block_size = 33, tiny.vocab_size = 70;
  tiny.padded_vocab_size = 77;  // sizes that are no multiple of the alignment
  GptConfig llama = tiny;       // 6 query heads of 8 channels over 2 key/value heads, SwiGLU 100
  llama.arch = Arch::llama, llama.n_head = 6, llama.n_embd = 48, llama.n_kv_head = 2, llama.ffn_dim = 100;
  GptConfig narrow = llama;     // an MLP narrower than the model: the column sums' scratch follows C
  narrow.ffn_dim = 20;
  GptConfig fused = tiny;       // model.attention=fused: each row's log-sum-exp instead of the scores
  fused.fused_attention = true;
  GptConfig fused_llama = llama;
  fused_llama.fused_attention = true;
  GptConfig lean = tiny;  // model.gemm_epilogue=fused: no attproj, fcproj; F = 160, a multiple of 8: no d_fch_gelu
  lean.fused_epilogues = true;
  GptConfig lean_odd = lean;  // C = 41: F = 164, not a multiple of 8: the GELU runs apart, d_fch_gelu kept
  lean_odd.n_embd = 41, lean_odd.n_head = 1;
  GptConfig lean_llama = llama;  // a Llama keeps d_fch_gelu (its d swiglu)
  lean_llama.fused_epilogues = true;
  return {{tiny, 3, 33, false, 4},
          {tiny, 1, 17, true, 2},
          {GptConfig::gpt2_124m(), 8, 1024, false, 2},
          {GptConfig::gpt2_124m(), 8, 1024, true, 4},
          {llama, 3, 33, false, 2},
          {llama, 2, 20, true, 4},
          {narrow, 1, 9, false, 4},
          {fused, 3, 33, false, 2},
          {fused_llama, 2, 20, true, 4},
          {lean, 3, 33, false, 2},
          {lean_odd, 2, 20, true, 4},
          {lean_llama, 3, 33, false, 2}};
}

// Unaligned bytes of everything, from the list in gpu_activations.hpp: the arena adds less than one alignment per
// slice (17 shared, 15 per set). A Llama: q | k | v of C + 2K, a swiglu slice per set and d_up, no LayerNorm means.
std::int64_t closed_form(const Case& c) {
  const GptConfig& g = c.config;
  const bool llama = g.llama();
  const std::int64_t n = c.B * c.T, C = g.n_embd, F = g.ffn(), L = g.n_layer, H = g.n_head;
  const std::int64_t K = std::int64_t{g.kv_heads()} * g.head_size();
  const std::int64_t e = static_cast<std::int64_t>(c.element), sets = c.checkpointing ? 1 : L;
  const std::int64_t means = llama ? 0 : 4 * n, up = llama ? F : 0;
  const std::int64_t att = g.fused_attention ? 4 * c.B * H * c.T : e * c.B * H * c.T * c.T;
  const std::int64_t att_scratch = g.fused_attention ? 4 * c.B * H * c.T : 8 * H * c.T * c.T;
  // model.gemm_epilogue=fused: no attproj and fcproj; GPT-2 with F % 8 == 0 no d_fch_gelu either.
  const std::int64_t per_set_c = g.fused_epilogues ? 4 : 6;
  const std::int64_t d_fch = g.fused_epilogues && !llama && F % 8 == 0 ? 1 : 2;
  const std::int64_t shared = 8 * n +
                              e * n * ((L + 1) * C + C + g.padded_vocab_size + 3 * C + (C + 2 * K) + d_fch * F + up) +
                              means + 8 * n + 4 * 2 * kGpuColumnChunks * std::max(F, C) + att_scratch;
  const std::int64_t per_set = e * (per_set_c * n * C + n * (C + 2 * K) + 2 * n * F + n * up) + att + 2 * means + 8 * n;
  return shared + sets * per_set;
}

TEST(GpuActivations, TheArenaHoldsTheClosedFormWithLessThanOneAlignmentPerSlice) {
  for (const Case& c : cases()) {
    const GpuActivationArena arena =
        gpu_activation_arena(activation_shape(c.config), c.B, c.T, c.checkpointing, c.element);
    const std::int64_t sets = c.checkpointing ? 1 : c.config.n_layer;
    ASSERT_EQ(arena.shared.size(), static_cast<std::size_t>(GpuSlice::count));
    ASSERT_EQ(arena.blocks.size(), static_cast<std::size_t>(sets));
    const std::int64_t slices = 17 + 15 * sets, exact = closed_form(c);
    const auto bytes = static_cast<std::int64_t>(arena.bytes);
    EXPECT_GE(bytes, exact);
    EXPECT_LT(bytes, exact + slices * static_cast<std::int64_t>(kGpuArenaAlignment));
    EXPECT_EQ(bytes % static_cast<std::int64_t>(kGpuArenaAlignment), 0);
    EXPECT_EQ(gpu_activation_bytes(activation_shape(c.config), c.B, c.T, c.checkpointing, c.element),
              bytes + static_cast<std::int64_t>(kGpuBlasWorkspaceBytes));
  }
}

TEST(GpuActivations, EverySliceIsAlignedAndNoTwoOverlap) {
  for (const Case& c : cases()) {
    const GpuActivationArena arena =
        gpu_activation_arena(activation_shape(c.config), c.B, c.T, c.checkpointing, c.element);
    // The slices an architecture does not use are empty: GPT-2's d_up and swiglu, a Llama's LayerNorm means.
    const bool llama = c.config.llama();
    EXPECT_EQ(arena[GpuSlice::d_up].bytes == 0, !llama);
    EXPECT_EQ(arena[GpuSlice::lnf_mean].bytes == 0, llama);
    std::vector<std::pair<std::size_t, std::size_t>> spans;
    for (const auto& s : arena.shared) {
      if (s.bytes > 0) spans.emplace_back(s.offset, s.offset + s.bytes);
    }
    for (const auto& set : arena.blocks) {
      ASSERT_EQ(set.size(), static_cast<std::size_t>(GpuBlockSlice::count));
      EXPECT_EQ(set[static_cast<std::size_t>(GpuBlockSlice::swiglu)].bytes == 0, !llama);
      EXPECT_EQ(set[static_cast<std::size_t>(GpuBlockSlice::ln1_mean)].bytes == 0, llama);
      for (const auto& s : set) {
        if (s.bytes > 0) spans.emplace_back(s.offset, s.offset + s.bytes);
      }
    }
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 0; i < spans.size(); ++i) {
      EXPECT_EQ(spans[i].first % kGpuArenaAlignment, 0u);
      EXPECT_GT(spans[i].second, spans[i].first);
      if (i > 0) {
        EXPECT_LE(spans[i - 1].second, spans[i].first);
      }
    }
    EXPECT_LE(spans.back().second, arena.bytes);
  }
}

TEST(GpuActivations, CheckpointingKeepsOneSetAndBf16HalvesTheElements) {
  const GptConfig g = GptConfig::gpt2_124m();
  const ActivationShape shape = activation_shape(g);
  const auto set = [&](std::size_t e) {
    return gpu_activation_bytes(shape, 8, 1024, false, e) - gpu_activation_bytes(shape, 8, 1024, true, e);
  };
  // 11 sets fewer: 11 x (e (9 N C + 2 N F + B H T^2) + 16 N), every slice a multiple of 256 at these sizes.
  const std::int64_t n = 8 * 1024, C = 768, F = 3072, scores = 8 * 12 * 1024 * 1024;
  EXPECT_EQ(set(2), 11 * (2 * (9 * n * C + 2 * n * F + scores) + 16 * n));
  EXPECT_EQ(set(4), 11 * (4 * (9 * n * C + 2 * n * F + scores) + 16 * n));
}

}  // namespace
}  // namespace hsdp::model
