// The replica check's verdict (train/replicas.hpp) on records made up here: which ranks are named, with which hosts
// and tensors, with and without a majority, and across islands.
#include "hsdp/train/replicas.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "hsdp/model/config.hpp"

namespace hsdp::train {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

model::ModelLayout tiny_layout() {
  model::GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 16;
  c.vocab_size = 32;
  c.padded_vocab_size = 32;
  return model::ModelLayout(c);
}

// `ranks` ranks holding the same range of unit 1 (island 0) with these master-weight sums.
std::vector<std::vector<ReplicaRecord>> replicas(const std::vector<std::uint64_t>& master_sums) {
  std::vector<std::vector<ReplicaRecord>> records;
  for (const std::uint64_t s : master_sums) records.push_back({{0, 0, 1, 0, 100, {s, 7, 9}}});
  return records;
}

std::vector<std::string> hosts(std::size_t n) {
  std::vector<std::string> h;
  for (std::size_t r = 0; r < n; ++r) h.push_back("node" + std::to_string(r / 2));
  return h;
}

TEST(ReplicaVerdict, AgreeingReplicas_SayNothing_AndAreCounted) {
  const ReplicaVerdict v = replica_verdict(replicas({5, 5, 5, 5}), hosts(4), tiny_layout());
  EXPECT_EQ(v.text, "");
  EXPECT_EQ(v.groups, 1u);
}

TEST(ReplicaVerdict, TheRankOutsideTheMajority_IsNamedWithItsHost_AgainstThoseThatAgree) {
  const ReplicaVerdict v = replica_verdict(replicas({5, 5, 6, 5}), hosts(4), tiny_layout());
  EXPECT_THAT(v.text, HasSubstr("unit block.0 (elements 0 to 100): the master weights of rank 2 (host node1) differ "
                                "from those of ranks 0, 1, 3 (hosts node0, node0, node1), which agree"));
}

TEST(ReplicaVerdict, TwoReplicas_HaveNoMajority_AndBothAreNamed) {
  const ReplicaVerdict v = replica_verdict(replicas({5, 6}), hosts(2), tiny_layout());
  EXPECT_THAT(v.text, HasSubstr("ranks 0, 1 (hosts node0, node0) hold 2 replicas of it with different master weights "
                                "and no majority says which are right"));
}

TEST(ReplicaVerdict, ALongListOfRanks_IsCutAfterEight_SayingHowManyMore) {
  std::vector<std::uint64_t> sums(20, 5);
  sums[13] = 6;
  const ReplicaVerdict v = replica_verdict(replicas(sums), hosts(20), tiny_layout());
  EXPECT_THAT(v.text, HasSubstr("the master weights of rank 13 (host node6) differ from those of ranks 0, 1, 2, 3, 4, "
                                "5, 6, 7 (hosts node0, node0, node1, node1, node2, node2, node3, node3) and 11 more"));
}

TEST(ReplicaVerdict, OnlyTheTensorsThatDiffer_AreNamed_AndFurtherGroupsAreCounted) {
  auto records = replicas({5, 5, 5});
  records[1][0].sums[1] = 8;  // rank 1's AdamW m
  records[0].push_back({0, 0, 2, 0, 50, {1, 1, 1}});
  records[1].push_back({0, 0, 2, 0, 50, {1, 1, 1}});
  records[2].push_back({0, 0, 2, 0, 50, {1, 1, 2}});  // rank 2's AdamW v of unit 2
  const ReplicaVerdict v = replica_verdict(records, hosts(3), tiny_layout());
  EXPECT_THAT(v.text, HasSubstr("the AdamW m of rank 1"));
  EXPECT_THAT(v.text, Not(HasSubstr("master weights")));
  EXPECT_THAT(v.text, HasSubstr("; 1 more replica group(s) differ"));
  EXPECT_EQ(v.groups, 2u);
}

TEST(ReplicaVerdict, IslandsModelStateIsComparedWithinTheIsland_TheOuterStateAcrossIslands) {
  // Two islands of one rank each: their masters differ (they train apart), their outer state must not.
  std::vector<std::vector<ReplicaRecord>> records = {{{0, 0, 1, 0, 100, {5, 7, 9}}, {1, 0, 1, 0, 100, {3, 4, 0}}},
                                                     {{0, 1, 1, 0, 100, {6, 7, 9}}, {1, 0, 1, 0, 100, {3, 4, 0}}}};
  ReplicaVerdict v = replica_verdict(records, hosts(2), tiny_layout());
  EXPECT_EQ(v.text, "");
  EXPECT_EQ(v.groups, 1u);  // the outer state's
  records[1][1].sums[1] = 5;
  v = replica_verdict(records, hosts(2), tiny_layout());
  EXPECT_THAT(v.text, HasSubstr("ranks 0, 1 (hosts node0, node0) hold 2 replicas of it with different outer momentum"));
}

TEST(ReplicaRecords, EveryRangeHeld_AndTheFullParametersAsBytes_OneBitChangingTheSum) {
  std::vector<float> params(10, 1.0f), m(10, 0.5f), v(10, 0.25f);
  std::vector<shard::UnitShard> inner = {{1, 20, 10, params.data(), m.data(), v.data()}, {2, 0, 0, nullptr, nullptr, nullptr}};
  std::vector<std::byte> full(64, std::byte{3});
  const std::vector<shard::Engine::ReplicatedParams> copies = {{0, full.data(), full.size(), true}};
  const std::vector<ReplicaRecord> before = replica_records(0, inner, {}, copies);
  ASSERT_EQ(before.size(), 2u);  // the empty range holds nothing
  EXPECT_EQ(before[0].begin, 20u);
  EXPECT_EQ(before[1].kind, 2u);
  EXPECT_EQ(before[1].count, 64u);
  full[17] ^= std::byte{1};
  params[9] = std::nextafter(params[9], 2.0f);
  const std::vector<ReplicaRecord> after = replica_records(0, inner, {}, copies);
  EXPECT_NE(after[0].sums[0], before[0].sums[0]);
  EXPECT_EQ(after[0].sums[1], before[0].sums[1]);
  EXPECT_NE(after[1].sums[0], before[1].sums[0]);
}

}  // namespace
}  // namespace hsdp::train
