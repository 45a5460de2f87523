// The CUDA GPT by unit (model::UnitModel, what the sharding engine drives) against its own whole-model calls, with
// and without activation checkpointing, and against the CPU model (model::CpuUnitModel over Gpt<float>) from the
// same weights.
//
// Exact (bit for bit): the unit calls are the whole-model calls (the same kernels in the same order); activation
// checkpointing recomputes a block with the same kernels, so its gradients are the stored run's.
//
// Against the CPU (normwise: ||got - want|| / ||want|| per unit's gradient; the loss relative), derived bounds:
//   float  1e-3  both sides fp32 (the GPU's GEMMs true fp32, no TF32), sums in another order. A sum of n terms is
//               off by at most n u of the sum of |terms| (u = 2^-24); the longest here is n = 4C = 256 (1.5e-5),
//               and a gradient is the end of a chain of about 40 such operations for 2 blocks (forward and
//               backward): 40 x 1.5e-5 = 6e-4.
//   bf16   0.18 the GPU stores every activation and activation gradient in bf16 (u = 2^-8 per rounding) while
//               the CPU computes in fp32 from the same bf16-representable weights: about 45 roundings lie on the
//               longest path to a gradient (11 stores per block forward, 9 per block backward, 2 blocks, the
//               head's 3 and the residual stream's), 45 x 2^-8 = 0.18 when every rounding adds up the same way.
//               The loss: 24 roundings before it (forward alone), 24 x 2^-8 = 0.094.
// The measured errors are printed (RecordProperty and stdout), so a run shows how far inside the bounds it is.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/model/cuda/gpt.hpp"
#include "hsdp/model/gpt.hpp"
#include "hsdp/model/unit_buffers.hpp"
#include "hsdp/model/unit_model.hpp"

namespace hsdp::gpu_testing {
namespace {

namespace mc = hsdp::model::cuda;
using model::ModelLayout;

constexpr int kB = 2, kT = 32;

// GPT-2: odd vocabulary (61 of 64 padded rows), head size 32, 2 blocks.
struct Gpt2 {
  static model::GptConfig config() {
    return {.n_layer = 2, .n_head = 2, .n_embd = 64, .block_size = kT, .vocab_size = 61, .padded_vocab_size = 64};
  }
  static constexpr double kBf16Grad = 0.18, kBf16Loss = 0.094;
};
// A Llama of the same width: 4 query heads of 16 channels over 2 key/value heads, SwiGLU 128 (the longest sum is
// still n = 4C = 256 for fp32's bound), an untied head. bf16: about 14 stores per block forward (ln1, q | k | v,
// RoPE's in-place q and k, the scores, probabilities, atty, o_proj, res2, ln2, gate, up, swiglu, down), 11 per block
// backward, the head's 3 and the residual stream's: 58 x 2^-8 = 0.23; the loss, 31 forward roundings: 0.12.
struct Llama {
  static model::GptConfig config() {
    model::GptConfig c{.n_layer = 2, .n_head = 4, .n_embd = 64, .block_size = kT, .vocab_size = 61,
                       .padded_vocab_size = 64};
    c.arch = model::Arch::llama;
    c.n_kv_head = 2;
    c.ffn_dim = 128;
    return c;
  }
  static constexpr double kBf16Grad = 0.23, kBf16Loss = 0.12;
};
// A model with its fused parts switched on: model.attention=fused and model.gemm_epilogue=fused.
template <typename Base, bool kFusedAttention, bool kFusedEpilogues>
struct With : Base {
  static model::GptConfig config() {
    model::GptConfig c = Base::config();
    c.fused_attention = kFusedAttention;
    c.fused_epilogues = kFusedEpilogues;
    return c;
  }
};
// The same two models with model.attention=fused: the bounds stand (the fused kernels round the same values: q, k, v,
// the output, their gradients; in bf16 the tensor-core kernels round P and dS for their products as the unfused path
// stores them, the CUDA-core kernels keep both in fp32).
template <typename Base>
using Fused = With<Base, true, false>;
// The GEMM epilogues alone (GELU, its gradient and the residual adds in cuBLASLt's epilogues): again the same values
// rounded, fewer times (the product before its GELU or residual add is not stored in T first).
template <typename Base>
using Epilogues = With<Base, false, true>;
// Both (a failing Lean case's parts are the two above, each a case of its own).
template <typename Base>
using Lean = With<Base, true, true>;
template <typename Compute, typename Model_>
struct Case {
  using T = Compute;
  using Model = Model_;
};

std::vector<std::int32_t> ids(std::uint64_t seed) {
  std::vector<std::int32_t> out(kB * kT);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::int32_t>((i * 37 + seed * 11 + (i * i) % 7) % 61);
  return out;
}

// Per unit: nanoGPT's initialisation, plus noise on every value (so layer norms' weights and biases are not 1 and
// 0, and every gradient path carries signal), rounded to bf16 when the GPU computes in bf16.
template <typename T>
std::vector<std::vector<float>> weights(const ModelLayout& layout) {
  model::UnitBuffers<float> init(layout);
  init.init(layout, 1337);
  std::vector<std::vector<float>> out;
  for (int u = 0; u < layout.num_units(); ++u) {
    auto noise = random_floats(init.unit(u).size(), 100 + static_cast<std::uint64_t>(u), -0.05f, 0.05f);
    std::vector<float> w(init.unit(u).begin(), init.unit(u).end());
    for (std::size_t i = 0; i < w.size(); ++i) w[i] += noise[i];
    out.push_back(std::is_same_v<T, float> ? w : rounded_to_bf16(w));
  }
  return out;
}

struct Result {
  double loss = 0;
  std::vector<float> position_losses;
  std::vector<std::vector<float>> grads;  // per unit
};

double normwise(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

template <typename C>
class GptUnitsGpu : public GpuTest {
 protected:
  using T = typename C::T;
  GptUnitsGpu() : layout_(C::Model::config()), w_(weights<T>(layout_)), tokens_(ids(1)), targets_(ids(2)) {}

  // One micro-batch through the UnitModel calls, in the engine's order; dloss 0.5 as for grad_accum 2. Each unit at
  // its offset in flat buffers, as the whole-model calls have them: cuBLASLt chooses its kernels by the pointers'
  // alignment, so the same memory is what makes the two paths comparable bit for bit.
  Result units(bool checkpointing) {
    mc::GptCuda<T> gpt(layout_, kB, kT, this->stream(), checkpointing);
    auto params = this->upload(as<T>(flat_weights()));
    auto grads = this->upload(std::vector<float>(gpt.total(), 0.0f));
    cuda::DeviceBuffer<double> loss(1);
    model::UnitModel& m = gpt;
    run_units(
        m, [&](int u) { return static_cast<const void*>(params.data() + gpt.unit_offset(u)); },
        [&](int u) { return grads.data() + gpt.unit_offset(u); }, loss.data());
    Result r;
    r.loss = this->download(loss)[0];
    read_back(gpt, grads, r);
    return r;
  }

  // The whole-model calls over flat buffers (the data-parallel backend's path).
  Result whole() {
    mc::GptCuda<T> gpt(layout_, kB, kT);
    auto params = this->upload(as<T>(flat_weights()));
    auto grads = this->upload(std::vector<float>(gpt.total(), 0.0f));
    auto d_tokens = this->upload(tokens_), d_targets = this->upload(targets_);
    std::vector<int> done;
    gpt.forward(params.data(), d_tokens.data(), d_targets.data(), 0.5f / static_cast<float>(gpt.tokens()),
                this->stream());
    gpt.backward(params.data(), grads.data(), d_tokens.data(), this->stream(), [&](int u) { done.push_back(u); });
    Result r;
    read_back(gpt, grads, r);
    // Units reported complete in backward's order: the final norm, the blocks last to first, the embedding.
    std::vector<int> order{layout_.final_norm_unit()};
    for (int l = layout_.config().n_layer - 1; l >= 0; --l) order.push_back(ModelLayout::block_unit(l));
    order.push_back(ModelLayout::embedding_unit());
    EXPECT_EQ(done, order);
    return r;
  }

  // The CPU model from the same weights (fp32 values of the T-representable weights).
  Result cpu() {
    MemoryAccountant memory;
    model::Gpt<float> gpt(layout_, kB, kT, memory);
    model::CpuUnitModel m(gpt);
    std::vector<std::vector<float>> grads;
    for (const auto& w : w_) grads.emplace_back(w.size(), 0.0f);
    double loss = 0;
    run_units(
        m, [&](int u) { return static_cast<const void*>(w_[static_cast<std::size_t>(u)].data()); },
        [&](int u) { return grads[static_cast<std::size_t>(u)].data(); }, &loss);
    Result r;
    r.loss = loss;
    r.position_losses.assign(gpt.losses().begin(), gpt.losses().end());
    r.grads = grads;
    return r;
  }

  std::vector<float> flat_weights() const {
    std::vector<float> flat;
    for (const auto& w : w_) flat.insert(flat.end(), w.begin(), w.end());
    return flat;
  }

  // The positions' losses and each unit's gradient from the flat buffer.
  void read_back(const mc::GptCuda<T>& gpt, const cuda::DeviceBuffer<float>& grads, Result& r) {
    std::vector<float> pl(gpt.tokens());
    cuda::copy_to_host(pl.data(), gpt.losses(), pl.size(), this->stream());
    this->sync();
    r.position_losses = pl;
    const auto g = this->download(grads);
    for (int u = 0; u < layout_.num_units(); ++u) {
      const auto first = g.begin() + static_cast<std::ptrdiff_t>(gpt.unit_offset(u));
      r.grads.emplace_back(first, first + static_cast<std::ptrdiff_t>(layout_.unit(u).numel));
    }
  }

  template <typename Params, typename Grads>
  void run_units(model::UnitModel& m, Params p, Grads g, double* loss) {
    const int L = layout_.config().n_layer, emb = ModelLayout::embedding_unit(), fin = layout_.final_norm_unit();
    m.forward_embedding(tokens_, p(emb));
    for (int l = 0; l < L; ++l) m.forward_block(l, p(ModelLayout::block_unit(l)));
    m.forward_head(targets_, p(fin), p(emb), 0.5f, loss);
    m.backward_head(p(fin), p(emb), g(fin), g(emb));
    for (int l = L - 1; l >= 0; --l) m.backward_block(l, p(ModelLayout::block_unit(l)), g(ModelLayout::block_unit(l)));
    m.backward_embedding(g(emb));
  }

  ModelLayout layout_;
  std::vector<std::vector<float>> w_;
  std::vector<std::int32_t> tokens_, targets_;
};

using Cases = ::testing::Types<Case<float, Gpt2>, Case<bf16_t, Gpt2>, Case<float, Llama>, Case<bf16_t, Llama>,
                               Case<float, Fused<Gpt2>>, Case<bf16_t, Fused<Gpt2>>, Case<bf16_t, Fused<Llama>>,
                               Case<bf16_t, Epilogues<Gpt2>>, Case<bf16_t, Epilogues<Llama>>, Case<float, Lean<Gpt2>>,
                               Case<bf16_t, Lean<Gpt2>>, Case<bf16_t, Lean<Llama>>>;
TYPED_TEST_SUITE(GptUnitsGpu, Cases);

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TYPED_TEST(GptUnitsGpu, UnitCalls_AreTheWholeModelCalls_BitForBit) {
  const Result u = this->units(false), w = this->whole();
  EXPECT_TRUE(same_bits(u.position_losses, w.position_losses));
  ASSERT_EQ(u.grads.size(), w.grads.size());
  for (std::size_t i = 0; i < u.grads.size(); ++i) EXPECT_TRUE(same_bits(u.grads[i], w.grads[i])) << "unit " << i;
  // The device scalar is the mean of the positions' losses (in double; the host's order differs by rounding only).
  double sum = 0;
  for (const float x : w.position_losses) sum += x;
  EXPECT_NEAR(u.loss, sum / static_cast<double>(w.position_losses.size()), 1e-12 * std::abs(u.loss));
}

TYPED_TEST(GptUnitsGpu, ActivationCheckpointing_RecomputesTheSameBits) {
  const Result kept = this->units(false), recomputed = this->units(true);
  EXPECT_EQ(kept.loss, recomputed.loss);
  for (std::size_t i = 0; i < kept.grads.size(); ++i) {
    EXPECT_TRUE(same_bits(kept.grads[i], recomputed.grads[i])) << "unit " << i;
  }
}

TYPED_TEST(GptUnitsGpu, MatchesTheCpuModel_WithinTheDerivedBound) {
  using T = typename TypeParam::T;
  constexpr bool f32 = std::is_same_v<T, float>;
  const double grad_bound = f32 ? 1e-3 : TypeParam::Model::kBf16Grad;
  const double loss_bound = f32 ? 1e-3 : TypeParam::Model::kBf16Loss;
  const Result gpu = this->units(false), cpu = this->cpu();
  const double loss_err = std::abs(gpu.loss - cpu.loss) / std::abs(cpu.loss);
  // Which case: the fused parts on (a figure in the run's log says which of the twelve it is).
  const model::GptConfig& config = this->layout_.config();
  const char* parts = config.fused_attention ? (config.fused_epilogues ? " lean" : " fused attention")
                                             : (config.fused_epilogues ? " fused epilogues" : "");
  std::printf("%s %s%s: loss GPU %.9g CPU %.9g (relative error %.3g, bound %.3g)\n", model::arch_name(config.arch),
              f32 ? "float" : "bf16", parts, gpu.loss, cpu.loss, loss_err, loss_bound);
  EXPECT_LE(loss_err, loss_bound);
  double worst = 0;
  for (std::size_t i = 0; i < cpu.grads.size(); ++i) {
    const double err = normwise(gpu.grads[i], cpu.grads[i]);
    std::printf("  unit %zu (%s): normwise gradient error %.3g\n", i,
                this->layout_.unit(static_cast<int>(i)).name.c_str(), err);
    EXPECT_LE(err, grad_bound) << "unit " << i;
    worst = std::max(worst, err);
  }
  char figures[96];
  std::snprintf(figures, sizeof figures, "%.3g", worst);
  this->RecordProperty("worst_normwise_gradient_error", figures);
  std::snprintf(figures, sizeof figures, "%.3g", loss_err);
  this->RecordProperty("loss_relative_error", figures);
}

TYPED_TEST(GptUnitsGpu, EvaluateHead_GivesTheTrainingLoss) {
  using T = typename TypeParam::T;
  mc::GptCuda<T> gpt(this->layout_, kB, kT, this->stream());
  std::vector<cuda::DeviceBuffer<T>> params;
  for (const auto& w : this->w_) params.push_back(this->upload(as<T>(w)));
  const auto p = [&](int u) { return static_cast<const void*>(params[static_cast<std::size_t>(u)].data()); };
  cuda::DeviceBuffer<double> loss(2);
  const int emb = ModelLayout::embedding_unit(), fin = this->layout_.final_norm_unit();
  for (int pass = 0; pass < 2; ++pass) {
    gpt.forward_embedding(this->tokens_, p(emb));
    for (int l = 0; l < this->layout_.config().n_layer; ++l) gpt.forward_block(l, p(ModelLayout::block_unit(l)));
    if (pass == 0) {
      gpt.forward_head(this->targets_, p(fin), p(emb), 1.0f, loss.data());
    } else {
      gpt.evaluate_head(this->targets_, p(fin), p(emb), loss.data() + 1);
    }
  }
  const auto got = this->download(loss);
  EXPECT_EQ(got[0], got[1]);
}

TYPED_TEST(GptUnitsGpu, TokenOutsideTheVocabulary_IsADataErrorNamingIt) {
  using T = typename TypeParam::T;
  mc::GptCuda<T> gpt(this->layout_, kB, kT, this->stream());
  cuda::DeviceBuffer<T> emb(this->layout_.unit(ModelLayout::embedding_unit()).numel);
  auto bad = this->tokens_;
  bad[5] = 61;
  try {
    gpt.forward_embedding(bad, emb.data());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::data);
    EXPECT_NE(std::string(e.what()).find("token id 61 at position 5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hsdp::gpu_testing
