#pragma once
// The plan: every strategy's memory, bytes and predicted step time for one model on one cluster, and the
// recommendation.
//
// The recommendation is the classic decision tree with numbers (kRecommendationRule says it to users):
//   fits(s)  = model state + transient + activations <= memory per rank x (1 - margin); activations without
//              checkpointing, or with it when only that fits (then the time includes the recomputation).
//   1 memory  the first of no_shard, zero1, shard_grad_op, full_shard that fits (DDP when it fits, ...).
//   2 hybrid  on several nodes with intra >= 4 x inter bandwidth: the hybrid counterpart (full_shard ->
//             hybrid_shard, the others -> hybrid_shard_zero2) when it fits in a node's share and its predicted step
//             is faster.
//   3 ZeRO++  on several nodes when the pick's inter-node communication time exceeds its compute time: the faster
//             ZeRO++ row that fits (hybrid_shard+qgZ or full_shard+qwZ+hpZ+qgZ, whatever the pick's family) when it
//             is predicted at least 10% faster (quantization costs some accuracy; a small gain does not pay for it).
//   4 none fits: the strategy with the least memory, saying by how much it misses and how many nodes (of the same
//             ranks per node) full_shard needs.
// When a row is predicted faster than the pick (the fastest of all, and the fastest that fits), the reason says
// which part of the rule passes it over, and Plan::deck_keys are the hsdp-train keys that select the pick.
#include <cstdint>
#include <string>
#include <vector>

#include "hsdp/comm/types.hpp"
#include "hsdp/shard/engine.hpp"
#include "hsdp/shard/outer.hpp"
#include "plan/cost.hpp"
#include "plan/shapes.hpp"

namespace hsdp::plan {

inline constexpr double kHybridBandwidthRatio = 4.0;
inline constexpr double kZeroPPMinimumGain = 0.10;
const char* kRecommendationRule();

struct Variant {
  std::string name;  // "full_shard", "full_shard+qwZ+hpZ+qgZ", ...
  shard::Sharding sharding = shard::Sharding::no_shard;
  shard::ZeroPPOptions zeropp;
};

// The eight rows: the six strategies, full_shard+qwZ+hpZ+qgZ and hybrid_shard+qgZ. The ZeRO++ rows take grad_bits
// and block from `deck_zeropp` and hpZ's partition size `hpz`.
std::vector<Variant> strategy_variants(const shard::ZeroPPOptions& deck_zeropp, int hpz);

struct PlanInputs {
  PlanModel model;
  Cluster cluster;
  Workload work;
  shard::EngineOptions base;  // dtypes, prefetch, bucket_mb, grad_accum; strategy and zeropp come from each variant
  shard::ZeroPPOptions deck_zeropp;  // the deck's [zeropp]: grad_bits and block feed the ZeRO++ rows; the deck keys
                                     // printed for the pick switch off what the deck turns on and the pick does not use
  int hpz_partition_size = 0;        // 0: the ranks per node
  bool activation_checkpointing = false;  // train.activation_checkpointing: every row is planned with it
  bool cuda = false;  // device.type=cuda: only what hsdp-train accepts there (no_shard, no checkpointing) is chosen
  // The deck's parallel.islands and [outer]: island rows are planned for it (when it divides the nodes) and for one
  // island per node, with the deck's outer step (H, bits, fragments). The deck's own island count is planned with
  // the deck's parallel.sharding and ZeRO++ inside (what hsdp-train will run), the others with the island's fastest.
  int islands = 1;
  shard::Sharding deck_sharding = shard::Sharding::no_shard;
  shard::OuterOptions outer;
  bool plan_islands = true;  // false inside an island's own plan
};

enum class Fit { yes, with_checkpointing, no };
const char* to_string(Fit f);

struct StrategyPlan {
  Variant variant;
  shard::EngineOptions options;
  int shard_size = 1;
  std::int64_t model_state = 0;  // hsdp's accounting (shard/formulas.hpp): params + grads + optimizer per rank
  double zero_paper_state = 0;   // the ZeRO paper's mixed-precision numbers, for comparison
  std::int64_t transient = 0;
  std::int64_t activations = 0, activations_checkpointed = 0;
  std::int64_t peak() const { return model_state + transient + activations; }
  std::int64_t peak_checkpointed() const { return model_state + transient + activations_checkpointed; }
  Fit fit = Fit::no;
  comm::LinkBytes all_ranks;  // job-wide: every rank's bytes of one step, summed (hsdp-train's bytes_intra/_inter)
  comm::LinkBytes max_rank;   // per link class, the most one rank sends (its bytes_intra_max_rank/_inter_max_rank)
  comm::LinkBytes rank0;      // what rank 0 sends
  StepTime time;              // with checkpointing when only that fits
  bool checkpointing = false;
  double step_s = 0;     // overlapped with prefetch, serial without
};

// An island run (parallel.islands = N, DiLoCo's outer step; shard/outer.hpp): each island of nodes / N nodes runs
// the strategy hsdp-plan recommends for it (its own plan of the island), and every H steps the ranks that hold the
// same shard exchange it across islands: per fragment, fp32 all_reduce(c_f, 4) or all_gather(M(c_f), 1) on a group of
// one rank per island (across nodes), c_f the fragment's elements of the rank's shard. Per step, amortised:
//   step = the island's step + (the exchanges of the F fragments) / H;  bytes = the island's + exchange bytes / H
// State per rank: the island's + 12 bytes per element of its shard (outer parameters, momentum, error feedback;
// 16 with outer.overlap) + the exchange's scratch (shard::outer_scratch_bytes).
struct IslandPlan {
  int islands = 0;
  shard::OuterOptions outer;
  StrategyPlan inner;               // the island's recommended row, planned on its nodes
  std::int64_t model_state = 0;     // inner's + the outer state + the exchange's scratch
  Fit fit = Fit::no;                // the island's peak (inner's + the outer state and scratch; on a GPU those are
                                    // host memory: inner's alone) against the budget; checkpointing: inner replanned
  std::uint64_t exchange_bytes_rank = 0;  // one rank's, for all F fragments (once per H steps)
  double exchange_s = 0;            // the F exchanges, once per H steps
  double step_s = 0;                // amortised
  comm::LinkBytes all_ranks;        // per step, amortised, job-wide
  double comm_inter_s = 0;          // per step, amortised: the island's inter-node time + exchange / H
  bool offered = false;             // said after the recommendation: at least kZeroPPMinimumGain faster than the pick
};

struct Plan {
  std::vector<StrategyPlan> strategies;
  std::vector<IslandPlan> islands;  // nodes > 1: one island per node, and the deck's parallel.islands
  std::string islands_offer;        // what the offered island row gains and costs ("" when none is offered)
  int recommended = 0;                 // index into strategies
  int fastest = 0;                     // the row with the shortest predicted step, fitting or not
  std::string reason;                  // why the pick; and why not each faster row (the fastest, the fastest that fits)
  std::vector<std::string> deck_keys;  // --section.key=value for hsdp-train that put the pick into practice
  double budget_bytes = 0;
  std::int64_t global_tokens = 0;  // per step, all ranks
};

Plan make_plan(const PlanInputs& inputs);

// The hsdp-train deck keys that select `row`: parallel.sharding always; a zeropp.* key when the row turns it on or
// differs from the deck's; train.activation_checkpointing=true when the row is planned with it or does not fit.
std::vector<std::string> deck_keys(const StrategyPlan& row, const PlanInputs& inputs);

// Rank 0's, all ranks' (summed) and the busiest rank's bytes of one step. The sum and the maximum visit every rank
// when the world has at most `every_rank_up_to` ranks, else the ranks of node 0: the sum is node 0's times the number
// of nodes, the maximum node 0's: every node sends what node 0 sends (nodes of equal size, groups built from
// membership; tests/plan compares both ways on many meshes).
struct Traffic {
  comm::LinkBytes rank0, all_ranks, max_rank;
};
inline constexpr int kEveryRankUpTo = 64;
Traffic plan_traffic(const PlanModel& model, const Cluster& cluster, const shard::EngineOptions& options,
                     int every_rank_up_to = kEveryRankUpTo);
comm::LinkBytes rank_traffic(const PlanModel& model, const Cluster& cluster, const shard::EngineOptions& options,
                             int rank);

}  // namespace hsdp::plan
