// The traffic model of traffic.hpp on hand-computed cases (exact integer byte counts: no tolerance).
#include "hsdp/comm/traffic.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "link_bytes_print.hpp"

namespace hsdp::comm {
namespace {

// 4 ranks on 2 nodes: block puts ranks 0,1 on node 0; cyclic puts ranks 0,2 on node 0.
const std::vector<int> kBlock2x2 = {0, 0, 1, 1};
const std::vector<int> kCyclic2x2 = {0, 1, 0, 1};

LinkBytes intra(std::uint64_t b) { return {b, 0}; }
LinkBytes inter(std::uint64_t b) { return {0, b}; }

TEST(Traffic, RingOrder_IsNodeMajor_WithCyclicPlacement) {
  // Ring: 0 2 | 1 3.
  EXPECT_EQ(ring_successor(0, kCyclic2x2), 2);
  EXPECT_EQ(ring_successor(2, kCyclic2x2), 1);
  EXPECT_EQ(ring_successor(1, kCyclic2x2), 3);
  EXPECT_EQ(ring_successor(3, kCyclic2x2), 0);
  EXPECT_EQ(ring_predecessor(0, kCyclic2x2), 3);
  EXPECT_EQ(ring_predecessor(1, kCyclic2x2), 2);
}

TEST(Traffic, RingOrder_IsRankOrder_WithBlockPlacement) {
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(ring_successor(r, kBlock2x2), (r + 1) % 4);
    EXPECT_EQ(ring_predecessor(r, kBlock2x2), (r + 3) % 4);
  }
}

TEST(Traffic, AllReduce_SendsTwiceNMinusOneChunks_RoundedUp_OnBlock2x2) {
  // count 7 over 4 ranks: chunks of ceil(7/4) = 2; 2 * 3 * 2 * 4 bytes = 48.
  EXPECT_EQ(traffic_bytes(Collective::all_reduce, 7, 4, 0, kBlock2x2), intra(48));
  EXPECT_EQ(traffic_bytes(Collective::all_reduce, 7, 4, 1, kBlock2x2), inter(48));
  EXPECT_EQ(traffic_bytes(Collective::all_reduce, 7, 4, 2, kBlock2x2), intra(48));
  EXPECT_EQ(traffic_bytes(Collective::all_reduce, 7, 4, 3, kBlock2x2), inter(48));
  // count 13: ceil(13/4) = 4; 2 * 3 * 4 * 2 bytes (bf16) = 48.
  EXPECT_EQ(traffic_bytes(Collective::all_reduce, 13, 2, 1, kBlock2x2), inter(48));
  // count 1: one element per chunk after padding: 2 * 3 * 1 * 8 = 48.
  EXPECT_EQ(traffic_bytes(Collective::all_reduce, 1, 8, 0, kBlock2x2), intra(48));
}

TEST(Traffic, AllReduce_CrossesNodesFromTheLastRankOfEachNode_OnCyclic2x2) {
  // Ring 0 2 | 1 3: rank 2 -> 1 and rank 3 -> 0 cross nodes.
  EXPECT_EQ(traffic_bytes(Collective::all_reduce, 7, 4, 0, kCyclic2x2), intra(48));
  EXPECT_EQ(traffic_bytes(Collective::all_reduce, 7, 4, 2, kCyclic2x2), inter(48));
  EXPECT_EQ(traffic_bytes(Collective::all_reduce, 7, 4, 1, kCyclic2x2), intra(48));
  EXPECT_EQ(traffic_bytes(Collective::all_reduce, 7, 4, 3, kCyclic2x2), inter(48));
}

TEST(Traffic, ReduceScatterAndAllGather_SendNMinusOneBlocks) {
  // (4 - 1) * 13 * 2 = 78.
  for (const Collective c : {Collective::reduce_scatter, Collective::all_gather}) {
    EXPECT_EQ(traffic_bytes(c, 13, 2, 0, kBlock2x2), intra(78));
    EXPECT_EQ(traffic_bytes(c, 13, 2, 1, kBlock2x2), inter(78));
    EXPECT_EQ(traffic_bytes(c, 13, 2, 2, kCyclic2x2), inter(78));
    EXPECT_EQ(traffic_bytes(c, 13, 2, 3, kCyclic2x2), inter(78));
    EXPECT_EQ(traffic_bytes(c, 13, 2, 1, kCyclic2x2), intra(78));
  }
}

TEST(Traffic, AllToAll_ClassifiesEachBlockByItsTarget) {
  // 5 elements of 1 byte to each of 3 peers: one on the same node, two on the other.
  EXPECT_EQ(traffic_bytes(Collective::all_to_all, 5, 1, 0, kBlock2x2), (LinkBytes{5, 10}));
  EXPECT_EQ(traffic_bytes(Collective::all_to_all, 5, 1, 3, kCyclic2x2), (LinkBytes{5, 10}));
  // 4 nodes of one rank: all three blocks leave the node.
  EXPECT_EQ(traffic_bytes(Collective::all_to_all, 5, 4, 2, std::vector<int>{0, 1, 2, 3}), inter(60));
}

TEST(Traffic, Broadcast_IsAChainFromTheRoot_WhoseLastRankSendsNothing) {
  // Block, root 2: chain 2 -> 3 -> 0 -> 1; rank 1 (the root's ring predecessor) sends nothing.
  EXPECT_EQ(traffic_bytes(Collective::broadcast, 7, 4, 2, kBlock2x2, 2), intra(28));
  EXPECT_EQ(traffic_bytes(Collective::broadcast, 7, 4, 3, kBlock2x2, 2), inter(28));
  EXPECT_EQ(traffic_bytes(Collective::broadcast, 7, 4, 0, kBlock2x2, 2), intra(28));
  EXPECT_EQ(traffic_bytes(Collective::broadcast, 7, 4, 1, kBlock2x2, 2), LinkBytes{});
  // Cyclic, root 1: ring 0 2 1 3, chain 1 -> 3 -> 0 -> 2; rank 2 sends nothing.
  EXPECT_EQ(traffic_bytes(Collective::broadcast, 7, 4, 1, kCyclic2x2, 1), intra(28));
  EXPECT_EQ(traffic_bytes(Collective::broadcast, 7, 4, 3, kCyclic2x2, 1), inter(28));
  EXPECT_EQ(traffic_bytes(Collective::broadcast, 7, 4, 0, kCyclic2x2, 1), intra(28));
  EXPECT_EQ(traffic_bytes(Collective::broadcast, 7, 4, 2, kCyclic2x2, 1), LinkBytes{});
}

TEST(Traffic, Broadcast_SendsNMinusOneCopiesInTotal) {
  const std::vector<int> uneven = {0, 1, 0, 0, 2, 1};
  for (int root = 0; root < 6; ++root) {
    std::uint64_t total = 0;
    for (int r = 0; r < 6; ++r) total += traffic_bytes(Collective::broadcast, 13, 2, r, uneven, root).total();
    EXPECT_EQ(total, 5u * 13u * 2u) << "root " << root;
  }
}

TEST(Traffic, Barrier_SendsNothing) {
  EXPECT_EQ(traffic_bytes(Collective::barrier, 0, 1, 1, kBlock2x2), LinkBytes{});
}

TEST(Traffic, SingleRankGroup_SendsNothing) {
  const std::vector<int> one = {3};
  for (const Collective c : kAllCollectives) EXPECT_EQ(traffic_bytes(c, 1001, 8, 0, one), LinkBytes{});
}

TEST(Traffic, UnequalNodes_KeepTheRingNodeMajor) {
  // Nodes {0,1,3} and {2}: ring 0 1 3 2.
  const std::vector<int> nodes = {0, 0, 1, 0};
  EXPECT_EQ(ring_successor(1, nodes), 3);
  EXPECT_EQ(ring_successor(3, nodes), 2);
  EXPECT_EQ(ring_successor(2, nodes), 0);
  EXPECT_EQ(traffic_bytes(Collective::all_reduce, 13, 4, 3, nodes), inter(2 * 3 * 4 * 4));
  EXPECT_EQ(traffic_bytes(Collective::all_reduce, 13, 4, 1, nodes), intra(2 * 3 * 4 * 4));
}

TEST(Traffic, ShardCount_RoundsUpAndPads) {
  EXPECT_EQ(shard_count(7, 4), 2u);
  EXPECT_EQ(padded_count(7, 4), 8u);
  EXPECT_EQ(shard_count(8, 4), 2u);
  EXPECT_EQ(padded_count(1001, 4), 1004u);
}

TEST(Traffic, BusFactor_MatchesNcclTests) {
  // Exact binary fractions for n = 4; compared exactly.
  EXPECT_EQ(bus_factor(Collective::all_reduce, 4), 1.5);
  EXPECT_EQ(bus_factor(Collective::reduce_scatter, 4), 0.75);
  EXPECT_EQ(bus_factor(Collective::all_gather, 4), 0.75);
  EXPECT_EQ(bus_factor(Collective::all_to_all, 4), 0.75);
  EXPECT_EQ(bus_factor(Collective::broadcast, 4), 1.0);
  EXPECT_EQ(bus_factor(Collective::barrier, 4), 0.0);
  EXPECT_EQ(bus_factor(Collective::all_reduce, 1), 0.0);
}

}  // namespace
}  // namespace hsdp::comm
