#include "plan/report.hpp"

#include <cstdio>
#include <sstream>

#include "hsdp/core/json.hpp"

namespace hsdp::plan {
namespace {

std::string fixed(double x, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, x);
  return text;
}

// Three significant digits.
std::string sig3(double x) {
  return fixed(x, x >= 100 ? 0 : x >= 10 ? 1 : 2);
}

std::string count(double n) {
  if (n >= 1e9) return sig3(n / 1e9) + "G";
  if (n >= 1e6) return sig3(n / 1e6) + "M";
  if (n >= 1e3) return sig3(n / 1e3) + "K";
  return fixed(n, 0);
}

std::string millis(double seconds) {
  const double ms = seconds * 1e3;
  return fixed(ms, ms < 1 ? 3 : ms < 100 ? 2 : 1);
}

// Milliseconds below 10 s, else seconds, with the unit.
std::string duration(double seconds) {
  return seconds < 10 ? millis(seconds) + " ms" : sig3(seconds) + " s";
}

std::string pad(const std::string& text, std::size_t width, bool left = false) {
  if (text.size() >= width) return text;
  const std::string fill(width - text.size(), ' ');
  return left ? text + fill : fill + text;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "fp32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "fp16";
    default:
      return "?";
  }
}

std::string joined(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& w : words) text += (text.empty() ? "" : " ") + w;
  return text;
}

std::string fit_cell(Fit fit) {
  switch (fit) {
    case Fit::yes:
      return "yes";
    case Fit::with_checkpointing:
      return "ckpt";
    case Fit::no:
      return "no";
  }
  return "?";
}

}  // namespace

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) {
    bytes /= 1024;
    ++u;
  }
  return (u == 0 ? fixed(bytes, 0) : sig3(bytes)) + " " + units[u];
}

std::string table_report(const PlanInputs& in, const Plan& plan, const ReportContext& context) {
  const PlanModel& m = in.model;
  const Cluster& c = in.cluster;
  const Workload& w = in.work;
  const shard::EngineOptions& o = in.base;
  std::ostringstream out;
  out << "hsdp-plan: model " << m.name << ", P = " << m.params() << " parameters ("
      << count(static_cast<double>(m.params())) << "; " << m.unit_numel.size() << " units: embedding "
      << count(static_cast<double>(m.unit_numel.front())) << ", " << m.blocks() << " blocks of "
      << count(static_cast<double>(m.unit_numel[1])) << ", final " << count(static_cast<double>(m.unit_numel.back()))
      << (m.tied_head ? "; LM head tied to the embedding" : "; untied LM head in the final unit") << ")\n";
  out << "cluster: " << c.nodes << " node(s) x " << c.ranks_per_node << " ranks (" << comm::to_string(c.placement)
      << " placement), " << fixed(c.memory_per_rank_gib, 1) << " GiB per rank, " << fixed(c.memory_margin * 100, 0)
      << "% kept free: " << human_bytes(plan.budget_bytes) << " usable; intra-node " << sig3(c.intra.gbps) << " GB/s, "
      << sig3(c.intra.latency_us) << " us; inter-node " << sig3(c.inter.gbps) << " GB/s, " << sig3(c.inter.latency_us)
      << " us; " << sig3(c.compute_tflops) << " TFLOP/s per rank\n";
  if (!context.cluster_notes.empty()) out << context.cluster_notes;
  out << "workload: micro_batch " << w.micro_batch << " x seq_len " << w.seq_len << " x grad_accum " << w.grad_accum
      << " = " << w.tokens_per_rank() << " tokens per rank, " << plan.global_tokens << " per step; param "
      << dtype_name(o.param_dtype) << ", reduce " << dtype_name(o.reduce_dtype) << "; prefetch "
      << (o.prefetch ? "on" : "off")
      << (in.activation_checkpointing ? "; activation checkpointing on (train.activation_checkpointing)" : "")
      << "\n\n";

  out << "memory per rank (state: hsdp's accounting, fp32 master + grads + Adam m, v, and "
      << (in.cuda ? "bf16" : "fp32") << " compute copies;\nZeRO paper: mixed-precision Adam with 2-byte params and grads)\n";
  const std::size_t name_w = 24;
  out << pad("strategy", name_w, true) << pad("state", 11) << pad("ZeRO paper", 12) << pad("transient", 11)
      << pad("activations", 13) << pad("act (ckpt)", 12) << pad("peak", 11) << pad("peak (ckpt)", 13)
      << pad("fits", in.cuda ? 12 : 6) << "\n";
  for (std::size_t i = 0; i < plan.strategies.size(); ++i) {
    const StrategyPlan& p = plan.strategies[i];
    out << pad((static_cast<int>(i) == plan.recommended ? "* " : "  ") + p.variant.name, name_w, true)
        << pad(human_bytes(static_cast<double>(p.model_state)), 11) << pad(human_bytes(p.zero_paper_state), 12)
        << pad(human_bytes(static_cast<double>(p.transient)), 11)
        << pad(human_bytes(static_cast<double>(p.activations)), 13)
        << pad(human_bytes(static_cast<double>(p.activations_checkpointed)), 12)
        << pad(human_bytes(static_cast<double>(p.peak())), 11)
        << pad(human_bytes(static_cast<double>(p.peak_checkpointed())), 13) << pad(fit_cell(p.fit), in.cuda ? 12 : 6)
        << "\n";
  }
  out << "\nbytes sent per step: job-wide (summed over all ranks: hsdp-train's metrics.jsonl "
         "bytes_intra/bytes_inter),\n"
         "by the busiest rank (per link class: its bytes_intra_max_rank/bytes_inter_max_rank), and by rank 0\n";
  out << pad("strategy", name_w, true) << pad("intra job", 11) << pad("inter job", 11) << pad("intra max", 11)
      << pad("inter max", 11) << pad("intra r0", 11) << pad("inter r0", 11) << "\n";
  const auto bytes = [](std::uint64_t b) { return pad(human_bytes(static_cast<double>(b)), 11); };
  for (std::size_t i = 0; i < plan.strategies.size(); ++i) {
    const StrategyPlan& p = plan.strategies[i];
    out << pad((static_cast<int>(i) == plan.recommended ? "* " : "  ") + p.variant.name, name_w, true)
        << bytes(p.all_ranks.intra) << bytes(p.all_ranks.inter) << bytes(p.max_rank.intra) << bytes(p.max_rank.inter)
        << bytes(p.rank0.intra) << bytes(p.rank0.inter) << "\n";
  }
  out << "\npredicted time per step (ms)\n";
  out << pad("strategy", name_w, true) << pad("compute", 10) << pad("comm", 10) << pad("inter", 10)
      << pad("exposed", 10) << pad("step", 10) << pad("tokens/s", 11) << "\n";
  for (std::size_t i = 0; i < plan.strategies.size(); ++i) {
    const StrategyPlan& p = plan.strategies[i];
    const double tokens_per_s = static_cast<double>(plan.global_tokens) / p.step_s;
    out << pad((static_cast<int>(i) == plan.recommended ? "* " : "  ") + p.variant.name, name_w, true)
        << pad(millis(p.time.compute_s), 10) << pad(millis(p.time.comm_s), 10) << pad(millis(p.time.comm_inter_s), 10)
        << pad(millis(p.time.exposed_s), 10) << pad(millis(p.step_s) + (p.checkpointing ? "c" : ""), 10)
        << pad(count(tokens_per_s), 11) << "\n";
  }
  out << "\ntime: per collective, alpha x messages (ring n-1, all_reduce 2(n-1)) + bytes / bandwidth of its link\n"
         "(inter-node when the group spans nodes); compute = tokens x (6P + 12 L C T) FLOPs / rate (c: plus the\n"
         "recomputation of activation checkpointing, used when only that fits);\n"
      << (o.prefetch
              ? "step = the engine's schedule replayed (prefetch is on): compute unit by unit, each gather from its\n"
                "prefetch, each gradient reduction from the end of its unit's backward, one collective at a time per\n"
                "link; `exposed` = step - compute, the time compute waits for communication"
              : "step = compute + comm: prefetch is off, nothing overlaps")
      << (in.cuda ? "\nstate: hsdp no_shard 18P, zero1 6P + 16P/n (bf16 compute copies), sharded 16P/n;\n"
                  : "\nstate: hsdp no_shard 16P (20P with a non-fp32 param dtype), zero1 8P + 16P/n, sharded 16P/n;\n")
      << "ZeRO paper 16P, 4P + 12P/n, 2P + 14P/n, 16P/n (n = shard group: world, or ranks per node for hybrid)\n";
  if (!plan.islands.empty()) {
    const shard::OuterOptions& q = in.outer;
    out << "\nislands (parallel.islands: each island trains apart, the strategy hsdp-plan picks for its nodes, and "
           "every\nouter.inner_steps = "
        << q.inner_steps << " steps the islands exchange their pseudo-gradients in "
        << (q.bits == 32 ? std::string("fp32") : q.bits == 16 ? std::string("bf16") : "int" + std::to_string(q.bits))
        << (q.fragments > 1 ? ", in " + std::to_string(q.fragments) + " fragments" : std::string())
        << ";\nper step amortised: step = the island's + exchange / H; state with the outer state, 12 B per element "
           "of the shard\n(16 with outer.overlap), and the exchange's scratch for the largest fragment)\n";
    out << pad("islands", 9, true) << pad("inside", 20, true) << pad("state", 11) << pad("fits", 6)
        << pad("exchange", 11) << pad("inter job", 11) << pad("step", 10) << pad("tokens/s", 11) << pad("vs pick", 9)
        << "\n";
    const double pick_s = plan.strategies[static_cast<std::size_t>(plan.recommended)].step_s;
    for (const IslandPlan& r : plan.islands) {
      out << pad((r.offered ? "+ " : "  ") + std::to_string(r.islands), 9, true)
          << pad(r.inner.variant.name + " x" + std::to_string(c.nodes / r.islands), 20, true)
          << pad(human_bytes(static_cast<double>(r.model_state)), 11) << pad(fit_cell(r.fit), 6)
          << pad(duration(r.exchange_s), 11) << pad(human_bytes(static_cast<double>(r.all_ranks.inter)), 11)
          << pad(millis(r.step_s), 10) << pad(count(static_cast<double>(plan.global_tokens) / r.step_s), 11)
          << pad(fixed(pick_s / r.step_s, 2) + "x", 9) << "\n";
    }
    out << "(fits: the island's peak with this state, ckpt: with activation checkpointing, its time too; exchange: "
           "the F\nfragments' exchanges, once per H steps; inter job: bytes per step across nodes, all ranks; vs pick: "
           "tokens/s against the\nrecommendation's; + offered below)\n";
  }
  out << "\nrecommendation: " << plan.strategies[static_cast<std::size_t>(plan.recommended)].variant.name << " -- "
      << plan.reason << "\ndeck keys: " << joined(plan.deck_keys) << "\n";
  if (!plan.islands_offer.empty()) out << "islands: " << plan.islands_offer << "\n";
  out << "rule:\n";
  std::istringstream rule(kRecommendationRule());
  for (std::string line; std::getline(rule, line);) out << "  " << line << "\n";
  return out.str();
}

std::string json_report(const PlanInputs& in, const Plan& plan) {
  std::ostringstream out;
  const Cluster& c = in.cluster;
  for (std::size_t i = 0; i < plan.strategies.size(); ++i) {
    const StrategyPlan& p = plan.strategies[i];
    const bool recommended = static_cast<int>(i) == plan.recommended;
    JsonLine j;
    j.add("model", in.model.name).add("params", static_cast<std::uint64_t>(in.model.params()));
    j.add("strategy", p.variant.name).add("sharding", shard::to_string(p.variant.sharding));
    j.add("qwZ", p.options.zeropp.quantized_weights).add("hpZ", p.options.zeropp.hpz_partition_size);
    j.add("qgZ", p.options.zeropp.quantized_gradients);
    j.add("param_dtype", dtype_name(p.options.param_dtype)).add("reduce_dtype", dtype_name(p.options.reduce_dtype));
    j.add("nodes", c.nodes).add("ranks_per_node", c.ranks_per_node).add("shard_size", p.shard_size);
    j.add("model_state_bytes", p.model_state).add("zero_paper_state_bytes", p.zero_paper_state);
    j.add("transient_bytes", p.transient).add("activation_bytes", p.activations);
    j.add("activation_bytes_checkpointed", p.activations_checkpointed);
    j.add("peak_bytes", p.peak()).add("peak_bytes_checkpointed", p.peak_checkpointed());
    j.add("memory_budget_bytes", plan.budget_bytes).add("fits", to_string(p.fit));
    j.add("device", in.cuda ? "cuda" : "cpu");
    // The same quantities, under the same names, as hsdp-train's metrics.jsonl: bytes_intra/bytes_inter summed over
    // all ranks (job-wide), *_max_rank the busiest rank's; and rank 0's.
    j.add("bytes_intra", p.all_ranks.intra).add("bytes_inter", p.all_ranks.inter);
    j.add("bytes_intra_max_rank", p.max_rank.intra).add("bytes_inter_max_rank", p.max_rank.inter);
    j.add("bytes_intra_rank0", p.rank0.intra).add("bytes_inter_rank0", p.rank0.inter);
    j.add("compute_ms", p.time.compute_s * 1e3).add("comm_ms", p.time.comm_s * 1e3);
    j.add("comm_inter_ms", p.time.comm_inter_s * 1e3).add("exposed_comm_ms", p.time.exposed_s * 1e3);
    j.add("step_ms_serial", p.time.serial_s() * 1e3).add("step_ms_overlapped", p.time.overlapped_s() * 1e3);
    j.add("overlap", p.options.prefetch ? "prefetch" : "none").add("checkpointing", p.checkpointing);
    j.add("step_ms", p.step_s * 1e3).add("tokens_per_s", static_cast<double>(plan.global_tokens) / p.step_s);
    j.add("recommended", recommended);
    if (recommended) {
      j.add("reason", plan.reason).add("deck_keys", joined(plan.deck_keys));
      j.add("fastest", plan.strategies[static_cast<std::size_t>(plan.fastest)].variant.name);
    }
    out << j.str() << "\n";
  }
  for (const IslandPlan& r : plan.islands) {
    JsonLine j;
    j.add("model", in.model.name).add("params", static_cast<std::uint64_t>(in.model.params()));
    j.add("strategy", "islands").add("islands", r.islands).add("inner_strategy", r.inner.variant.name);
    j.add("inner_steps", r.outer.inner_steps).add("outer_bits", r.outer.bits);
    j.add("outer_fragments", r.outer.fragments);
    j.add("nodes", c.nodes).add("ranks_per_node", c.ranks_per_node).add("shard_size", r.inner.shard_size);
    j.add("model_state_bytes", r.model_state).add("fits", to_string(r.fit));
    j.add("device", in.cuda ? "cuda" : "cpu");
    j.add("bytes_intra", r.all_ranks.intra).add("bytes_inter", r.all_ranks.inter);
    j.add("exchange_bytes_rank", r.exchange_bytes_rank).add("exchange_ms", r.exchange_s * 1e3);
    j.add("compute_ms", r.inner.time.compute_s * 1e3).add("comm_inter_ms", r.comm_inter_s * 1e3);
    j.add("island_step_ms", r.inner.step_s * 1e3);
    j.add("step_ms", r.step_s * 1e3).add("tokens_per_s", static_cast<double>(plan.global_tokens) / r.step_s);
    j.add("recommended", false).add("offered", r.offered);
    if (r.offered) j.add("offer", plan.islands_offer);
    out << j.str() << "\n";
  }
  return out.str();
}

}  // namespace hsdp::plan
