#pragma once
// What a strategy costs, by formula: persistent model-state bytes per rank and bytes sent per step per link.
// Tests compare these with the memory accountant and the byte counters exactly; hsdp-plan prints them. Both read
// the strategy table (strategy.hpp) and nothing else about a strategy; the planner calls these very functions.
//
// Per unit: N elements, shard group of n ranks, S = ceil(N/n), Pp = S n (padding included). Persistent
// model state (after a step; transient gathered parameters and full gradients are freed by then):
//   no_shard                      master 4N (it is the compute copy at fp32; +4N rounded copy otherwise),
//                                 gradients 4N, AdamW m and v 8N:            16N (20N when param dtype != fp32)
//   zero1                         full params 4Pp + full gradients 4Pp + master 4S + gradient shard 4S + m, v 8S
//   shard_grad_op, full_shard,
//   hybrid_shard(_zero2)          master 4S + gradient shard 4S + m, v 8S:   16S
// The compute copies of parameters (no_shard's rounded copy, zero1's full params) are in the compute dtype b_c
// (EngineOptions::compute_dtype: fp32 on the CPU, 4 bytes above; bf16 for a GPU's bf16 model: 2N, 2Pp); gradients
// are fp32 everywhere. For sharded strategies this gives the ZeRO paper's ZeRO-3 and HSDP's numbers exactly (16P/n,
// 16P/n_node, with n the shard group), while ZeRO-1's 4P + 12P/n (2-byte params and grads) reads 6P + 16P/n with
// bf16 compute copies.
//
// Bytes per step (k micro-batches, b_p = param dtype bytes, b_r = reduce dtype bytes), per collective with the
// traffic model of comm/traffic.hpp on the group it runs on:
//   no_shard       per bucket of c elements: all_reduce(c, b_r) on replicate (= world); hierarchical (nodes > 1 of
//                  p > 1 ranks, equal sizes): reduce_scatter(ceil(c/p), b_r) on node, all_reduce(ceil(c/p), b_r) on
//                  cross_node, all_gather(ceil(c/p), b_r) on node (node_gather)
//   zero1          per unit: reduce_scatter(S, b_r) + all_gather(S, b_p) on shard (= world)
//   shard_grad_op  per micro-batch and unit: all_gather(S, b_p); per unit: reduce_scatter(S, b_r)
//   full_shard     per micro-batch: all_gather(S, b_p) twice per block and for the embedding (embedding and head),
//                  once for the final norm; per unit: reduce_scatter(S, b_r)
//   hybrid_shard   as full_shard on the node, but reduce_scatter every micro-batch; then per unit
//                  all_reduce(S, b_r) on replicate;  hybrid_shard_zero2 likewise with shard_grad_op's gathers.
// ZeRO++ (M(c) = message_bytes of c elements, zeropp.hpp; moved as uint8):
//   qwZ   forward gathers (embedding twice, blocks, final norm): all_gather(M_int8(S)) on shard
//   hpZ   backward block gathers and the embedding's gather for the head: all_gather(Pp/h, b_p) on the hpZ group
//         (Pp the unit's padded elements, h = zeropp.hpz_partition_size)
//   qgZ   full_shard, nodes > 1: per unit all_to_all(nodes M(S)) on node (if p > 1) + all_to_all(M(S)) on cross_node
//         full_shard, one node: the exact reduce_scatter;  hybrid_shard: all_to_all(M(S)) on shard (= node)
#include <cstdint>
#include <functional>
#include <vector>

#include "hsdp/comm/types.hpp"
#include "hsdp/model/layout.hpp"
#include "hsdp/shard/buckets.hpp"
#include "hsdp/shard/engine_options.hpp"
#include "hsdp/shard/strategy.hpp"

namespace hsdp::shard {

// A group as one rank sees it: its rank and the node of every member.
struct GroupView {
  int rank = 0;
  std::vector<int> node_of_rank{0};
  int size() const { return static_cast<int>(node_of_rank.size()); }
};

struct MeshGroups {
  GroupView shard, replicate, node, cross_node;
  GroupView hpz;                  // size 1 when there is no hpZ group
  bool nodes_equal_size = true;   // every node has node.size() ranks
};

// The model's units as the formulas need them: elements per unit (embedding, blocks..., final unit), and whether
// the LM head is the embedding (gathered again for the head) as in GPT-2. Llama-style shapes (hsdp-plan) untie it.
struct UnitSizes {
  std::vector<std::size_t> numel;
  bool tied_head = true;
  static UnitSizes of(const model::ModelLayout& layout);
};

enum class Phase {
  bucket_reduce,      // no_shard: a gradient bucket, reduced as backward reaches it (flat all-reduce, or the
                      // hierarchical reduce-scatter inside the node)
  forward_gather,     // a unit's weights before its forward (the embedding: also for a tied head)
  backward_gather,    // a block's weights again before its backward (full_shard, hybrid_shard)
  reduce,             // the unit's gradient reduce-scatter (or qgZ all-to-all) inside the shard group
  cross_node_reduce,  // hybrid, hierarchical no_shard: the gradient shard all-reduced across nodes
  bucket_gather,      // hierarchical no_shard: the reduced bucket all-gathered inside the node
  post_step_gather,   // zero1: the updated parameters all-gathered after AdamW
};

struct CollectiveCall {
  const GroupView* group;
  comm::Collective op;
  std::size_t count;  // as the traffic model takes it (comm/traffic.hpp)
  std::size_t elem_bytes;
  int times;  // identical calls
  int unit;   // the unit (no_shard: the bucket's lowest unit)
  Phase phase;
};

// Every collective of one optimizer step (k = options.grad_accum micro-batches), in the engine's order per unit.
void for_each_collective(const UnitSizes& units, const EngineOptions& options, const MeshGroups& g,
                         const std::function<void(const CollectiveCall&)>& visit);

// The byte counters a step of the engine must produce on the mesh's communicators (ProcessMesh::total_counters).
comm::ByteCounters step_traffic(const UnitSizes& units, const EngineOptions& options, const MeshGroups& g);
comm::ByteCounters step_traffic(const model::ModelLayout& layout, const EngineOptions& options, const MeshGroups& g);

std::int64_t model_state_bytes(const UnitSizes& units, Sharding strategy, int shard_size, DType param_dtype,
                               DType compute_dtype = DType::f32);
std::int64_t model_state_bytes(const model::ModelLayout& layout, Sharding strategy, int shard_size,
                               DType param_dtype, DType compute_dtype = DType::f32);
// parallel.islands > 1: the outer step's state per rank (shard/outer.hpp), outer parameters, momentum and error
// feedback of the rank's shard: 12 S summed over the units (S = N without sharding), at most (the last rank of a
// shard group holds less than S of a unit that does not divide); with outer.overlap the in-flight shift, 16 S.
std::int64_t outer_state_bytes(const UnitSizes& units, int shard_size, bool overlap = false);


// Bytes a step holds beyond model state and activations: an estimate of hsdp's allocations, meant to be on the
// safe side (on the 2x2 test model it is 1.1x to 2x what hsdp-train's peak shows; the e2e test of tests/plan
// prints both). What it counts:
//   gathered weights   in the compute dtype (b_c): shard_grad_op/hybrid_shard_zero2 keep every unit gathered from
//                      forward to backward (b_c Pp); full_shard/hybrid_shard at most 3 units at once (the unit, the
//                      prefetched one, and the tied embedding at the head): 3 x b_c x largest unit;
//   full gradients     fp32, sharded strategies: 3 units (the one computing, two whose reductions are in flight);
//                      with grad_accum > 1 and not hybrid every unit's (4 Pp), kept across micro-batches;
//   staging            3 gathers in flight, each the largest unit's: a param dtype that is not fp32 stages the shard
//                      and (compute dtype differs) the whole received; qwZ the int8 shard, the n received and
//                      (compute dtype not fp32) one slice's fp32 values; reduce-dtype copies of gradients in
//                      flight (no_shard, zero1: all of them; others: 3 units); no_shard on several nodes of several
//                      ranks (nodes, ranks_per_node): each bucket's whole and 1/p part in the reduce dtype instead;
//                      the reduce-scatter receive buffers of every unit (reduce bytes x sum of shards: hsdp completes
//                      them at the latest before AdamW); with qgZ instead an fp32 sum per unit's shard and the
//                      int4 messages of 3 units' hops (send and receive of each hop);
//   hpZ                the secondary slices kept from forward to backward: param bytes x (blocks + tied embedding) / h;
//   step scalars       the micro-batch's loss, the step's loss sum, the squared norm and the overflow flag, four
//                      doubles (kStepScalarBytes).
// An upper bound where the host runs ahead of the device (a GPU): the engine waits before it allocates a fourth
// unit's gathered copy or gradient buffer (engine_impl.hpp, kAliveUnits).
inline constexpr std::int64_t kStepScalarBytes = 4 * sizeof(double);
std::int64_t transient_bytes(const UnitSizes& units, const EngineOptions& options, int shard_size, int nodes = 1,
                             int ranks_per_node = 1);

}  // namespace hsdp::shard
