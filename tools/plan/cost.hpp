#pragma once
// The cost model of hsdp-plan: an alpha-beta time for every collective of a step, compute time from FLOPs, and
// the memory a step needs beyond the persistent model state.
//
// Time of one collective on a group of n ranks (0 when n = 1). The group's link is inter-node when its members are
// on more than one node (a ring runs at the pace of its slowest hop), else intra-node:
//   all_reduce                  2 (n-1) alpha + B / bw          B = the bytes this rank sends (comm/traffic.hpp):
//   reduce_scatter, all_gather    (n-1) alpha + B / bw              2 (n-1) ceil(c/n) b, (n-1) c b
//   all_to_all                    (n-1) alpha + B_intra / bw_intra + B_inter / bw_inter  (its blocks, by target)
// bw is what hsdp-commbench calls busbw (bytes one rank moves per second on that link class, with every rank of a
// node communicating at once); alpha the latency of one message. A ring across nodes goes at its slowest hop, and an
// inter-node hop gets the share of its node's network that its flow has: every rank runs the same collective on its
// own instance of the group, so a node holding m of a group's members, c of which send across, carries
// ranks-per-node x c / m flows, where the calibration (one rank per node and group) carries ranks-per-node: per
// flow bw_inter x m / c (a ring of one rank per node: bw_inter; a world ring over nodes of 2 ranks: twice that),
// at most bw_intra. Measured across two hosts capped at 30 Mbit/s (tools/bench/bandwidth.sh), this took the
// predicted full_shard step from +72% to -13% of the measured one.
//
// Compute per rank and step: tokens x (6 P + 12 L C T) FLOPs (the PaLM count: 6 P for the matmuls of forward and
// backward, 12 L C T for attention scores and values), + (2 P + 4 L C T) per token of forward recomputation with
// activation checkpointing; divided by --compute-tflops.
//
// Overlap: without prefetch (parallel.prefetch = false) step = compute + comm. With prefetch, the engine's schedule
// (docs/architecture.md) is replayed on a clock (step_time's Schedule): the host computes unit by unit, a third of a
// unit's FLOPs in forward (2 N + 4 C T per token for a block of N elements), the rest in backward (the tied head's
// with the final unit), and waits where the engine waits: a unit's gather before its compute, every reduction
// before the next micro-batch and the optimizer step, zero1's all-gather after it. A gather runs from when it is
// prefetched (the next unit's, when the current one starts), a gradient reduction from the end of its unit's
// backward, the hop after it (qgZ's second all-to-all, hybrid's cross-node all-reduce, hierarchical no_shard's
// all-reduce and all-gather) when the hop before it completes; each on its link class (inside a node, across nodes), which carries one collective at a
// time: a later-issued collective takes a gap left before one that waits for its input. exposed = step - compute.
// Measured on two hosts capped at 300 Mbit/s (tools/bench/bandwidth.sh, one run predicted by both), this took
// hybrid_shard from -36% to -22% of the measured step and hybrid_shard+qgZ from -51% to -34%: their cross-node
// reductions cannot overlap the forward, which the former `exposed + max(compute, comm - exposed)` assumed (it also
// held qgZ's all-to-alls blocking, as hsdp ran them before its engine became stream-ordered).
//
// Bandwidth by size: --calibrate keeps the bandwidth measured at each message size (LinkClass::by_size), and a
// collective gets the one of its size. Across capped TCP links, 64 KiB messages moved at up to 90% of the cap while
// 4 MiB ones got 55-60% (two flows per host behind tbf's queue), so ZeRO++'s small int8/int4 messages and the
// large fp32 gathers of full_shard are not one bandwidth (over three runs of the study it lowered the largest
// error from 44%, 41%, 28% to 34%, 32%, 24%).
#include <cstdint>
#include <string>
#include <vector>

#include "hsdp/shard/formulas.hpp"
#include "plan/shapes.hpp"

namespace hsdp::plan {

// The library's formulas (hsdp/shard/formulas.hpp), which hsdp-train's counters are held to: the planner has no
// copy of its own.
using shard::CollectiveCall;
using shard::for_each_collective;
using shard::model_state_bytes;
using shard::Phase;
using shard::step_traffic;
using shard::UnitSizes;

// A link's bandwidth at one message size, from a measurement with the latency of its messages taken out.
struct SizedBandwidth {
  double bytes = 0;  // the collective's size in nccl-tests' convention (hsdp-commbench's "bytes")
  double gbps = 0;
};

struct LinkClass {
  double gbps = 0;        // GB/s (1e9 bytes) per rank
  double latency_us = 0;  // per message
  // Measured (--calibrate), by increasing size. A collective of B bytes gets the bandwidth interpolated between the
  // measured sizes around B (linearly in log B; outside them, the nearest one's). Empty: gbps at every size.
  std::vector<SizedBandwidth> by_size;
  double gbps_at(double bytes) const;
};

struct Cluster {
  int nodes = 1;
  int ranks_per_node = 8;
  comm::Placement placement = comm::Placement::block;
  double memory_per_rank_gib = 80;
  double memory_margin = 0.10;  // fraction of a rank's memory kept free (runtime, allocator, communication library)
  LinkClass intra{150, 5, {}};
  LinkClass inter{25, 10, {}};
  // Measured (--calibrate): a node-major ring over nodes of node_ring_members ranks each (the world of the
  // calibration run), whose busbw is its crossing hop's pace. A ring collective over a group of that shape takes its
  // time from it instead of from inter's per-flow share (gbps 0: not measured). One flow per node crossing need not
  // get what two flows sharing the link each get times two (TCP through a shaped link does not).
  LinkClass node_ring{0, 0, {}};
  int node_ring_members = 0;
  // The CPU engine (compute calibrated from hsdp-bench-train-cpu): a collective moves on only when its ranks poll,
  // at unit boundaries and between a unit's kernels (docs/architecture.md, "The engine's schedule"), so each step
  // of it (a ring's n-1 per phase, an all-to-all's one) starts on average half a poll interval after the step before
  // ended; the interval is the compute between two polls (a micro-batch's compute over its 12 L + 6 stretches:
  // each block's forward and backward cut in 6 by its 5 kernel polls, the head's 2 each way, the embedding's one
  // each way). false: collectives progress on their own (NCCL, the GPU nodes of hsdp-plan's defaults).
  bool host_polls = false;
  double compute_tflops = 400;  // sustained per rank
  int world() const { return nodes * ranks_per_node; }
};

struct Workload {
  std::int64_t micro_batch = 4, seq_len = 64;
  int grad_accum = 1;
  std::int64_t tokens_per_rank() const { return micro_batch * seq_len * grad_accum; }
};

double collective_seconds(const CollectiveCall& call, const Cluster& cluster);
// The steps a collective waits between (Cluster::host_polls): a ring's n-1 per phase (all_reduce 2(n-1)), one for
// an all-to-all (every pair at once).
double collective_steps(const CollectiveCall& call);

struct StepTime {
  double compute_s = 0;
  double comm_s = 0;        // all collectives, one after the other
  double comm_inter_s = 0;  // of which on groups that span nodes
  double exposed_s = 0;     // of which cannot overlap compute (see above)
  double serial_s() const { return compute_s + comm_s; }
  double overlapped_s() const;
};

// FLOPs per token of a model of `params` parameters, L blocks of width C, at sequence length T: 6 P + 12 L C T
// (+ 2 P + 4 L C T with checkpointing). --calibrate divides it by a measured step to get a rate in the same count.
double flops_per_token(double params, double n_layer, double n_embd, double seq_len, bool checkpointing);
double step_flops(const PlanModel& model, const Workload& work, bool checkpointing);
StepTime step_time(const PlanModel& model, const Workload& work, const Cluster& cluster,
                   const shard::EngineOptions& options, const shard::MeshGroups& groups, bool checkpointing);

using shard::transient_bytes;

// ZeRO paper (mixed-precision Adam: 2-byte params and grads, 12 bytes of fp32 master + moments), P parameters,
// n = shard group size: no_shard 16P, zero1 4P + 12P/n, shard_grad_op 2P + 14P/n, full_shard 16P/n (hybrid: n =
// ranks per node).
double zero_paper_state_bytes(double params, shard::Sharding strategy, int shard_size);

}  // namespace hsdp::plan
