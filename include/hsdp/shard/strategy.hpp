#pragma once
// The sharding strategies (parallel.sharding) and the few properties that say what each one means. The engine
// (engine.cpp), the formulas (formulas.hpp), the process mesh's groups and hsdp-plan all read this one table;
// nothing else decides what a strategy does.
//
//   strategy            shard group  keeps whole           gathers                          reduces gradients
//   no_shard (DDP)      self         params, grads        -                                all-reduce in buckets
//   zero1               world        params, grads        after AdamW                      reduce-scatter once
//   shard_grad_op       world        -                    before forward, kept to backward reduce-scatter once
//   full_shard          world        -                    before forward and backward      reduce-scatter once
//   hybrid_shard        node         -                    as full_shard, inside the node   every micro-batch, then
//   hybrid_shard_zero2  node         -                    as shard_grad_op, in the node    all-reduce across nodes
#include <span>
#include <string>
#include <string_view>

#include "hsdp/comm/mesh.hpp"

namespace hsdp::shard {

enum class Sharding { no_shard, zero1, shard_grad_op, full_shard, hybrid_shard, hybrid_shard_zero2 };

struct Strategy {
  Sharding sharding;
  const char* name;               // the deck's value
  comm::ShardScope shard_scope;   // the ranks one unit's parameters are split over; replicate = the others
  bool params_whole;              // full parameters live on every rank between steps (no gather before compute)
  bool grads_whole;               // full gradients live on every rank between steps
  bool free_after_forward;        // gathered for forward, freed, gathered again before backward
  bool hybrid;                    // the gradient shard is all-reduced across the replicate group (across nodes)
  bool reduce_every_micro_batch;  // reduce-scatter at every micro-batch (memory stays sharded under accumulation)
  bool gather_after_step;         // updated shards all-gathered after AdamW (the full parameters follow)
  bool zeropp;                    // ZeRO++ (qwZ, hpZ, qgZ) applies
  const char* keeps;              // what a rank keeps between steps, in words (help, hsdp-plan)
};

const Strategy& strategy(Sharding s);
std::span<const Strategy> all_strategies();

// Parses parallel.sharding; a config Error naming the allowed values otherwise.
Sharding parse_sharding(std::string_view text);
const char* to_string(Sharding s);
// "no_shard|zero1|shard_grad_op|full_shard|hybrid_shard|hybrid_shard_zero2"
const std::string& sharding_choices();
inline bool is_hybrid(Sharding s) { return strategy(s).hybrid; }

// no_shard's gradient reduction on a mesh of `nodes` nodes of `ranks_per_node` ranks: hierarchical (reduce-scatter
// inside the node, all-reduce of the 1/ranks_per_node shard across nodes, all-gather inside the node) when both are
// above one, else one all-reduce over the world.
inline bool hierarchical_ddp(int nodes, int ranks_per_node) { return nodes > 1 && ranks_per_node > 1; }

// The mesh a strategy needs (collective over `world`): its shard scope, hpZ groups of k ranks, and errors that
// name parallel.sharding.
comm::MeshOptions mesh_options(Sharding s, int hpz_partition_size);

}  // namespace hsdp::shard
