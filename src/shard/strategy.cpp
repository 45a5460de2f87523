#include "hsdp/shard/strategy.hpp"

#include <array>

#include "hsdp/core/error.hpp"

namespace hsdp::shard {
namespace {

using comm::ShardScope;

// clang-format off
//                                                       params grads  free   hybrid every  after  zeropp
//                                                       whole  whole  fwd           micro  step
constexpr std::array<Strategy, 6> kStrategies = {{
    {Sharding::no_shard,           "no_shard",           ShardScope::self,
     true,  true,  false, false, false, false, false, "everything"},
    {Sharding::zero1,              "zero1",              ShardScope::world,
     true,  true,  false, false, false, true,  false, "full params and grads, 1/n of the AdamW state"},
    {Sharding::shard_grad_op,      "shard_grad_op",      ShardScope::world,
     false, false, false, false, false, false, false, "1/n of everything; params gathered forward to backward"},
    {Sharding::full_shard,         "full_shard",         ShardScope::world,
     false, false, true,  false, false, false, true,  "1/n of everything"},
    {Sharding::hybrid_shard,       "hybrid_shard",       ShardScope::node,
     false, false, true,  true,  true,  false, true,  "1/n_node of everything"},
    {Sharding::hybrid_shard_zero2, "hybrid_shard_zero2", ShardScope::node,
     false, false, false, true,  true,  false, false, "1/n_node of everything; params gathered forward to backward"},
}};
// clang-format on

}  // namespace

const Strategy& strategy(Sharding s) {
  for (const Strategy& entry : kStrategies) {
    if (entry.sharding == s) return entry;
  }
  throw_internal("unknown sharding strategy " + std::to_string(static_cast<int>(s)));
}

std::span<const Strategy> all_strategies() { return kStrategies; }

Sharding parse_sharding(std::string_view text) {
  for (const Strategy& entry : kStrategies) {
    if (text == entry.name) return entry.sharding;
  }
  throw_config("parallel.sharding: unknown value '" + std::string(text) + "' (allowed: " + sharding_choices() + ")");
}

const char* to_string(Sharding s) { return strategy(s).name; }

const std::string& sharding_choices() {
  static const std::string choices = [] {
    std::string text;
    for (const Strategy& entry : kStrategies) text += (text.empty() ? "" : "|") + std::string(entry.name);
    return text;
  }();
  return choices;
}

comm::MeshOptions mesh_options(Sharding s, int hpz_partition_size) {
  return {strategy(s).shard_scope, hpz_partition_size, std::string("parallel.sharding=") + to_string(s)};
}

}  // namespace hsdp::shard
