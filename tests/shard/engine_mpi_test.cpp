// The sharding engine on 4 ranks, against one-rank training computed locally on every rank, and against the
// formulas of shard/formulas.hpp (byte counters and model-state memory, exactly).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../comm/mpi_test_context.hpp"
#include "hsdp/model/gpt.hpp"
#include "hsdp/model/init.hpp"
#include "hsdp/optim/grad_clip.hpp"
#include "hsdp/optim/lr_schedule.hpp"
#include "hsdp/shard/engine.hpp"
#include "hsdp/shard/formulas.hpp"

namespace hsdp::shard {
namespace {

using comm::Sharding;
using comm::testing::context;

// vocab 61 and odd widths: no unit divides by 2 or 4, so every strategy pads.
model::GptConfig tiny_config() { return {.n_layer = 2, .n_head = 2, .n_embd = 18, .block_size = 16, .vocab_size = 61, .padded_vocab_size = 64}; }
constexpr int kSeq = 16;
constexpr std::uint64_t kSeed = 7;
constexpr double kClip = 1.0;
const optim::AdamWConfig kAdam{};
const optim::CosineSchedule kSchedule{.lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 3, .max_steps = 20};

// Row `row` of the global batch of step `step`: deterministic tokens with a learnable pattern.
std::vector<std::int32_t> rows(int step, int first_row, int count, bool targets) {
  std::vector<std::int32_t> out;
  for (int r = first_row; r < first_row + count; ++r) {
    for (int t = 0; t < kSeq; ++t) {
      const int pos = t + (targets ? 1 : 0);
      const unsigned h = static_cast<unsigned>(step * 7919 + r * 104729 + pos * 31 + (pos % 5) * 1000003);
      out.push_back(static_cast<std::int32_t>((h ^ (h >> 7)) % 61));
    }
  }
  return out;
}

struct ReferenceRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;  // full unit buffers
};

// One rank, the whole global batch of `global_rows` rows as k micro-batches.
ReferenceRun reference(int steps, int global_rows, int k) {
  const model::ModelLayout layout(tiny_config());
  MemoryAccountant memory;
  const int micro = global_rows / k;
  model::Gpt<float> gpt(layout, micro, kSeq, memory);
  ReferenceRun run;
  std::vector<std::vector<float>> grads, m, v;
  std::vector<std::vector<optim::DecaySegment>> segments;
  for (int u = 0; u < layout.num_units(); ++u) {
    const std::size_t n = layout.unit(u).numel;
    run.params.emplace_back(n);
    model::init_unit<float>(layout, u, run.params.back(), kSeed);
    grads.emplace_back(n);
    m.emplace_back(n);
    v.emplace_back(n);
    segments.emplace_back();
    for (const auto* p : layout.unit_params(u)) segments.back().push_back({p->offset, p->numel, p->weight_decay});
  }
  for (int step = 0; step < steps; ++step) {
    for (auto& g : grads) std::fill(g.begin(), g.end(), 0.0f);
    std::vector<const float*> p;
    std::vector<float*> g;
    for (auto& x : run.params) p.push_back(x.data());
    for (auto& x : grads) g.push_back(x.data());
    double loss = 0;
    for (int j = 0; j < k; ++j) {
      loss += gpt.forward(rows(step, j * micro, micro, false), rows(step, j * micro, micro, true), p);
      gpt.backward(p, g, 1.0f / static_cast<float>(k));
    }
    run.losses.push_back(loss / k);
    double sq = 0;
    for (auto& x : grads) sq += optim::local_squared_sum(x);
    const auto clip = optim::clip_coefficient(sq, kClip);
    const optim::AdamWStep update{static_cast<float>(optim::learning_rate(kSchedule, step)), step + 1, clip.coefficient};
    for (std::size_t u = 0; u < grads.size(); ++u) {
      optim::adamw_update(kAdam, update, run.params[u], grads[u], m[u], v[u], segments[u]);
    }
  }
  return run;
}

GroupView view(comm::Communicator& c) {
  GroupView g;
  g.rank = c.rank();
  g.node_of_rank.assign(c.node_of_rank().begin(), c.node_of_rank().end());
  return g;
}

struct Result {
  std::vector<double> losses;
  double max_param_diff = 0;  // max over ranks of |shard - reference| / max |reference|
  bool counters_match = true;
  std::int64_t model_state = 0, expected_model_state = 0;
};

Result run_engine(Sharding strategy, int steps, int global_rows, int k, DType param = DType::f32,
                  DType reduce = DType::f32, const ReferenceRun* ref = nullptr) {
  auto& ctx = context();
  comm::ProcessMesh& mesh = *ctx.meshes.at(strategy);
  const model::ModelLayout layout(tiny_config());
  MemoryAccountant memory;
  EngineOptions options{.strategy = strategy, .param_dtype = param, .reduce_dtype = reduce, .prefetch = true,
                        .bucket_mb = 0.002, .grad_accum = k};
  Engine engine(layout, mesh, options, kSeed, memory);
  const int world = ctx.world.size();
  const int rank = ctx.world.rank();
  const int per_rank = global_rows / world;
  const int micro = per_rank / k;
  model::Gpt<float> gpt(layout, micro, kSeq, memory);
  const comm::ByteCounters expected = step_traffic(layout, options, view(mesh.shard()), view(mesh.replicate()));
  Result result;
  for (int step = 0; step < steps; ++step) {
    mesh.reset_counters();
    engine.begin_step();
    double loss = 0;
    for (int j = 0; j < k; ++j) {
      const int first = rank * per_rank + j * micro;
      loss += engine.forward_backward(gpt, rows(step, first, micro, false), rows(step, first, micro, true),
                                      1.0f / static_cast<float>(k), j + 1 == k);
    }
    loss /= k;
    ctx.world.all_reduce(std::span<double>(&loss, 1), comm::ReduceOp::avg);
    result.losses.push_back(loss);
    const auto clip = optim::clip_coefficient(engine.grad_norm_squared(), kClip);
    engine.optimizer_step(kAdam, {static_cast<float>(optim::learning_rate(kSchedule, step)), step + 1, clip.coefficient});
    if (!(mesh.total_counters() == expected)) result.counters_match = false;
  }
  result.model_state = memory.current(MemCategory::params) + memory.current(MemCategory::grads) +
                       memory.current(MemCategory::optimizer);
  result.expected_model_state = model_state_bytes(layout, strategy, mesh.shard().size(), param);
  if (ref != nullptr) {
    double diff = 0, scale = 0;
    for (const auto& v : engine.shard_views()) {
      const auto& full = ref->params[static_cast<std::size_t>(v.unit)];
      for (std::size_t i = 0; i < v.count; ++i) diff = std::max(diff, std::fabs(static_cast<double>(v.params[i]) - full[v.begin + i]));
      for (const float x : full) scale = std::max(scale, std::fabs(static_cast<double>(x)));
    }
    double ratio = diff / scale;
    MPI_Allreduce(MPI_IN_PLACE, &ratio, 1, MPI_DOUBLE, MPI_MAX, ctx.world.raw());
    result.max_param_diff = ratio;
  }
  return result;
}

class EveryStrategy : public ::testing::TestWithParam<Sharding> {};

// fp32 tolerance 1e-5: reductions sum the 4 ranks' gradients in another order than one rank's GEMMs do, so
// results differ in the last bits (~1e-7 relative per step) and AdamW carries the difference through 20 steps.
TEST_P(EveryStrategy, MatchesSingleRank_After20Steps_AndCountsBytesAndMemoryByFormula) {
  const ReferenceRun ref = reference(20, 8, 1);
  const Result r = run_engine(GetParam(), 20, 8, 1, DType::f32, DType::f32, &ref);
  for (std::size_t s = 0; s < ref.losses.size(); ++s) {
    EXPECT_NEAR(r.losses[s], ref.losses[s], 1e-5 * std::fabs(ref.losses[s])) << "step " << s + 1;
  }
  EXPECT_LT(r.max_param_diff, 1e-5);
  EXPECT_TRUE(r.counters_match) << "byte counters differ from step_traffic()";
  EXPECT_EQ(r.model_state, r.expected_model_state);
}

TEST_P(EveryStrategy, AccumulatingFourMicroBatches_EqualsOneBatchFourTimesLarger) {
  const ReferenceRun ref = reference(6, 16, 1);
  const Result r = run_engine(GetParam(), 6, 16, 4, DType::f32, DType::f32, &ref);
  for (std::size_t s = 0; s < ref.losses.size(); ++s) {
    EXPECT_NEAR(r.losses[s], ref.losses[s], 1e-5 * std::fabs(ref.losses[s])) << "step " << s + 1;
  }
  EXPECT_LT(r.max_param_diff, 1e-5);
  EXPECT_TRUE(r.counters_match) << "byte counters differ from step_traffic() with accumulation";
}

// bf16 gathers and reductions halve the bytes; the counters must say so exactly, and training stays close.
TEST_P(EveryStrategy, Bf16CommunicationCountsTwoBytesAndStaysClose) {
  const ReferenceRun ref = reference(5, 8, 1);
  const Result r = run_engine(GetParam(), 5, 8, 1, DType::bf16, DType::bf16, &ref);
  EXPECT_TRUE(r.counters_match);
  EXPECT_EQ(r.model_state, r.expected_model_state);
  // bf16 has 8 significant bits: losses after 5 steps stay within 1% of fp32.
  EXPECT_NEAR(r.losses.back(), ref.losses.back(), 0.01 * ref.losses.back());
}

INSTANTIATE_TEST_SUITE_P(Engine, EveryStrategy, ::testing::ValuesIn(comm::testing::kStrategies),
                         [](const auto& info) { return std::string(comm::to_string(info.param)); });

}  // namespace
}  // namespace hsdp::shard
