#include "plan/planner.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "hsdp/model/gpu_activations.hpp"
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
         "        faster ZeRO++ row that fits (hybrid_shard+qgZ or full_shard+qwZ+hpZ+qgZ) if it is predicted >= 10%\n"
         "        faster (quantization costs some accuracy; a small gain does not pay for it).\n"
         "4 none fits: the strategy with the least memory, and how many nodes full_shard would need.\n"
         "A row predicted faster than the pick (the fastest, the fastest that fits) is named in the reason with the\n"
         "part of the rule that passes it over; `deck keys` are the hsdp-train keys that select the pick.";
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
  const auto visit = [&](int r, comm::LinkBytes& sum) {
    const comm::LinkBytes b = r == 0 ? t.rank0 : rank_traffic(model, cluster, options, r);
    sum += b;
    t.max_rank = {std::max(t.max_rank.intra, b.intra), std::max(t.max_rank.inter, b.inter)};
  };
  const int world = cluster.world();
  if (world <= every_rank_up_to) {
    for (int r = 0; r < world; ++r) visit(r, t.all_ranks);
    return t;
  }
  const comm::Topology topology = emulated_topology(0, cluster.nodes, cluster.ranks_per_node, cluster.placement);
  comm::LinkBytes node0;
  for (const int r : topology.ranks_on_node(0)) visit(r, node0);
  const auto nodes = static_cast<std::uint64_t>(topology.num_nodes());
  t.all_ranks = {node0.intra * nodes, node0.inter * nodes};
  return t;
}

std::vector<std::string> deck_keys(const StrategyPlan& row, const PlanInputs& in) {
  std::vector<std::string> keys{"--parallel.sharding=" + std::string(shard::to_string(row.variant.sharding))};
  const shard::ZeroPPOptions& z = row.variant.zeropp;
  const shard::ZeroPPOptions& deck = in.deck_zeropp;
  const auto flag = [](bool on) { return on ? std::string("true") : std::string("false"); };
  if (z.quantized_weights || z.quantized_weights != deck.quantized_weights)
    keys.push_back("--zeropp.quantized_weights=" + flag(z.quantized_weights));
  if (z.hpz_partition_size > 0 || z.hpz_partition_size != deck.hpz_partition_size)
    keys.push_back("--zeropp.hpz_partition_size=" + std::to_string(z.hpz_partition_size));
  if (z.quantized_gradients || z.quantized_gradients != deck.quantized_gradients)
    keys.push_back("--zeropp.quantized_gradients=" + flag(z.quantized_gradients));
  if (in.cuda) keys.insert(keys.end(), {"--device.type=cuda", "--precision.param=bf16", "--precision.reduce=fp32"});
  // A row that does not fit (the least-memory pick when nothing fits) comes closest with checkpointing.
  if (row.checkpointing || row.fit == Fit::no) keys.emplace_back("--train.activation_checkpointing=true");
  return keys;
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
  // On GPUs the model computes in bf16 from bf16 compute copies (precision.param=bf16), on the CPU in fp32.
  p.options.compute_dtype = shard::model_compute_dtype(in.cuda, p.options.param_dtype);
  p.model_state = model_state_bytes(units, v.sharding, p.shard_size, p.options.param_dtype, p.options.compute_dtype);
  p.zero_paper_state = zero_paper_state_bytes(static_cast<double>(in.model.params()), v.sharding, p.shard_size);
  p.transient = transient_bytes(units, p.options, p.shard_size, cluster.nodes, cluster.ranks_per_node);
  // The GPU model's arena in its compute dtype with the cuBLASLt workspace (what GptCuda allocates), else Gpt<float>'s.
  const auto activations = [&](bool checkpointing) {
    return in.cuda ? model::gpu_activation_bytes(in.model.activation, in.work.micro_batch, in.work.seq_len,
                                                 checkpointing, size_of(p.options.compute_dtype))
                   : activation_bytes(in.model.activation, in.work.micro_batch, in.work.seq_len, checkpointing);
  };
  p.activations = activations(false);
  p.activations_checkpointed = activations(true);
  // The deck's train.activation_checkpointing=true plans every row with it; otherwise it is used when only it fits.
  const bool forced = in.activation_checkpointing;
  p.fit = !forced && static_cast<double>(p.peak()) <= budget     ? Fit::yes
          : static_cast<double>(p.peak_checkpointed()) <= budget ? Fit::with_checkpointing
                                                                 : Fit::no;
  p.checkpointing = forced || p.fit == Fit::with_checkpointing;
  const Traffic traffic = plan_traffic(in.model, cluster, p.options);
  p.rank0 = traffic.rank0;
  p.all_ranks = traffic.all_ranks;
  p.max_rank = traffic.max_rank;
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
  o.grad_accum = in.work.grad_accum;
  o.compute_dtype = shard::model_compute_dtype(in.cuda, o.param_dtype);  // as plan_one's rows
  for (int nodes = in.cluster.nodes + 1; nodes * in.cluster.ranks_per_node <= (1 << 16); ++nodes) {
    const int n = nodes * in.cluster.ranks_per_node;
    const double need =
        static_cast<double>(model_state_bytes(units, Sharding::full_shard, n, o.param_dtype, o.compute_dtype) +
                            transient_bytes(units, o, n, nodes, in.cluster.ranks_per_node) + activations);
    if (need <= budget) return nodes;
  }
  return 0;
}

std::string percent(double fraction) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(1);
  s << fraction * 100 << "%";
  return s.str();
}

// The picks after rule 1 (`first`: -1 when nothing fits) and rule 2 (`hybrid`), for explaining rows passed over.
struct Steps {
  int first = -1, hybrid = -1;
};

class Recommender {
 public:
  Recommender(const PlanInputs& in, Plan& plan) : in_(in), plan_(plan) {}

  void run() {
    Steps steps;
    const int pick = choose(steps);
    plan_.recommended = pick;
    plan_.fastest = fastest(false);
    std::string passed_over;
    const int fastest_fitting = fastest(true);
    for (const int i : {plan_.fastest, fastest_fitting}) {
      if (i < 0 || at(i).step_s >= at(pick).step_s * (1 - 1e-9)) continue;  // not faster (equal is not faster)
      if (i == fastest_fitting && i == plan_.fastest && !passed_over.empty()) continue;
      passed_over += std::string(passed_over.empty() ? "" : "; ") + at(i).variant.name + " (" + ms(at(i).step_s) +
                     " against " + ms(at(pick).step_s) + ") " + why_not(i, pick, steps);
    }
    if (!passed_over.empty()) plan_.reason += ". Predicted faster but not recommended: " + passed_over;
  }

 private:
  const StrategyPlan& at(int i) const { return plan_.strategies[static_cast<std::size_t>(i)]; }
  bool fits(int i) const { return i >= 0 && at(i).fit != Fit::no; }
  bool several_nodes() const { return in_.cluster.nodes > 1; }
  bool hybrid_links() const { return in_.cluster.intra.gbps >= kHybridBandwidthRatio * in_.cluster.inter.gbps; }
  int hybrid_counterpart(int i) const {
    return index_of(plan_, at(i).variant.sharding == Sharding::full_shard ? "hybrid_shard" : "hybrid_shard_zero2");
  }
  // The faster of the two ZeRO++ rows that fit (-1 if neither does). On a slow link the one that quantizes the
  // weights too (qwZ, with hpZ keeping the backward gather in the node) may win by far over the pick's own family:
  // measured across two hosts at 30 Mbit/s, full_shard+qwZ+hpZ+qgZ 325 ms a step, hybrid_shard+qgZ 779 ms.
  int zeropp_candidate() const {
    int best = -1;
    for (const char* name : {"hybrid_shard+qgZ", "full_shard+qwZ+hpZ+qgZ"}) {
      const int z = index_of(plan_, name);
      if (fits(z) && (best < 0 || at(z).step_s < at(best).step_s)) best = z;
    }
    return best;
  }
  bool inter_bound(int i) const { return at(i).time.comm_inter_s > at(i).time.compute_s; }

  std::string fit_text(int i) const {
    const StrategyPlan& p = at(i);
    const bool ckpt = p.fit == Fit::with_checkpointing;
    return gib(static_cast<double>(ckpt ? p.peak_checkpointed() : p.peak())) + " of " + gib(plan_.budget_bytes) +
           (ckpt ? " with activation checkpointing" : "");
  }

  // The row with the shortest predicted step (the first of equals), among those that fit if `fitting`; -1 if none.
  int fastest(bool fitting) const {
    int best = -1;
    for (int i = 0; i < static_cast<int>(plan_.strategies.size()); ++i) {
      if (fitting && !fits(i)) continue;
      if (best < 0 || at(i).step_s < at(best).step_s) best = i;
    }
    return best;
  }

  int choose(Steps& steps) {
    const Cluster& c = in_.cluster;
    int pick = -1;
    for (const char* name : {"no_shard", "zero1", "shard_grad_op", "full_shard"}) {
      const int i = index_of(plan_, name);
      if (fits(i)) {
        pick = i;
        plan_.reason = std::string(name) + " is the first of no_shard, zero1, shard_grad_op, full_shard that fits (" +
                       fit_text(i) + ")";
        break;
      }
    }
    steps.first = pick;
    if (pick < 0) return nothing_fits();
    if (several_nodes() && hybrid_links()) {
      const int h = hybrid_counterpart(pick);
      if (fits(h) && at(h).step_s < at(pick).step_s) {
        std::ostringstream r;
        r << at(h).variant.name << ": intra-node bandwidth is " << c.intra.gbps / c.inter.gbps
          << "x inter-node (>= " << kHybridBandwidthRatio << "x), it fits in a node's share (" << fit_text(h)
          << ") and its predicted step is " << ms(at(h).step_s) << " against " << ms(at(pick).step_s) << " for "
          << at(pick).variant.name;
        pick = h;
        plan_.reason = r.str();
      }
    }
    steps.hybrid = pick;
    if (several_nodes() && inter_bound(pick)) {
      const int z = zeropp_candidate();
      if (z >= 0 && at(z).step_s <= (1.0 - kZeroPPMinimumGain) * at(pick).step_s) {
        std::ostringstream r;
        r << at(z).variant.name << ": inter-node communication of " << at(pick).variant.name << " ("
          << ms(at(pick).time.comm_inter_s) << ") exceeds its compute (" << ms(at(pick).time.compute_s)
          << "), and ZeRO++ cuts the predicted step from " << ms(at(pick).step_s) << " to " << ms(at(z).step_s)
          << " (>= " << kZeroPPMinimumGain * 100 << "% faster; fits: " << fit_text(z) << ")";
        pick = z;
        plan_.reason = r.str();
      }
    }
    return pick;
  }

  int nothing_fits() {
    const auto& s = plan_.strategies;
    int least = -1;
    for (int i = 0; i < static_cast<int>(s.size()); ++i) {
      if (least < 0 || at(i).peak_checkpointed() < at(least).peak_checkpointed()) least = i;
    }
    const int nodes = nodes_for_full_shard(in_, plan_.budget_bytes, at(least).activations_checkpointed);
    std::ostringstream r;
    r << "nothing fits: " << at(least).variant.name << " needs the least memory, "
      << gib(static_cast<double>(at(least).peak_checkpointed())) << " per rank with activation checkpointing, against "
      << gib(plan_.budget_bytes) << " usable; ";
    if (nodes > 0) {
      const int per_node = in_.cluster.ranks_per_node;
      r << "full_shard fits on " << nodes << " nodes of " << per_node << " ranks (" << nodes * per_node
        << " ranks): rerun with --nodes " << nodes << " to choose among what fits there";
    } else {
      r << "activations alone exceed the memory: lower train.micro_batch or train.seq_len";
    }
    plan_.reason = r.str();
    return least;
  }

  // Which part of the rule passes over row i, predicted faster than the pick.
  std::string why_not(int i, int pick, const Steps& steps) const {
    const StrategyPlan& p = at(i);
    const Cluster& c = in_.cluster;
    if (!fits(i)) {
      return "does not fit: it needs " + gib(static_cast<double>(p.peak_checkpointed())) +
             " per rank with activation checkpointing, against " + gib(plan_.budget_bytes) + " usable";
    }
    const bool zeropp = p.variant.zeropp.quantized_weights || p.variant.zeropp.quantized_gradients ||
                        p.variant.zeropp.hpz_partition_size > 0;
    if (zeropp) {
      const int base = steps.hybrid;
      if (!several_nodes()) return "is ZeRO++, which rule 3 considers on several nodes only";
      if (!inter_bound(base)) {
        return "is ZeRO++, which rule 3 considers only when inter-node communication exceeds compute, and " +
               at(base).variant.name + "'s (" + ms(at(base).time.comm_inter_s) + ") does not exceed its compute (" +
               ms(at(base).time.compute_s) + ")";
      }
      if (zeropp_candidate() != i) {
        return "is not the faster ZeRO++ row that fits (" + at(zeropp_candidate()).variant.name +
               "), the only one rule 3 considers";
      }
      if (p.step_s > (1.0 - kZeroPPMinimumGain) * at(base).step_s) {
        return "is only " + percent(1.0 - p.step_s / at(base).step_s) + " faster than " + at(base).variant.name +
               ": rule 3 asks >= " + percent(kZeroPPMinimumGain) +
               " before it trades accuracy for quantized communication";
      }
    } else if (shard::is_hybrid(p.variant.sharding)) {
      if (!several_nodes()) return "is hybrid sharding, which rule 2 considers on several nodes only";
      if (!hybrid_links()) {
        std::ostringstream r;
        r << "is hybrid sharding: intra-node bandwidth is " << c.intra.gbps / c.inter.gbps << "x inter-node, under the "
          << kHybridBandwidthRatio << "x rule 2 asks for";
        return r.str();
      }
      if (hybrid_counterpart(steps.first) != i) {
        return "is not " + at(steps.first).variant.name + "'s hybrid counterpart (" +
               at(hybrid_counterpart(steps.first)).variant.name + "), the only one rule 2 considers";
      }
    } else if (steps.first >= 0 && i != steps.first) {
      return "fits too, but rule 1 takes the least sharded strategy that fits (" + at(steps.first).variant.name +
             "), not the fastest";
    }
    return "is not chosen by the rule above (" + at(pick).variant.name + " is)";
  }

  const PlanInputs& in_;
  Plan& plan_;
};

}  // namespace

std::string ratio(double x) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(2);
  s << x << "x";
  return s.str();
}

// The island counts planned: one island per node, and the deck's parallel.islands where it divides the nodes.
std::vector<int> island_counts(const PlanInputs& in) {
  std::vector<int> counts;
  const int nodes = in.cluster.nodes;
  if (!in.plan_islands || nodes < 2) return counts;
  if (in.islands > 1 && in.islands < nodes && nodes % in.islands == 0) counts.push_back(in.islands);
  counts.push_back(nodes);
  return counts;
}

// The island row with `inner` inside each island (`island`: the island's own inputs, on its nodes).
IslandPlan island_row(const PlanInputs& in, const PlanInputs& island, const Plan& synchronous, int islands,
                      const StrategyPlan& inner_row) {
  IslandPlan row;
  row.islands = islands;
  row.outer = in.outer;
  const int nodes_per_island = in.cluster.nodes / islands;
  row.inner = inner_row;
  // This rank's shard of every unit, by fragment.
  const std::vector<std::size_t> count =
      shard::fragment_counts(in.model.unit_numel, row.inner.shard_size, in.outer.fragments);
  row.model_state =
      row.inner.model_state +
      shard::outer_state_bytes({in.model.unit_numel, in.model.tied_head}, row.inner.shard_size, in.outer.overlap > 0) +
      static_cast<std::int64_t>(shard::outer_scratch_bytes(in.outer, count, islands));
  // Whether it fits: the island's peak with the outer state and scratch on top (host memory: on a GPU they are not
  // the GPU's). Where only activation checkpointing makes it fit, the island's row is planned again with it.
  const double budget = synchronous.budget_bytes;
  const std::int64_t outer_bytes = in.cuda ? 0 : row.model_state - inner_row.model_state;
  if (!in.activation_checkpointing && static_cast<double>(inner_row.peak() + outer_bytes) <= budget) {
    row.fit = Fit::yes;
  } else if (static_cast<double>(inner_row.peak_checkpointed() + outer_bytes) <= budget) {
    row.fit = Fit::with_checkpointing;
    if (!row.inner.checkpointing) {
      PlanInputs checkpointed = island;
      checkpointed.activation_checkpointing = true;
      row.inner = plan_one(checkpointed, inner_row.variant, budget);
    }
  }
  // The outer group: one rank per island, each on another node.
  shard::GroupView outer;
  outer.rank = 0;
  outer.node_of_rank.clear();
  for (int i = 0; i < islands; ++i) outer.node_of_rank.push_back(i * nodes_per_island);
  double exposed_s = 0;
  for (const std::size_t c : count) {
    const std::uint64_t bytes = shard::outer_exchange_bytes(in.outer, c, islands);
    row.exchange_bytes_rank += bytes;
    const bool fp32 = in.outer.bits == 32;
    const CollectiveCall call{&outer,
                              fp32 ? comm::Collective::all_reduce : comm::Collective::all_gather,
                              fp32 ? c : static_cast<std::size_t>(bytes / static_cast<std::uint64_t>(islands - 1)),
                              fp32 ? sizeof(float) : 1,
                              1,
                              0,
                              Phase::cross_node_reduce};
    const double seconds = collective_seconds(call, in.cluster);
    row.exchange_s += seconds;
    // outer.overlap: the exchange runs behind that many inner steps; what they do not cover is exposed.
    exposed_s += std::max(0.0, seconds - in.outer.overlap * row.inner.step_s);
  }
  const double h = static_cast<double>(in.outer.inner_steps);
  row.step_s = row.inner.step_s + exposed_s / h;
  row.comm_inter_s = row.inner.time.comm_inter_s + exposed_s / h;
  // The island's job-wide bytes are per island: every island sends them.
  row.all_ranks.intra = row.inner.all_ranks.intra * static_cast<std::uint64_t>(islands);
  row.all_ranks.inter = row.inner.all_ranks.inter * static_cast<std::uint64_t>(islands) +
                        static_cast<std::uint64_t>(static_cast<double>(row.exchange_bytes_rank) *
                                                   in.cluster.world() / h);
  // Offered where the islands are at least as much faster than the synchronous pick as ZeRO++ must be to be chosen
  // (they change the algorithm more than quantization does: a small gain does not pay for it).
  const StrategyPlan& pick = synchronous.strategies[static_cast<std::size_t>(synchronous.recommended)];
  row.offered = row.fit != Fit::no && row.step_s * (1 + kZeroPPMinimumGain) <= pick.step_s;
  return row;
}

// Islands of nodes / N nodes: of the rows of the island's own plan that fit, the one whose island row steps fastest
// (the exchange's bytes depend on the shard: a replicated strategy exchanges the whole model from every rank).
IslandPlan plan_island(const PlanInputs& in, const Plan& synchronous, int islands) {
  PlanInputs island = in;
  island.cluster.nodes = in.cluster.nodes / islands;
  island.plan_islands = false;
  const Plan inner = make_plan(island);
  if (islands == in.islands) {
    for (const StrategyPlan& deck : inner.strategies) {
      const shard::ZeroPPOptions& z = deck.variant.zeropp;
      if (deck.variant.sharding == in.deck_sharding && z.quantized_weights == in.deck_zeropp.quantized_weights &&
          z.quantized_gradients == in.deck_zeropp.quantized_gradients &&
          (z.hpz_partition_size > 0) == (in.deck_zeropp.hpz_partition_size > 0)) {
        return island_row(in, island, synchronous, islands, deck);
      }
    }
  }
  IslandPlan best =
      island_row(in, island, synchronous, islands, inner.strategies[static_cast<std::size_t>(inner.recommended)]);
  for (const StrategyPlan& candidate : inner.strategies) {
    IslandPlan row = island_row(in, island, synchronous, islands, candidate);
    if (row.fit == Fit::no) continue;  // with the outer state on top
    if (best.fit == Fit::no || row.step_s < best.step_s) best = std::move(row);
  }
  return best;
}

Plan make_plan(const PlanInputs& in) {
  Plan plan;
  plan.budget_bytes = in.cluster.memory_per_rank_gib * 1073741824.0 * (1.0 - in.cluster.memory_margin);
  plan.global_tokens = in.work.tokens_per_rank() * in.cluster.world();
  const int hpz = in.hpz_partition_size > 0 ? in.hpz_partition_size : in.cluster.ranks_per_node;
  for (const Variant& v : strategy_variants(in.deck_zeropp, hpz))
    plan.strategies.push_back(plan_one(in, v, plan.budget_bytes));
  Recommender(in, plan).run();
  plan.deck_keys = deck_keys(plan.strategies[static_cast<std::size_t>(plan.recommended)], in);
  for (const int n : island_counts(in)) plan.islands.push_back(plan_island(in, plan, n));
  const IslandPlan* best = nullptr;
  for (const IslandPlan& row : plan.islands) {
    if (row.offered && (best == nullptr || row.step_s < best->step_s)) best = &row;
  }
  if (best != nullptr) {
    const StrategyPlan& pick = plan.strategies[static_cast<std::size_t>(plan.recommended)];
    std::ostringstream offer;
    offer << "the synchronous pick, " << pick.variant.name << ", steps in " << ms(pick.step_s) << ", "
          << ms(pick.time.comm_inter_s) << " of it on the links between nodes: " << best->islands << " islands of "
          << in.cluster.nodes / best->islands << " node(s), each " << best->inner.variant.name
          << ", with an outer step every " << best->outer.inner_steps << " steps, are predicted at " << ms(best->step_s)
          << " per step (" << ratio(pick.step_s / best->step_s)
          << " the tokens/s). The price: DiLoCo's outer step instead of synchronous training, so the loss at equal "
             "tokens is not the synchronous run's (docs/islands.md measures it). Deck keys: --parallel.islands="
          << best->islands;
    for (const std::string& key : deck_keys(best->inner, in)) offer << " " << key;  // ZeRO++, checkpointing
    offer << " --outer.inner_steps=" << best->outer.inner_steps << " --outer.bits=" << best->outer.bits;
    if (best->outer.fragments > 1) offer << " --outer.fragments=" << best->outer.fragments;
    if (best->outer.overlap > 0) offer << " --outer.overlap=" << best->outer.overlap;
    plan.islands_offer = offer.str();
  }
  return plan;
}

}  // namespace hsdp::plan
