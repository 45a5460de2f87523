// The sharding-strategy vocabulary of mesh.hpp (no MPI needed).
#include "hsdp/comm/mesh.hpp"

#include <gtest/gtest.h>

#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp::comm {
namespace {

TEST(Sharding, ParseSharding_RoundTripsEveryChoice) {
  for (const Sharding s : {Sharding::no_shard, Sharding::zero1, Sharding::shard_grad_op, Sharding::full_shard,
                           Sharding::hybrid_shard, Sharding::hybrid_shard_zero2}) {
    EXPECT_EQ(parse_sharding(to_string(s)), s);
    EXPECT_NE(std::string(kShardingChoices()).find(to_string(s)), std::string::npos);
  }
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

}  // namespace
}  // namespace hsdp::comm
