// The strategy table (strategy.hpp): parsing, and the properties every reader of the table relies on.
#include "hsdp/shard/strategy.hpp"

#include <gtest/gtest.h>

#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp::shard {
namespace {

TEST(Sharding, ParseSharding_RoundTripsEveryChoice) {
  for (const Sharding s : {Sharding::no_shard, Sharding::zero1, Sharding::shard_grad_op, Sharding::full_shard,
                           Sharding::hybrid_shard, Sharding::hybrid_shard_zero2}) {
    EXPECT_EQ(parse_sharding(to_string(s)), s);
    EXPECT_NE(sharding_choices().find(to_string(s)), std::string::npos);
    EXPECT_EQ(strategy(s).sharding, s);
  }
  EXPECT_EQ(all_strategies().size(), 6u);
}

TEST(Sharding, ParseSharding_OfAnUnknownValue_IsAConfigErrorListingTheChoices) {
  try {
    parse_sharding("bogus");
    ADD_FAILURE() << "no error for 'bogus'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_STREQ(e.what(),
                 "parallel.sharding: unknown value 'bogus' (allowed: "
                 "no_shard|zero1|shard_grad_op|full_shard|hybrid_shard|hybrid_shard_zero2)");
  }
}

TEST(Sharding, IsHybrid_OnlyForTheHybridStrategies) {
  EXPECT_TRUE(is_hybrid(Sharding::hybrid_shard));
  EXPECT_TRUE(is_hybrid(Sharding::hybrid_shard_zero2));
  EXPECT_FALSE(is_hybrid(Sharding::full_shard));
  EXPECT_FALSE(is_hybrid(Sharding::no_shard));
  EXPECT_FALSE(is_hybrid(Sharding::zero1));
}

// The table's rows as docs/architecture.md and the README describe the strategies, property by property.
TEST(StrategyTable, EachRowSaysWhatItsStrategyMeans) {
  using comm::ShardScope;
  const Strategy& ddp = strategy(Sharding::no_shard);
  EXPECT_EQ(ddp.shard_scope, ShardScope::self);
  EXPECT_TRUE(ddp.params_whole && ddp.grads_whole);
  const Strategy& z1 = strategy(Sharding::zero1);
  EXPECT_EQ(z1.shard_scope, ShardScope::world);
  EXPECT_TRUE(z1.params_whole && z1.grads_whole && z1.gather_after_step);
  for (const Sharding s : {Sharding::shard_grad_op, Sharding::full_shard, Sharding::hybrid_shard,
                           Sharding::hybrid_shard_zero2}) {
    EXPECT_FALSE(strategy(s).params_whole || strategy(s).grads_whole || strategy(s).gather_after_step) << to_string(s);
  }
  EXPECT_TRUE(strategy(Sharding::full_shard).free_after_forward);
  EXPECT_TRUE(strategy(Sharding::hybrid_shard).free_after_forward);
  EXPECT_FALSE(strategy(Sharding::shard_grad_op).free_after_forward);
  EXPECT_FALSE(strategy(Sharding::hybrid_shard_zero2).free_after_forward);
  for (const Strategy& s : all_strategies()) {
    // Hybrids are the node-scoped strategies; they alone reduce every micro-batch (memory stays sharded).
    EXPECT_EQ(s.hybrid, s.shard_scope == ShardScope::node) << s.name;
    EXPECT_EQ(s.reduce_every_micro_batch, s.hybrid) << s.name;
    EXPECT_EQ(s.zeropp, s.sharding == Sharding::full_shard || s.sharding == Sharding::hybrid_shard) << s.name;
  }
}

TEST(StrategyTable, MeshOptions_NameTheDeckKeyForErrors) {
  const comm::MeshOptions o = mesh_options(Sharding::hybrid_shard, 2);
  EXPECT_EQ(o.shard_scope, comm::ShardScope::node);
  EXPECT_EQ(o.hpz_size, 2);
  EXPECT_EQ(o.requested_by, "parallel.sharding=hybrid_shard");
}

TEST(StrategyTable, HierarchicalDdp_OnlyOnSeveralNodesOfSeveralRanks) {
  EXPECT_TRUE(hierarchical_ddp(2, 2));
  EXPECT_FALSE(hierarchical_ddp(1, 4));
  EXPECT_FALSE(hierarchical_ddp(4, 1));
}

}  // namespace
}  // namespace hsdp::shard
