// The sharding engine on 4 ranks, against one-rank training computed locally on every rank, and against the
// formulas of shard/formulas.hpp (byte counters and model-state memory, exactly).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../comm/mpi_test_context.hpp"
#include "bf16_twin.hpp"
#include "tiny_gpt.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/model/gpt.hpp"
#include "hsdp/model/unit_model.hpp"
#include "hsdp/model/init.hpp"
#include "hsdp/optim/grad_clip.hpp"
#include "hsdp/optim/lr_schedule.hpp"
#include "hsdp/shard/engine.hpp"
#include "hsdp/shard/formulas.hpp"

namespace hsdp::shard {
namespace {

using comm::testing::context;

constexpr Sharding kStrategies[] = {Sharding::no_shard,     Sharding::zero1,        Sharding::shard_grad_op,
                                    Sharding::full_shard,   Sharding::hybrid_shard, Sharding::hybrid_shard_zero2};

using testing::kSeq;
using testing::rows;
using testing::tiny_config;
constexpr std::uint64_t kSeed = 7;
constexpr double kClip = 1.0;
const optim::AdamWConfig kAdam{};
const optim::CosineSchedule kSchedule{.lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 3, .max_steps = 20};

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

MeshGroups groups_of(comm::ProcessMesh& mesh) {
  MeshGroups groups{view(mesh.shard()), view(mesh.replicate()), view(mesh.node()), view(mesh.cross_node()), {},
                    mesh.topology().nodes_equal_size()};
  if (mesh.has_hpz()) groups.hpz = view(mesh.hpz());
  return groups;
}

struct Result {
  std::vector<double> losses;
  double max_param_diff = 0;  // max over ranks of |shard - reference| / max |reference|
  bool counters_match = true;
  std::int64_t model_state = 0, expected_model_state = 0;
};

Result run_engine(Sharding strategy, int steps, int global_rows, int k, DType param = DType::f32,
                  DType reduce = DType::f32, const ReferenceRun* ref = nullptr, DType compute = DType::f32) {
  auto& ctx = context();
  comm::ProcessMesh& mesh = *ctx.meshes.at(shard::strategy(strategy).shard_scope);
  const model::ModelLayout layout(tiny_config());
  MemoryAccountant memory;
  EngineOptions options{.strategy = strategy,
                        .param_dtype = param,
                        .reduce_dtype = reduce,
                        .compute_dtype = compute,
                        .prefetch = true,
                        .bucket_mb = 0.002,
                        .grad_accum = k,
                        .zeropp = {},
                        .streams = {},
                        .trace_file = {}};
  Engine engine(layout, mesh, options, kSeed, memory);
  const int world = ctx.world.size();
  const int rank = ctx.world.rank();
  const int per_rank = global_rows / world;
  const int micro = per_rank / k;
  model::Gpt<float> gpt(layout, micro, kSeq, memory);
  model::CpuUnitModel fp32_units(gpt);
  testing::Bf16Twin bf16_units(fp32_units);
  model::UnitModel& units = compute == DType::bf16 ? static_cast<model::UnitModel&>(bf16_units) : fp32_units;
  const comm::ByteCounters expected = step_traffic(layout, options, groups_of(mesh));

  Result result;
  for (int step = 0; step < steps; ++step) {
    mesh.reset_counters();
    engine.begin_step();
    for (int j = 0; j < k; ++j) {
      const int first = rank * per_rank + j * micro;
      engine.forward_backward(units, rows(step, first, micro, false), rows(step, first, micro, true),
                              1.0f / static_cast<float>(k), j + 1 == k);
    }
    const StepScalars scalars = engine.step_scalars(false);
    double loss = scalars.loss_sum / k;
    ctx.world.all_reduce(std::span<double>(&loss, 1), comm::ReduceOp::avg);
    result.losses.push_back(loss);
    const auto clip = optim::clip_coefficient(scalars.norm_squared, kClip);
    engine.optimizer_step(kAdam, {static_cast<float>(optim::learning_rate(kSchedule, step)), step + 1, clip.coefficient});
    if (!(mesh.total_counters() == expected)) result.counters_match = false;
  }
  result.model_state = memory.current(MemCategory::params) + memory.current(MemCategory::grads) +
                       memory.current(MemCategory::optimizer);
  result.expected_model_state = model_state_bytes(layout, strategy, mesh.shard().size(), param, compute);
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

// Compute copies in bf16 (a GPU's bf16 model; here its CPU twin, bf16_twin.hpp): the same losses bit for bit as fp32
// copies of the same bf16-rounded values, the same bytes on the wire, and the persistent compute copies (no_shard's
// rounded copy, zero1's full parameters) at 2 bytes an element in the accountant as in model_state_bytes.
TEST_P(EveryStrategy, Bf16ComputeCopies_TrainAsFp32Copies_AndCountTwoBytesPerParameterInMemory) {
  const Result fp32_copies = run_engine(GetParam(), 3, 8, 2, DType::bf16, DType::f32, nullptr, DType::f32);
  const Result bf16_copies = run_engine(GetParam(), 3, 8, 2, DType::bf16, DType::f32, nullptr, DType::bf16);
  EXPECT_EQ(bf16_copies.losses, fp32_copies.losses);
  EXPECT_TRUE(bf16_copies.counters_match);
  EXPECT_EQ(bf16_copies.model_state, bf16_copies.expected_model_state);
  const bool whole = shard::strategy(GetParam()).params_whole;
  EXPECT_EQ(bf16_copies.model_state < fp32_copies.model_state, whole) << "only whole parameters persist";
}

INSTANTIATE_TEST_SUITE_P(Engine, EveryStrategy, ::testing::ValuesIn(kStrategies),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace hsdp::shard

// ---- ZeRO++ ------------------------------------------------------------------------------------------------
namespace hsdp::shard {
namespace {

// Deterministic gradients of rank `rank`: n S values whose magnitude varies by block (1e-3 .. 1e2).
std::vector<float> gradient_of(int rank, std::size_t total) {
  std::vector<float> g(total);
  for (std::size_t i = 0; i < total; ++i) {
    const unsigned h = static_cast<unsigned>(rank * 2654435761u + i * 40503u + 12345u);
    const float magnitude = std::pow(10.0f, static_cast<float>((i / 97 + static_cast<std::size_t>(rank)) % 6) - 3.0f);
    g[i] = magnitude * (static_cast<float>(h % 20001u) / 10000.0f - 1.0f);
  }
  return g;
}

double absmax(const std::vector<float>& g, std::size_t begin, std::size_t end) {
  double a = 0;
  for (std::size_t i = begin; i < end; ++i) a = std::max(a, std::fabs(static_cast<double>(g[i])));
  return a;
}

// The bound of zeropp.hpp for element e of this rank's slice, from every rank's inputs.
double qgz_bound(const comm::Topology& topo, const std::vector<std::vector<float>>& inputs, std::size_t slice_begin,
                 std::size_t e, std::size_t s, quant::QuantSpec spec, bool two_hop) {
  const std::size_t block_begin = e / spec.block * spec.block;
  const std::size_t block_end = std::min(s, block_begin + spec.block);
  const double q = quant::qmax(spec.bits);
  const double slack = 1.0 + std::ldexp(1.0, -15);
  double bound = 0;
  for (int j = 0; j < topo.num_nodes(); ++j) {
    const auto ranks = topo.ranks_on_node(j);
    double a_sum = 0, hop1 = 0;
    for (const int r : ranks) {
      const double a = absmax(inputs[static_cast<std::size_t>(r)], slice_begin + block_begin, slice_begin + block_end);
      a_sum += a;
      hop1 += a / (2 * q);
    }
    const bool single = ranks.size() == 1 || !two_hop;
    if (single) {
      bound += hop1;  // one quantization per contribution
    } else {
      bound += hop1 + a_sum * (1 + 1 / (2 * q)) / (2 * q);
    }
  }
  return bound * slack;
}

class QgzBits : public ::testing::TestWithParam<quant::Bits> {};

TEST_P(QgzBits, TwoHopAllToAll_IsWithinTheBoundOfTwoQuantizations) {
  auto& ctx = context();
  const comm::Topology& topo = ctx.topology;
  if (topo.num_nodes() == 1 || !topo.nodes_equal_size()) GTEST_SKIP() << "one node: qgZ uses the exact reduce-scatter";
  comm::ProcessMesh& mesh = *ctx.meshes.at(comm::ShardScope::world);
  const std::size_t s = 1001;  // odd: partial blocks, odd int4 packing
  const std::size_t n = static_cast<std::size_t>(ctx.world.size());
  std::vector<std::vector<float>> inputs;
  for (std::size_t r = 0; r < n; ++r) inputs.push_back(gradient_of(static_cast<int>(r), n * s));
  std::vector<std::vector<int>> rank_at;
  for (int j = 0; j < topo.num_nodes(); ++j) rank_at.push_back(topo.ranks_on_node(j));
  const quant::QuantSpec spec{GetParam(), 256};
  std::vector<float> out(s);
  MemoryAccountant memory;
  const auto device = make_cpu_device_ops(memory);
  qgz_two_hop(*device, inputs[static_cast<std::size_t>(ctx.world.rank())], out, spec, mesh.node(), mesh.cross_node(),
              rank_at);
  const std::size_t begin = static_cast<std::size_t>(ctx.world.rank()) * s;
  const bool two_hop = topo.node_size(0) > 1;
  double worst = 0;  // largest error / bound
  for (std::size_t e = 0; e < s; ++e) {
    double exact = 0;
    for (std::size_t r = 0; r < n; ++r) exact += inputs[r][begin + e];
    const double bound = qgz_bound(topo, inputs, begin, e, s, spec, two_hop);
    const double error = std::fabs(out[e] - exact);
    ASSERT_LE(error, bound) << "element " << e << " exact " << exact << " qgZ " << out[e];
    worst = std::max(worst, error / bound);
  }
  EXPECT_GT(worst, 0.0) << "a quantized sum that is exact everywhere means nothing was quantized";
}

TEST_P(QgzBits, OneHopInsideTheNode_IsWithinTheBoundOfOneQuantization) {
  auto& ctx = context();
  if (!ctx.topology.nodes_equal_size()) GTEST_SKIP() << "hybrid needs equal nodes";
  comm::ProcessMesh& mesh = *ctx.meshes.at(comm::ShardScope::node);
  comm::Communicator& group = mesh.shard();
  const std::size_t s = 777;
  const auto p = static_cast<std::size_t>(group.size());
  // Inputs of the node's ranks, indexed by shard (= local) rank.
  std::vector<std::vector<float>> inputs;
  for (std::size_t l = 0; l < p; ++l) inputs.push_back(gradient_of(static_cast<int>(l) + 10 * ctx.topology.node(), p * s));
  const quant::QuantSpec spec{GetParam(), 128};
  std::vector<float> out(s);
  MemoryAccountant memory;
  const auto device = make_cpu_device_ops(memory);
  qgz_one_hop(*device, inputs[static_cast<std::size_t>(group.rank())], out, spec, group);
  const std::size_t begin = static_cast<std::size_t>(group.rank()) * s;
  const double q = quant::qmax(spec.bits);
  for (std::size_t e = 0; e < s; ++e) {
    const std::size_t b0 = e / spec.block * spec.block, b1 = std::min(s, b0 + spec.block);
    double exact = 0, bound = 0;
    for (std::size_t l = 0; l < p; ++l) {
      exact += inputs[l][begin + e];
      bound += absmax(inputs[l], begin + b0, begin + b1) / (2 * q);
    }
    ASSERT_LE(std::fabs(out[e] - exact), bound * (1 + std::ldexp(1.0, -15))) << "element " << e;
  }
}

INSTANTIATE_TEST_SUITE_P(ZeroPP, QgzBits, ::testing::Values(quant::Bits::int4, quant::Bits::int8),
                         [](const auto& info) { return std::string(quant::to_string(info.param)); });

// Inter-node bytes summed over all ranks.
struct Traffic {
  std::uint64_t step = 0;     // one training step, every collective
  std::uint64_t forward = 0;  // one forward-only pass (evaluate): forward gathers only
  std::uint64_t gathers = 0;  // the step's all-gathers (forward and backward)
  std::uint64_t reductions = 0;  // the step's reduce-scatters, all-to-alls and all-reduces
  comm::ByteCounters mine;    // this rank's counters of the step
  bool matches_formula = false;
  std::int64_t hpz_peak = 0;
};

std::uint64_t summed_inter(std::uint64_t mine) {
  MPI_Allreduce(MPI_IN_PLACE, &mine, 1, MPI_UINT64_T, MPI_SUM, context().world.raw());
  return mine;
}

Traffic measure(comm::ProcessMesh& mesh, const EngineOptions& options, float rank0_dloss = 1.0f) {
  auto& ctx = context();
  const model::ModelLayout layout(tiny_config());
  MemoryAccountant memory;
  Engine engine(layout, mesh, options, kSeed, memory);
  model::Gpt<float> gpt(layout, 2, kSeq, memory);
  model::CpuUnitModel units(gpt);
  const int first = ctx.world.rank() * 2;
  Traffic t;
  mesh.reset_counters();
  engine.evaluate(units, rows(0, first, 2, false), rows(0, first, 2, true));
  t.forward = summed_inter(mesh.total_counters().total().inter);
  mesh.reset_counters();
  engine.begin_step();
  const float dloss = ctx.world.rank() == 0 ? rank0_dloss : 1.0f;
  engine.forward_backward(units, rows(0, first, 2, false), rows(0, first, 2, true), dloss, true);
  engine.step_scalars(false);
  t.mine = mesh.total_counters();
  t.step = summed_inter(t.mine.total().inter);
  t.gathers = summed_inter(t.mine.of(comm::Collective::all_gather).bytes.inter);
  t.reductions = t.step - t.gathers;
  const comm::ByteCounters expected = step_traffic(layout, options, groups_of(mesh));
  t.matches_formula = t.mine == expected;
  if (!t.matches_formula) {  // say where, to make a failure readable
    for (const auto c : comm::kAllCollectives) {
      const auto& a = t.mine.of(c);
      const auto& b = expected.of(c);
      if (!(a == b)) {
        ctx.logger.any_rank(comm::to_string(c), ": measured ", a.calls, " calls ", a.bytes.intra, "/", a.bytes.inter,
                        ", formula ", b.calls, " calls ", b.bytes.intra, "/", b.bytes.inter);
      }
    }
  }
  t.hpz_peak = memory.peak(MemCategory::hpz_secondary);
  return t;
}

EngineOptions bf16_full_shard() {
  return {.strategy = Sharding::full_shard,
          .param_dtype = DType::bf16,
          .reduce_dtype = DType::bf16,
          .prefetch = true,
          .bucket_mb = 25,
          .grad_accum = 1,
          .zeropp = {},
          .streams = {},
          .trace_file = {}};
}

// Inter-node bytes summed over all ranks, ZeRO++ over full_shard at bf16: qwZ halves the forward gather, hpZ keeps
// the backward gather inside the node, qgZ sends int4 gradients; together <= 0.26 (theory 0.25 plus scales).
TEST(ZeroPP, InterNodeBytes_AreAQuarterOfFullShardBf16_AndEachFeatureShowsItsFactor) {
  auto& ctx = context();
  const comm::Topology& topo = ctx.topology;
  if (topo.num_nodes() == 1 || !topo.nodes_equal_size()) GTEST_SKIP() << "needs several equal nodes";
  const int k = topo.node_size(0);
  comm::ProcessMesh mesh(ctx.world, topo, ctx.staged(mesh_options(Sharding::full_shard, k)));
  const Traffic base = measure(mesh, bf16_full_shard());
  EngineOptions qwz = bf16_full_shard(), hpz = bf16_full_shard(), qgz = bf16_full_shard(), all = bf16_full_shard();
  qwz.zeropp.quantized_weights = true;
  hpz.zeropp.hpz_partition_size = k;
  qgz.zeropp.quantized_gradients = true;
  all.zeropp = {.quantized_weights = true, .hpz_partition_size = k, .quantized_gradients = true,
                .grad_bits = quant::Bits::int4, .block = quant::kDefaultBlock};
  const Traffic with_qwz = measure(mesh, qwz), with_hpz = measure(mesh, hpz), with_qgz = measure(mesh, qgz),
                with_all = measure(mesh, all);
  EXPECT_TRUE(base.matches_formula) << "full_shard bf16: byte counters differ from step_traffic()";
  EXPECT_TRUE(with_qwz.matches_formula) << "qwZ: byte counters differ from step_traffic()";
  EXPECT_TRUE(with_hpz.matches_formula) << "hpZ: byte counters differ from step_traffic()";
  EXPECT_TRUE(with_qgz.matches_formula) << "qgZ: byte counters differ from step_traffic()";
  EXPECT_TRUE(with_all.matches_formula) << "qwZ+hpZ+qgZ: byte counters differ from step_traffic()";

  const double qwz_forward = static_cast<double>(with_qwz.forward) / static_cast<double>(base.forward);
  const std::uint64_t hpz_backward_gathers = with_hpz.gathers - with_hpz.forward;
  const double qgz_gradients = static_cast<double>(with_qgz.reductions) / static_cast<double>(base.reductions);
  const double total = static_cast<double>(with_all.step) / static_cast<double>(base.step);
  ctx.logger.info("ZeRO++ inter-node bytes (all ranks, one step) vs full_shard bf16: qwZ forward gather x",
                  qwz_forward, ", hpZ backward gathers ", hpz_backward_gathers, " bytes, qgZ gradients x",
                  qgz_gradients, ", all three x", total, " (", with_all.step, " / ", base.step, " bytes)");
  EXPECT_GE(qwz_forward, 0.49);
  EXPECT_LE(qwz_forward, 0.51);
  EXPECT_GT(base.gathers - base.forward, 0u) << "full_shard's backward gathers must cross nodes";
  EXPECT_EQ(hpz_backward_gathers, 0u);
  EXPECT_LE(qgz_gradients, 0.26);
  EXPECT_LE(total, 0.26);
  // hpZ's secondary copies (the embedding and every block, alive together at the head, bf16): 2 Pp / k bytes each.
  const model::ModelLayout layout(tiny_config());
  std::int64_t expected = 0;
  for (int b = 0; b <= layout.config().n_layer; ++b) {
    expected += static_cast<std::int64_t>(UnitGeometry::make(layout.unit(b).numel, ctx.world.size(), 0).padded_numel) * 2 / k;
  }
  EXPECT_EQ(with_hpz.hpz_peak, expected);
}

TEST(ZeroPP, HpzWithHybridShard_IsAConfigErrorSayingWhy) {
  auto& ctx = context();
  if (!ctx.topology.nodes_equal_size()) GTEST_SKIP() << "hybrid needs equal nodes";
  const model::ModelLayout layout(tiny_config());
  MemoryAccountant memory;
  EngineOptions o = bf16_full_shard();
  o.strategy = Sharding::hybrid_shard;
  o.zeropp.hpz_partition_size = 1;
  try {
    Engine engine(layout, *ctx.meshes.at(comm::ShardScope::node), o, kSeed, memory);
    ADD_FAILURE() << "hpZ with hybrid_shard was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_THAT(e.what(), ::testing::HasSubstr("the shard group is the node already"));
  }
}

TEST(ZeroPP, OneNode_QgzFallsBackToTheExactReduceScatter) {
  auto& ctx = context();
  if (ctx.topology.num_nodes() != 1) GTEST_SKIP() << "only on one node";
  comm::ProcessMesh& mesh = *ctx.meshes.at(comm::ShardScope::world);
  EngineOptions qgz = bf16_full_shard();
  qgz.zeropp.quantized_gradients = true;
  const Traffic a = measure(mesh, bf16_full_shard()), b = measure(mesh, qgz);
  EXPECT_TRUE(b.matches_formula);
  EXPECT_EQ(a.mine, b.mine) << "the fallback must issue exactly the reduce-scatters of full_shard";
}

// qgZ: a rank whose gradients are not finite (an fp16 overflow, or a bf16/fp32 run diverging on one rank's batch)
// must not throw while quantizing (the others would wait in the all-to-all); every rank learns of it, so the loss
// scaler skips the step everywhere (fp16) or every rank ends as a divergence (the trainer: exit 5).
TEST(ZeroPP, NonFiniteGradientOnOneRank_IsSeenByEveryRankBeforeQuantizing_InEveryDtype) {
  auto& ctx = context();
  if (!ctx.topology.nodes_equal_size()) GTEST_SKIP() << "needs equal nodes";
  comm::ProcessMesh& mesh = *ctx.meshes.at(comm::ShardScope::world);
  const model::ModelLayout layout(tiny_config());
  for (const DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    SCOPED_TRACE(to_string(dtype));
    MemoryAccountant memory;
    EngineOptions o = bf16_full_shard();
    o.param_dtype = dtype;
    o.zeropp.quantized_gradients = true;
    Engine engine(layout, mesh, o, kSeed, memory);
    model::Gpt<float> gpt(layout, 2, kSeq, memory);
    model::CpuUnitModel units(gpt);
    const int first = ctx.world.rank() * 2;
    engine.begin_step();
    const float dloss = ctx.world.rank() == 0 ? std::numeric_limits<float>::infinity() : 1.0f;
    EXPECT_NO_THROW(engine.forward_backward(units, rows(0, first, 2, false), rows(0, first, 2, true), dloss, true));
    EXPECT_TRUE(engine.step_scalars(true).nonfinite);
    engine.begin_step();
    engine.forward_backward(units, rows(0, first, 2, false), rows(0, first, 2, true), 1.0f, true);
    EXPECT_FALSE(engine.step_scalars(true).nonfinite);
  }
}

}  // namespace
}  // namespace hsdp::shard
