#pragma once
// The formulas of shard/formulas.hpp on unit sizes alone, for models that have no ModelLayout (Llama shapes), and
// the list of collectives behind them, which the time model needs (what each collective is, on which group, in
// which phase of the step). On a GPT-2 layout with tied_head these equal shard::model_state_bytes and
// shard::step_traffic exactly (tests/plan holds them to it); the only addition is tied_head = false, which drops
// the embedding's second gather for an LM head that is not the embedding.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "hsdp/comm/mesh.hpp"
#include "hsdp/comm/types.hpp"
#include "hsdp/shard/buckets.hpp"
#include "hsdp/shard/engine.hpp"
#include "hsdp/shard/formulas.hpp"

namespace hsdp::plan {

struct UnitSizes {
  std::vector<std::size_t> numel;  // embedding, blocks..., final unit
  bool tied_head = true;
};

enum class Phase {
  bucket_all_reduce,  // no_shard: a gradient bucket, all-reduced as backward reaches it
  forward_gather,     // a unit's weights before its forward (the embedding: also for a tied head)
  backward_gather,    // a block's weights again before its backward (full_shard, hybrid_shard)
  reduce,             // the unit's gradient reduce-scatter (or qgZ all-to-all) inside the shard group
  cross_node_reduce,  // hybrid: the gradient shard all-reduced across the replicate group
  post_step_gather,   // zero1: the updated parameters all-gathered after AdamW
};

struct CollectiveCall {
  const shard::GroupView* group;
  comm::Collective op;
  std::size_t count;  // as the traffic model takes it (comm/traffic.hpp)
  std::size_t elem_bytes;
  int times;  // identical calls
  int unit;   // the unit (no_shard: the bucket's lowest unit)
  Phase phase;
};

// Every collective of one optimizer step (k = options.grad_accum micro-batches), as step_traffic counts them.
void for_each_collective(const UnitSizes& units, const shard::EngineOptions& options, const shard::MeshGroups& g,
                         const std::function<void(const CollectiveCall&)>& visit);

std::int64_t model_state_bytes(const UnitSizes& units, comm::Sharding strategy, int shard_size, DType param_dtype);
comm::ByteCounters step_traffic(const UnitSizes& units, const shard::EngineOptions& options,
                                const shard::MeshGroups& g);
std::vector<shard::Bucket> make_buckets(const UnitSizes& units, double bucket_mb);

}  // namespace hsdp::plan
