// hsdp-plan's formulas against the library's: the unit-size equivalents, the mesh groups built without MPI, the
// activation formula against Gpt<float>, and the all-ranks sum by node symmetry against the sum over every rank.
// Every comparison is exact (integers, no tolerance): these are the numbers hsdp-train's counters must equal.
#include "hsdp/shard/formulas.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hsdp/core/error.hpp"
#include "hsdp/core/memory.hpp"
#include "hsdp/model/gpt.hpp"
#include "hsdp/model/layout.hpp"
#include "plan/mesh_groups.hpp"
#include "plan/planner.hpp"
#include "plan/shapes.hpp"
#include "plan/unit_formulas.hpp"

namespace hsdp::plan {
namespace {

using comm::Placement;
using comm::Sharding;

constexpr Sharding kStrategies[] = {Sharding::no_shard,   Sharding::zero1,        Sharding::shard_grad_op,
                                    Sharding::full_shard, Sharding::hybrid_shard, Sharding::hybrid_shard_zero2};

model::GptConfig config(int layers, int heads, int width, int block, int vocab, int padded) {
  model::GptConfig c;
  c.n_layer = layers;
  c.n_head = heads;
  c.n_embd = width;
  c.block_size = block;
  c.vocab_size = vocab;
  c.padded_vocab_size = padded;
  return c;
}

// Shapes whose units do not divide by the group sizes below, so padding is exercised.
std::vector<model::GptConfig> gpt_configs() {
  return {config(4, 4, 128, 64, 64, 64), config(2, 2, 8, 8, 11, 16), config(3, 3, 48, 17, 101, 101)};
}

struct Mesh {
  int nodes, ranks_per_node;
  Placement placement;
};
const std::vector<Mesh> kMeshes = {{1, 4, Placement::block}, {2, 2, Placement::block},  {4, 1, Placement::block},
                                   {2, 3, Placement::block}, {3, 2, Placement::cyclic}, {2, 4, Placement::cyclic},
                                   {1, 1, Placement::block}};

// The engine options of one case: strategy, dtypes, accumulation, ZeRO++ where the engine allows it.
std::vector<shard::EngineOptions> option_cases(Sharding s, int ranks_per_node) {
  std::vector<shard::EngineOptions> out;
  for (const int k : {1, 3}) {
    for (const DType t : {DType::f32, DType::bf16}) {
      shard::EngineOptions o;
      o.strategy = s;
      o.param_dtype = t;
      o.reduce_dtype = t;
      o.grad_accum = k;
      o.bucket_mb = 0.05;  // several buckets on these small models
      out.push_back(o);
      if (s == Sharding::full_shard || s == Sharding::hybrid_shard) {
        shard::EngineOptions z = o;
        z.zeropp.quantized_weights = true;
        z.zeropp.hpz_partition_size = ranks_per_node;
        z.zeropp.quantized_gradients = true;
        z.zeropp.block = 64;
        out.push_back(z);
        z.zeropp.hpz_partition_size = 0;
        z.zeropp.quantized_weights = false;
        z.zeropp.grad_bits = quant::Bits::int8;
        out.push_back(z);
      }
    }
  }
  return out;
}

TEST(UnitFormulas, StepTrafficAndModelState_EqualTheLibrary_OnGptLayouts_EveryRankMeshAndStrategy) {
  int compared = 0;
  for (const auto& cfg : gpt_configs()) {
    const model::ModelLayout layout(cfg);
    const PlanModel planned = gpt_model(cfg, "test");
    const UnitSizes units{planned.unit_numel, planned.tied_head};
    for (const Mesh& mesh : kMeshes) {
      const int world = mesh.nodes * mesh.ranks_per_node;
      for (const Sharding s : kStrategies) {
        for (const shard::EngineOptions& o : option_cases(s, mesh.ranks_per_node)) {
          for (int rank = 0; rank < world; ++rank) {
            const auto t = emulated_topology(rank, mesh.nodes, mesh.ranks_per_node, mesh.placement);
            const auto g = mesh_groups(t, s, o.zeropp.hpz_partition_size);
            const std::string where = std::string(comm::to_string(s)) + " mesh " + std::to_string(mesh.nodes) + "x" +
                                      std::to_string(mesh.ranks_per_node) + " rank " + std::to_string(rank);
            EXPECT_EQ(step_traffic(units, o, g), shard::step_traffic(layout, o, g)) << where;
            EXPECT_EQ(model_state_bytes(units, s, g.shard.size(), o.param_dtype),
                      shard::model_state_bytes(layout, s, g.shard.size(), o.param_dtype))
                << where;
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 1000);
}

TEST(UnitFormulas, Buckets_EqualTheLibrary) {
  for (const auto& cfg : gpt_configs()) {
    const model::ModelLayout layout(cfg);
    const PlanModel planned = gpt_model(cfg, "test");
    for (const double mb : {0.001, 0.05, 25.0}) {
      const auto mine = make_buckets(UnitSizes{planned.unit_numel, true}, mb);
      const auto theirs = shard::make_buckets(layout, mb);
      ASSERT_EQ(mine.size(), theirs.size());
      for (std::size_t i = 0; i < mine.size(); ++i) {
        EXPECT_EQ(mine[i].first_unit, theirs[i].first_unit);
        EXPECT_EQ(mine[i].last_unit, theirs[i].last_unit);
        EXPECT_EQ(mine[i].offset, theirs[i].offset);
        EXPECT_EQ(mine[i].count, theirs[i].count);
      }
    }
  }
}

TEST(UnitFormulas, UntiedHead_DropsOnlyTheEmbeddingsSecondGather) {
  const PlanModel planned = gpt_model(config(2, 2, 8, 8, 11, 16), "test");
  const auto t = emulated_topology(0, 1, 4, Placement::block);
  const auto g = mesh_groups(t, Sharding::full_shard, 0);
  shard::EngineOptions o;
  o.strategy = Sharding::full_shard;
  const auto tied = step_traffic(UnitSizes{planned.unit_numel, true}, o, g);
  const auto untied = step_traffic(UnitSizes{planned.unit_numel, false}, o, g);
  const std::uint64_t embedding_gather = 3 * ((planned.unit_numel[0] + 3) / 4) * 4;  // (n-1) S b
  EXPECT_EQ(tied.of(comm::Collective::all_gather).calls, untied.of(comm::Collective::all_gather).calls + 1);
  EXPECT_EQ(tied.total().intra - untied.total().intra, embedding_gather);
}

// The groups ProcessMesh builds on 2x2 (block), as README's --print-mesh shows them.
TEST(MeshGroups, HybridOn2x2_ShardIsTheNode_ReplicateIsTheSameLocalRank) {
  const auto t = emulated_topology(3, 2, 2, Placement::block);
  const auto g = mesh_groups(t, Sharding::hybrid_shard, 2);
  EXPECT_EQ(g.shard.rank, 1);
  EXPECT_EQ(g.shard.node_of_rank, (std::vector<int>{1, 1}));
  EXPECT_EQ(g.replicate.rank, 1);
  EXPECT_EQ(g.replicate.node_of_rank, (std::vector<int>{0, 1}));
  EXPECT_EQ(g.cross_node.node_of_rank, (std::vector<int>{0, 1}));
  EXPECT_EQ(g.hpz.rank, 1);
  EXPECT_EQ(g.hpz.size(), 2);
  const auto full = mesh_groups(t, Sharding::full_shard, 0);
  EXPECT_EQ(full.shard.rank, 3);
  EXPECT_EQ(full.shard.node_of_rank, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(full.replicate.size(), 1);
  EXPECT_EQ(full.hpz.size(), 1);
  const auto ddp = mesh_groups(t, Sharding::no_shard, 0);
  EXPECT_EQ(ddp.shard.size(), 1);
  EXPECT_EQ(ddp.replicate.rank, 3);
}

TEST(MeshGroups, CyclicPlacement_OrdersTheNodeByWorldRank) {
  // 3 nodes x 2, cyclic: node 0 = {0, 3}, node 1 = {1, 4}, node 2 = {2, 5}.
  const auto t = emulated_topology(4, 3, 2, Placement::cyclic);
  const auto g = mesh_groups(t, Sharding::hybrid_shard, 0);
  EXPECT_EQ(g.node.rank, 1);
  EXPECT_EQ(g.node.node_of_rank, (std::vector<int>{1, 1}));
  EXPECT_EQ(g.replicate.rank, 1);  // local rank 1 on nodes 0, 1, 2: ranks 3, 4, 5
  EXPECT_EQ(g.replicate.node_of_rank, (std::vector<int>{0, 1, 2}));
}

TEST(MeshGroups, HpzThatDoesNotDivideTheNode_IsAConfigError) {
  const auto t = emulated_topology(0, 2, 4, Placement::block);
  EXPECT_THROW(mesh_groups(t, Sharding::full_shard, 3), Error);
}

TEST(PlanTraffic, AllRanksByNodeSymmetry_EqualsTheSumOverEveryRank) {
  const PlanModel gpt = gpt_model(config(3, 3, 48, 17, 101, 101), "test");
  const PlanModel llama = llama_model({3, 64, 4, 16, 96, 101}, "tiny-llama");
  const std::vector<Mesh> meshes = {{2, 2, Placement::block},
                                    {3, 4, Placement::block},
                                    {4, 3, Placement::cyclic},
                                    {5, 2, Placement::cyclic},
                                    {8, 1, Placement::block}};
  for (const PlanModel* m : {&gpt, &llama}) {
    for (const Mesh& mesh : meshes) {
      Cluster c;
      c.nodes = mesh.nodes;
      c.ranks_per_node = mesh.ranks_per_node;
      c.placement = mesh.placement;
      for (const Variant& v : strategy_variants({}, mesh.ranks_per_node)) {
        shard::EngineOptions o;
        o.strategy = v.sharding;
        o.zeropp = v.zeropp;
        o.zeropp.block = 64;
        o.param_dtype = DType::bf16;
        o.bucket_mb = 0.01;
        const Traffic every = plan_traffic(*m, c, o, 1 << 20);
        const Traffic by_symmetry = plan_traffic(*m, c, o, 0);
        EXPECT_EQ(every.rank0, by_symmetry.rank0);
        EXPECT_EQ(every.all_ranks, by_symmetry.all_ranks)
            << m->name << " " << v.name << " on " << mesh.nodes << "x" << mesh.ranks_per_node;
      }
    }
  }
}

// Gpt<float>::activation_bytes() against the per-token formula of shapes.hpp, exactly, with and without
// activation checkpointing.
TEST(Activations, FormulaEqualsGptActivationBytes_Exactly) {
  struct Case {
    model::GptConfig cfg;
    int micro_batch, seq_len;
  };
  const std::vector<Case> cases = {{config(4, 4, 128, 64, 64, 64), 2, 64},
                                   {config(2, 2, 8, 8, 11, 16), 3, 5},
                                   {config(3, 3, 48, 17, 101, 128), 1, 17},
                                   {config(1, 8, 64, 32, 50, 64), 4, 32}};
  for (const Case& c : cases) {
    const model::ModelLayout layout(c.cfg);
    const PlanModel planned = gpt_model(c.cfg, "test");
    for (const bool checkpointing : {false, true}) {
      MemoryAccountant memory;
      const model::Gpt<float> gpt(layout, c.micro_batch, c.seq_len, memory, checkpointing);
      const auto expected = static_cast<std::int64_t>(gpt.activation_bytes());
      EXPECT_EQ(activation_bytes(planned.activation, c.micro_batch, c.seq_len, checkpointing), expected)
          << "L=" << c.cfg.n_layer << " C=" << c.cfg.n_embd << " B=" << c.micro_batch << " T=" << c.seq_len
          << " checkpointing=" << checkpointing;
      EXPECT_EQ(memory.current(MemCategory::activations), expected);
    }
  }
}

}  // namespace
}  // namespace hsdp::plan
