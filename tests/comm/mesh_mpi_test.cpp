// ProcessMesh membership for every strategy on the emulated mesh, its errors, its counters and description;
// CommHandle semantics and the call-time errors of MpiCommunicator.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <string>
#include <vector>

#include "hsdp/core/error.hpp"
#include "mpi_test_context.hpp"
#include "typed_values.hpp"

namespace hsdp::comm::testing {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// World ranks matching `keep`, ascending.
template <typename Keep>
std::vector<int> world_ranks_where(Keep keep) {
  std::vector<int> ranks;
  for (int r = 0; r < context().spec.world_size; ++r) {
    if (keep(r)) ranks.push_back(r);
  }
  return ranks;
}

std::vector<int> all_ranks() {
  return world_ranks_where([](int) { return true; });
}

std::vector<int> same_node_ranks() {
  const MeshSpec& m = context().spec;
  const int me = context().topology.world_rank;
  return world_ranks_where([&](int r) { return m.node_of(r) == m.node_of(me); });
}

std::vector<int> same_local_rank_ranks() {
  const MeshSpec& m = context().spec;
  const int me = context().topology.world_rank;
  return world_ranks_where([&](int r) { return m.local_of(r) == m.local_of(me); });
}

TEST(Topology, EmulatedTopology_MatchesTheMeshGivenOnTheCommandLine) {
  const MeshSpec& m = context().spec;
  const Topology& t = context().topology;
  EXPECT_TRUE(t.emulated);
  EXPECT_EQ(t.world_size, m.world_size);
  EXPECT_EQ(t.num_nodes(), m.nodes());
  for (int r = 0; r < m.world_size; ++r) {
    EXPECT_EQ(t.node_of_rank[static_cast<std::size_t>(r)], m.node_of(r)) << "rank " << r;
    EXPECT_EQ(t.local_rank_of(r), m.local_of(r)) << "rank " << r;
  }
}

TEST(Topology, RealNodes_FromSharedMemory_GroupExactlyTheRanksOnOneHost) {
  const Topology real = detect_topology(MPI_COMM_WORLD, TopologyOptions{});
  EXPECT_FALSE(real.emulated);
  constexpr int kHostChars = 64;
  std::array<char, kHostChars> mine{};
  const std::string host = host_name();
  std::copy_n(host.begin(), std::min<std::size_t>(host.size(), kHostChars - 1), mine.begin());
  const int n = context().spec.world_size;
  std::vector<char> hosts(static_cast<std::size_t>(n * kHostChars));
  MPI_Allgather(mine.data(), kHostChars, MPI_CHAR, hosts.data(), kHostChars, MPI_CHAR, MPI_COMM_WORLD);
  const auto host_of = [&](int r) { return std::string(&hosts[static_cast<std::size_t>(r * kHostChars)]); };
  for (int r = 0; r < n; ++r) {
    for (int s = 0; s < n; ++s) {
      EXPECT_EQ(real.node_of_rank[static_cast<std::size_t>(r)] == real.node_of_rank[static_cast<std::size_t>(s)],
                host_of(r) == host_of(s))
          << "ranks " << r << " and " << s;
    }
  }
  ProcessMesh mesh(context().world, real, MeshOptions{ShardScope::world});
  const std::string text = mesh.describe();
  if (real.world_rank == 0) {
    EXPECT_THAT(text, HasSubstr("(real nodes from MPI_COMM_TYPE_SHARED)"));
    EXPECT_THAT(text, HasSubstr("node 0 (" + host_of(0) + "): ranks 0"));
  }
}

TEST(Mesh, NodeAndCrossNodeGroups_FollowTheEmulatedPlacement_ForEveryShardScope) {
  for (const auto& [scope, mesh] : context().meshes) {
    EXPECT_THAT(members_of(mesh->node()), ElementsAreArray(same_node_ranks())) << to_string(scope);
    EXPECT_THAT(members_of(mesh->node_gather()), ElementsAreArray(same_node_ranks())) << to_string(scope);
    EXPECT_THAT(members_of(mesh->cross_node()), ElementsAreArray(same_local_rank_ranks())) << to_string(scope);
    EXPECT_EQ(mesh->node().name(), "node");
    EXPECT_EQ(mesh->node_gather().name(), "node_gather");
    EXPECT_EQ(mesh->cross_node().name(), "cross_node");
  }
}

TEST(Mesh, ShardAndReplicateGroups_HaveTheMembershipOfTheirScope) {
  const int me = context().topology.world_rank;
  for (const auto& [scope, mesh] : context().meshes) {
    std::vector<int> shard;
    std::vector<int> replicate;
    switch (scope) {
      case ShardScope::world:
        shard = all_ranks();
        replicate = {me};
        break;
      case ShardScope::node:
        shard = same_node_ranks();
        replicate = same_local_rank_ranks();
        break;
      case ShardScope::self:
        shard = {me};
        replicate = all_ranks();
        break;
    }
    EXPECT_THAT(members_of(mesh->shard()), ElementsAreArray(shard)) << to_string(scope);
    EXPECT_THAT(members_of(mesh->replicate()), ElementsAreArray(replicate)) << to_string(scope);
    EXPECT_EQ(mesh->shard().size() * mesh->replicate().size(), context().spec.world_size) << to_string(scope);
    EXPECT_EQ(mesh->shard().name(), "shard");
    EXPECT_EQ(mesh->replicate().name(), "replicate");
    EXPECT_FALSE(mesh->has_hpz());
  }
}

TEST(Mesh, HybridShard_ShardGroupIsOneEmulatedNode_AndReplicateGroupHasOneRankPerNode) {
  const MeshSpec& m = context().spec;
  ProcessMesh& mesh = *context().meshes.at(ShardScope::node);
  // Written out for the 2x2 meshes, as a person would check them by hand.
  if (m.ranks_per_node == 2 && m.world_size == 4) {
    const int me = context().topology.world_rank;
    const std::vector<int> node_of_me = m.placement == Placement::cyclic ? std::vector<int>{me % 2, me % 2 + 2}
                                                                         : std::vector<int>{me / 2 * 2, me / 2 * 2 + 1};
    EXPECT_THAT(members_of(mesh.shard()), ElementsAreArray(node_of_me));
  }
  const std::vector<int> replicate = members_of(mesh.replicate());
  EXPECT_EQ(static_cast<int>(replicate.size()), m.nodes());
  std::vector<int> nodes;
  for (const int r : replicate) nodes.push_back(m.node_of(r));
  std::sort(nodes.begin(), nodes.end());
  std::vector<int> every_node(static_cast<std::size_t>(m.nodes()));
  std::iota(every_node.begin(), every_node.end(), 0);
  EXPECT_THAT(nodes, ElementsAreArray(every_node));
}

TEST(Mesh, HybridShard_OnNodesOfUnequalSize_IsAConfigErrorNamingTheSizes) {
  // ranks_per_node 3 on 4 ranks, block: nodes of 3 and 1 ranks.
  const Topology unequal = Topology::emulate(context().topology.world_rank, context().spec.world_size, 3,
                                             Placement::block);
  try {
    ProcessMesh mesh(context().world, unequal, MeshOptions{ShardScope::node, 0, "parallel.sharding=hybrid_shard"});
    ADD_FAILURE() << "no error for a node-scoped mesh on nodes of unequal size";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_THAT(e.what(), HasSubstr("parallel.sharding=hybrid_shard"));
    EXPECT_THAT(e.what(), HasSubstr("node 0: 3, node 1: 1"));
  }
  // Sharding over the world does not care about node sizes.
  ProcessMesh full(context().world, unequal, MeshOptions{ShardScope::world});
  EXPECT_EQ(full.node().size(), context().topology.world_rank < 3 ? 3 : 1);
}

TEST(Mesh, HpzGroups_AreConsecutiveLocalRanksOfOneNode_OrAConfigErrorWhenKDoesNotDivideTheNode) {
  const MeshSpec& m = context().spec;
  constexpr int k = 2;
  if (m.ranks_per_node % k != 0) {
    try {
      ProcessMesh mesh(context().world, context().topology, MeshOptions{ShardScope::world, k});
      ADD_FAILURE() << "no error for hpz " << k << " on nodes of " << m.ranks_per_node;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::config);
      EXPECT_THAT(e.what(), HasSubstr("zeropp.hpz_partition_size=2"));
    }
    return;
  }
  ProcessMesh mesh(context().world, context().topology, MeshOptions{ShardScope::world, k});
  ASSERT_TRUE(mesh.has_hpz());
  const int me = context().topology.world_rank;
  EXPECT_THAT(members_of(mesh.hpz()), ElementsAreArray(world_ranks_where([&](int r) {
                return m.node_of(r) == m.node_of(me) && m.local_of(r) / k == m.local_of(me) / k;
              })));
  EXPECT_EQ(mesh.hpz().name(), "hpz");
  const std::string text = mesh.describe();
  if (me == 0) {
    EXPECT_THAT(text, HasSubstr("hpz groups"));
  }
}

TEST(Mesh, TotalCounters_SumTheMeshGroups_AndLeaveWorldOut) {
  ProcessMesh& mesh = *context().meshes.at(ShardScope::world);
  mesh.reset_counters();
  const ByteCounters world_before = mesh.world().counters();
  std::vector<float> data(13, 1.0f);
  mesh.shard().all_reduce(std::span<float>(data));
  mesh.replicate().all_reduce(std::span<float>(data));
  mesh.node().barrier();
  mesh.node_gather().all_reduce(std::span<float>(data));
  mesh.cross_node().broadcast(std::span<float>(data), 0);
  ByteCounters expected = mesh.shard().counters();
  expected += mesh.replicate().counters();
  expected += mesh.node().counters();
  expected += mesh.node_gather().counters();
  expected += mesh.cross_node().counters();
  EXPECT_TRUE(mesh.total_counters() == expected);
  EXPECT_EQ(mesh.total_counters().of(Collective::all_reduce).calls, 3u);
  EXPECT_TRUE(mesh.world().counters() == world_before);
  mesh.reset_counters();
  EXPECT_TRUE(mesh.total_counters() == ByteCounters{});
}

TEST(Mesh, Describe_OnRankZero_ListsNodesAndEachGroupOnce) {
  const MeshSpec& m = context().spec;
  ProcessMesh& mesh = *context().meshes.at(ShardScope::node);
  const std::string text = mesh.describe();
  if (context().topology.world_rank != 0) {
    EXPECT_EQ(text, "");
    return;
  }
  EXPECT_THAT(text, HasSubstr("shard groups of scope node"));
  EXPECT_THAT(text, HasSubstr("--topology.ranks_per_node=" + std::to_string(m.ranks_per_node)));
  EXPECT_THAT(text, HasSubstr(std::string("placement ") + to_string(m.placement)));
  if (m.ranks_per_node == 2 && m.placement == Placement::cyclic) {
    EXPECT_THAT(text, HasSubstr("node 1: ranks 1 3"));
    EXPECT_THAT(text, HasSubstr("{0 2} {1 3}"));
    EXPECT_THAT(text, HasSubstr("{0 1} {2 3}"));
  }
  std::cout << text;
}

TEST(Handles, MoveAssigningAHandle_WaitsForTheOpItReplaces) {
  MpiCommunicator& world = context().world;
  std::vector<double> first(7, 1.0);
  std::vector<double> second(7, 2.0);
  CommHandle handle = world.all_reduce_async(std::span<double>(first));
  handle = world.all_reduce_async(std::span<double>(second));
  // The first op is complete now (its buffer holds the sum); the second may still be pending.
  EXPECT_EQ(first[6], static_cast<double>(world.size()));
  handle.wait();
  EXPECT_FALSE(handle.pending());
  EXPECT_EQ(second[0], 2.0 * world.size());
}

TEST(Handles, DoneAndDestructor_CompleteTheOp) {
  MpiCommunicator& world = context().world;
  std::vector<float> polled(1001, 1.0f);
  CommHandle handle = world.all_reduce_async(std::span<float>(polled), ReduceOp::avg);
  while (!handle.done()) {
  }
  EXPECT_FALSE(handle.pending());
  EXPECT_TRUE(handle.done());
  EXPECT_EQ(polled[1000], 1.0f);  // avg of ones: exact
  std::vector<float> dropped(13, 1.0f);
  { const CommHandle scoped = world.all_reduce_async(std::span<float>(dropped)); }
  EXPECT_EQ(dropped[12], static_cast<float>(world.size()));
}

TEST(Errors, ReductionOnPackedInt4_IsAnInternalErrorAtCallTime) {
  MpiCommunicator& world = context().world;
  const std::uint64_t sequence = world.sequence();
  std::vector<std::uint8_t> packed(4 * 8);
  for (const ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
    try {
      world.all_reduce(packed.data(), packed.data(), 8, DType::u8, op);
      ADD_FAILURE() << "no error for all_reduce on u8";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::internal);
      EXPECT_THAT(e.what(), HasSubstr("uint8"));
    }
    EXPECT_THROW(world.reduce_scatter(packed.data(), packed.data() + 24, 8, DType::u8, op), Error);
  }
  EXPECT_EQ(world.sequence(), sequence);
}

TEST(Errors, AvgOnInt8_IsAnInternalErrorAtCallTime) {
  MpiCommunicator& world = context().world;
  std::vector<std::int8_t> values(4 * 3);
  try {
    world.all_reduce(values.data(), values.data(), 3, DType::i8, ReduceOp::avg);
    ADD_FAILURE() << "no error for avg on int8";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::internal);
  }
  EXPECT_THROW(world.reduce_scatter(values.data(), values.data(), 3, DType::i8, ReduceOp::avg), Error);
}

TEST(Errors, TypedReduceScatterAndAllToAll_WithMismatchedSizes_AreInternalErrors) {
  MpiCommunicator& world = context().world;
  std::vector<float> send(4 * 3 + 1);
  std::vector<float> recv(3);
  try {
    world.reduce_scatter<float>(send, std::span<float>(recv));
    ADD_FAILURE() << "no error for a send buffer that is not size() blocks";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::internal);
    EXPECT_THAT(e.what(), HasSubstr("reduce_scatter on group 'world'"));
  }
  std::vector<float> a2a_recv(4 * 3 + 1);
  EXPECT_THROW(world.all_to_all<float>(send, std::span<float>(a2a_recv)), Error);
  EXPECT_THROW(world.broadcast(std::span<float>(recv), world.size()), Error);
}

}  // namespace
}  // namespace hsdp::comm::testing
