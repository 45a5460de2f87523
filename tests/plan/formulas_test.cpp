// hsdp-plan's inputs to the library's formulas: the unit sizes of its shapes, the mesh groups built without MPI, the
// activation formula against Gpt<float>, and the all-ranks sum and busiest rank by node symmetry against every rank.
// Every comparison is exact (integers, no tolerance): these are the numbers hsdp-train's counters must equal.
#include "hsdp/shard/formulas.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "hsdp/core/error.hpp"
#include "hsdp/core/memory.hpp"
#include "hsdp/model/gpt.hpp"
#include "hsdp/model/layout.hpp"
#include "plan/mesh_groups.hpp"
#include "plan/planner.hpp"
#include "plan/shapes.hpp"

namespace hsdp::plan {
namespace {

using comm::Placement;
using shard::Sharding;

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

// The planner feeds the library's formulas the unit sizes of its model shapes: on GPT shapes they must be the
// layout's units, or hsdp-plan would disagree with hsdp-train's counters.
TEST(UnitFormulas, PlannedGptUnits_AreTheLayoutsUnits) {
  for (const auto& cfg : gpt_configs()) {
    const PlanModel planned = gpt_model(cfg, "test");
    EXPECT_EQ(planned.unit_numel, UnitSizes::of(model::ModelLayout(cfg)).numel);
    EXPECT_TRUE(planned.tied_head);
  }
}

// no_shard across nodes (docs/architecture.md, hierarchical DDP): per bucket of c elements a reduce-scatter of
// ceil(c/p) inside the node, an all-reduce of that shard across the nodes, an all-gather inside the node; one node or
// one rank per node keeps the flat all-reduce over the world. Closed forms of comm/traffic.hpp, one bucket, fp32.
TEST(UnitFormulas, NoShardAcrossNodes_IsHierarchical_AndFlatOnOneNodeOrOneRankPerNode) {
  const PlanModel planned = gpt_model(config(2, 2, 8, 8, 11, 16), "test");
  std::uint64_t c = 0;
  for (const std::size_t n : planned.unit_numel) c += n;
  shard::EngineOptions o;
  o.strategy = Sharding::no_shard;
  o.bucket_mb = 25;  // one bucket
  const UnitSizes units{planned.unit_numel, true};
  for (const Placement placement : {Placement::block, Placement::cyclic}) {
    for (int rank = 0; rank < 4; ++rank) {
      const auto t = emulated_topology(rank, 2, 2, placement);
      const auto traffic = step_traffic(units, o, mesh_groups(t, Sharding::no_shard, 0));
      const std::uint64_t block = (c + 1) / 2;
      const auto& rs = traffic.of(comm::Collective::reduce_scatter);
      const auto& ar = traffic.of(comm::Collective::all_reduce);
      const auto& ag = traffic.of(comm::Collective::all_gather);
      EXPECT_EQ(rs.calls, 1u);
      EXPECT_EQ(rs.bytes, (comm::LinkBytes{block * 4, 0})) << "rank " << rank;
      EXPECT_EQ(ar.calls, 1u);
      EXPECT_EQ(ar.bytes, (comm::LinkBytes{0, 2 * ((block + 1) / 2) * 4})) << "rank " << rank;
      EXPECT_EQ(ag.calls, 1u);
      EXPECT_EQ(ag.bytes, (comm::LinkBytes{block * 4, 0})) << "rank " << rank;
    }
  }
  for (const auto& [nodes, per_node] : {std::pair{1, 4}, std::pair{4, 1}}) {
    const auto t = emulated_topology(0, nodes, per_node, Placement::block);
    const auto traffic = step_traffic(units, o, mesh_groups(t, Sharding::no_shard, 0));
    EXPECT_EQ(traffic.of(comm::Collective::all_reduce).calls, 1u);
    EXPECT_EQ(traffic.of(comm::Collective::all_reduce).bytes.total(), 2 * 3 * ((c + 3) / 4) * 4);
    EXPECT_EQ(traffic.total().total(), traffic.of(comm::Collective::all_reduce).bytes.total());
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

TEST(PlanTraffic, AllRanksAndBusiestRankByNodeSymmetry_EqualTheOnesOverEveryRank) {
  const PlanModel gpt = gpt_model(config(3, 3, 48, 17, 101, 101), "test");
  model::GptConfig tiny_llama = config(3, 4, 64, 17, 101, 101);
  tiny_llama.arch = model::Arch::llama;
  tiny_llama.n_kv_head = 1;
  tiny_llama.ffn_dim = 96;
  const PlanModel llama = gpt_model(tiny_llama, "tiny-llama");
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
        EXPECT_EQ(every.max_rank, by_symmetry.max_rank)
            << m->name << " " << v.name << " on " << mesh.nodes << "x" << mesh.ranks_per_node;
        comm::LinkBytes most;
        for (int r = 0; r < c.world(); ++r) {
          const comm::LinkBytes b = rank_traffic(*m, c, o, r);
          most = {std::max(most.intra, b.intra), std::max(most.inter, b.inter)};
        }
        EXPECT_EQ(every.max_rank, most);
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
