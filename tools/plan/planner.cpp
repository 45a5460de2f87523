#include "plan/planner.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "hsdp/model/layout.hpp"
#include "hsdp/shard/formulas.hpp"
#include "plan/mesh_groups.hpp"
#include "plan/report.hpp"

namespace hsdp::plan {

using shard::Sharding;

const char* kRecommendationRule() {
  return "fits: model state + transient + activations <= memory per rank x (1 - margin); activations without\n"
         "        checkpointing, or with it (and its recomputation in the time) when only that fits.\n"
         "1 memory: the first of no_shard, zero1, shard_grad_op, full_shard that fits.\n"
         "2 hybrid: on several nodes with intra >= 4 x inter bandwidth, the hybrid counterpart (hybrid_shard for\n"
         "        full_shard, else hybrid_shard_zero2) if it fits in a node's share and is predicted faster.\n"
         "3 ZeRO++: on several nodes, when the pick's inter-node communication takes longer than its compute, the\n"
         "        ZeRO++ variant of its family (hybrid_shard+qgZ, else full_shard+qwZ+hpZ+qgZ) if it fits and is\n"
         "        predicted >= 10% faster (quantization costs some accuracy; a small gain does not pay for it).\n"
         "4 none fits: the strategy with the least memory, and how many nodes full_shard would need.";
}

const char* to_string(Fit f) {
  switch (f) {
    case Fit::yes:
      return "yes";
    case Fit::with_checkpointing:
      return "with_checkpointing";
    case Fit::no:
      return "no";
  }
  return "?";
}

std::vector<Variant> strategy_variants(const shard::ZeroPPOptions& deck, int hpz) {
  std::vector<Variant> v;
  for (const shard::Strategy& s : shard::all_strategies()) v.push_back({s.name, s.sharding, {}});
  shard::ZeroPPOptions all;
  all.quantized_weights = true;
  all.hpz_partition_size = hpz;
  all.quantized_gradients = true;
  all.grad_bits = deck.grad_bits;
  all.block = deck.block;
  v.push_back({"full_shard+qwZ+hpZ+qgZ", Sharding::full_shard, all});
  shard::ZeroPPOptions qgz;
  qgz.quantized_gradients = true;
  qgz.grad_bits = deck.grad_bits;
  qgz.block = deck.block;
  v.push_back({"hybrid_shard+qgZ", Sharding::hybrid_shard, qgz});
  return v;
}

comm::LinkBytes rank_traffic(const PlanModel& model, const Cluster& cluster, const shard::EngineOptions& options,
                             int rank) {
  const comm::Topology t = emulated_topology(rank, cluster.nodes, cluster.ranks_per_node, cluster.placement);
  const shard::MeshGroups g = mesh_groups(t, options.strategy, options.zeropp.hpz_partition_size);
  return step_traffic(UnitSizes{model.unit_numel, model.tied_head}, options, g).total();
}

Traffic plan_traffic(const PlanModel& model, const Cluster& cluster, const shard::EngineOptions& options,
                     int every_rank_up_to) {
  Traffic t;
  t.rank0 = rank_traffic(model, cluster, options, 0);
  const int world = cluster.world();
  if (world <= every_rank_up_to) {
    for (int r = 0; r < world; ++r) t.all_ranks += r == 0 ? t.rank0 : rank_traffic(model, cluster, options, r);
    return t;
  }
  const comm::Topology topology = emulated_topology(0, cluster.nodes, cluster.ranks_per_node, cluster.placement);
  comm::LinkBytes node0;
  for (const int r : topology.ranks_on_node(0)) node0 += r == 0 ? t.rank0 : rank_traffic(model, cluster, options, r);
  const auto nodes = static_cast<std::uint64_t>(topology.num_nodes());
  t.all_ranks = {node0.intra * nodes, node0.inter * nodes};
  return t;
}

namespace {

std::string gib(double bytes) {
  return human_bytes(bytes);
}

std::string ms(double seconds) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(seconds < 0.01 ? 3 : 1);
  s << seconds * 1e3 << " ms";
  return s.str();
}

StrategyPlan plan_one(const PlanInputs& in, const Variant& v, double budget) {
  StrategyPlan p;
  p.variant = v;
  p.options = in.base;
  p.options.strategy = v.sharding;
  p.options.zeropp = v.zeropp;
  p.options.grad_accum = in.work.grad_accum;
  const Cluster& cluster = in.cluster;
  const comm::Topology t0 = emulated_topology(0, cluster.nodes, cluster.ranks_per_node, cluster.placement);
  const shard::MeshGroups groups = mesh_groups(t0, v.sharding, v.zeropp.hpz_partition_size);
  p.shard_size = groups.shard.size();
  const UnitSizes units{in.model.unit_numel, in.model.tied_head};
  p.model_state = model_state_bytes(units, v.sharding, p.shard_size, p.options.param_dtype);
  p.zero_paper_state = zero_paper_state_bytes(static_cast<double>(in.model.params()), v.sharding, p.shard_size);
  p.transient = transient_bytes(units, p.options, p.shard_size);
  p.activations = activation_bytes(in.model.activation, in.work.micro_batch, in.work.seq_len, false);
  p.activations_checkpointed = activation_bytes(in.model.activation, in.work.micro_batch, in.work.seq_len, true);
  p.fit = static_cast<double>(p.peak()) <= budget                ? Fit::yes
          : static_cast<double>(p.peak_checkpointed()) <= budget ? Fit::with_checkpointing
                                                                 : Fit::no;
  p.checkpointing = p.fit == Fit::with_checkpointing;
  const Traffic traffic = plan_traffic(in.model, cluster, p.options);
  p.rank0 = traffic.rank0;
  p.all_ranks = traffic.all_ranks;
  p.time = step_time(in.model, in.work, cluster, p.options, groups, p.checkpointing);
  p.step_s = p.options.prefetch ? p.time.overlapped_s() : p.time.serial_s();
  return p;
}

int index_of(const Plan& plan, const std::string& name) {
  for (std::size_t i = 0; i < plan.strategies.size(); ++i) {
    if (plan.strategies[i].variant.name == name) return static_cast<int>(i);
  }
  return -1;
}

// The smallest number of nodes (same ranks per node) at which full_shard fits, or 0 if none up to 1 << 16 ranks.
int nodes_for_full_shard(const PlanInputs& in, double budget, std::int64_t activations) {
  const UnitSizes units{in.model.unit_numel, in.model.tied_head};
  shard::EngineOptions o = in.base;
  o.strategy = Sharding::full_shard;
  for (int nodes = in.cluster.nodes + 1; nodes * in.cluster.ranks_per_node <= (1 << 16); ++nodes) {
    const int n = nodes * in.cluster.ranks_per_node;
    const double need = static_cast<double>(model_state_bytes(units, Sharding::full_shard, n, o.param_dtype) +
                                            transient_bytes(units, o, n) + activations);
    if (need <= budget) return nodes;
  }
  return 0;
}

void recommend(const PlanInputs& in, Plan& plan) {
  const auto& s = plan.strategies;
  const auto fits = [&](int i) { return i >= 0 && s[static_cast<std::size_t>(i)].fit != Fit::no; };
  const auto at = [&](int i) -> const StrategyPlan& { return s[static_cast<std::size_t>(i)]; };
  const auto fit_text = [&](int i) {
    const StrategyPlan& p = at(i);
    const bool ckpt = p.fit == Fit::with_checkpointing;
    return gib(static_cast<double>(ckpt ? p.peak_checkpointed() : p.peak())) + " of " + gib(plan.budget_bytes) +
           (ckpt ? " with activation checkpointing" : "");
  };
  const Cluster& c = in.cluster;

  int pick = -1;
  std::string reason;
  for (const char* name : {"no_shard", "zero1", "shard_grad_op", "full_shard"}) {
    const int i = index_of(plan, name);
    if (fits(i)) {
      pick = i;
      reason = std::string(name) + " is the first of no_shard, zero1, shard_grad_op, full_shard that fits (" +
               fit_text(i) + ")";
      break;
    }
  }
  if (pick < 0) {
    int least = 0;
    for (int i = 1; i < static_cast<int>(s.size()); ++i) {
      if (at(i).peak_checkpointed() < at(least).peak_checkpointed()) least = i;
    }
    plan.recommended = least;
    const int nodes = nodes_for_full_shard(in, plan.budget_bytes, at(least).activations_checkpointed);
    std::ostringstream r;
    r << "nothing fits: " << at(least).variant.name << " needs the least memory, "
      << gib(static_cast<double>(at(least).peak_checkpointed())) << " per rank with activation checkpointing, against "
      << gib(plan.budget_bytes) << " usable; ";
    if (nodes > 0) {
      r << "full_shard fits on " << nodes << " nodes of " << c.ranks_per_node << " ranks (" << nodes * c.ranks_per_node
        << " ranks): rerun with --nodes " << nodes << " to choose among what fits there";
    } else {
      r << "activations alone exceed the memory: lower train.micro_batch or train.seq_len";
    }
    plan.reason = r.str();
    return;
  }
  const bool several_nodes = c.nodes > 1;
  if (several_nodes && c.intra.gbps >= kHybridBandwidthRatio * c.inter.gbps) {
    const bool full = at(pick).variant.sharding == Sharding::full_shard;
    const int h = index_of(plan, full ? "hybrid_shard" : "hybrid_shard_zero2");
    if (fits(h) && at(h).step_s < at(pick).step_s) {
      std::ostringstream r;
      r << at(h).variant.name << ": intra-node bandwidth is " << c.intra.gbps / c.inter.gbps
        << "x inter-node (>= " << kHybridBandwidthRatio << "x), it fits in a node's share (" << fit_text(h)
        << ") and its predicted step is " << ms(at(h).step_s) << " against " << ms(at(pick).step_s) << " for "
        << at(pick).variant.name;
      pick = h;
      reason = r.str();
    }
  }
  if (several_nodes && at(pick).time.comm_inter_s > at(pick).time.compute_s) {
    const bool hybrid = shard::is_hybrid(at(pick).variant.sharding);
    const int z = index_of(plan, hybrid ? "hybrid_shard+qgZ" : "full_shard+qwZ+hpZ+qgZ");
    if (fits(z) && at(z).step_s <= (1.0 - kZeroPPMinimumGain) * at(pick).step_s) {
      std::ostringstream r;
      r << at(z).variant.name << ": inter-node communication of " << at(pick).variant.name << " ("
        << ms(at(pick).time.comm_inter_s) << ") exceeds its compute (" << ms(at(pick).time.compute_s)
        << "), and ZeRO++ cuts the predicted step from " << ms(at(pick).step_s) << " to " << ms(at(z).step_s)
        << " (>= " << kZeroPPMinimumGain * 100 << "% faster; fits: " << fit_text(z) << ")";
      pick = z;
      reason = r.str();
    }
  }
  plan.recommended = pick;
  plan.reason = reason;
}

}  // namespace

Plan make_plan(const PlanInputs& in) {
  Plan plan;
  plan.budget_bytes = in.cluster.memory_per_rank_gib * 1073741824.0 * (1.0 - in.cluster.memory_margin);
  plan.global_tokens = in.work.tokens_per_rank() * in.cluster.world();
  const int hpz = in.hpz_partition_size > 0 ? in.hpz_partition_size : in.cluster.ranks_per_node;
  for (const Variant& v : strategy_variants(in.deck_zeropp, hpz))
    plan.strategies.push_back(plan_one(in, v, plan.budget_bytes));
  recommend(in, plan);
  return plan;
}

}  // namespace hsdp::plan
