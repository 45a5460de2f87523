// hsdp-plan: per strategy, the memory per rank, bytes per link and predicted step time of a model on a cluster, and
// which strategy to pick. Pure arithmetic: no MPI job, no data.
#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "hsdp/app/deck.hpp"
#include "hsdp/core/dtype.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/quant/blockwise.hpp"
#include "hsdp/train/options.hpp"
#include "plan/calibrate.hpp"
#include "plan/planner.hpp"
#include "plan/report.hpp"

namespace po = boost::program_options;

namespace {

using hsdp::app::ConfigDeck;
using hsdp::plan::Cluster;

constexpr const char* kAbout =
    R"(usage: hsdp-plan [--config deck.ini] [--section.key=value ...] [--model NAME] [cluster flags] [--json]

For a model and a cluster, prints per strategy (no_shard, zero1, shard_grad_op, full_shard, hybrid_shard,
hybrid_shard_zero2, full_shard+qwZ+hpZ+qgZ, hybrid_shard+qgZ): model-state memory per rank (hsdp's accounting and
the ZeRO paper's), activation memory with and without activation checkpointing, whether it fits, the bytes a step
sends per link class (summed over all ranks: the job-wide figure, as hsdp-train's metrics.jsonl bytes_intra and
bytes_inter; the busiest rank's, as its *_max_rank; and rank 0's), a predicted step time, and a recommendation
with its reason (also why a row predicted faster is not recommended) and the deck keys that select it in hsdp-train.

The model: the deck's [model] (GPT-2 or model.arch=llama, planned with hsdp's ModelLayout and the formulas the
engine is tested against), or --model (a named shape, the same way: a Llama's units are the embedding, L blocks
and a final unit holding the norm and the untied LM head). --model replaces the deck's [model]; --model.KEY=VALUE
given on the command line then changes the named shape (any model key, e.g. --model.n_layer=6).
micro-batch, sequence length, grad_accum, train.activation_checkpointing (true: every row is planned with it),
precision, prefetch, bucket size and the [zeropp] block and grad_bits come from the deck, with or without --model;
the flags below override them. Nodes are emulated as hsdp-train's
--topology.ranks_per_node builds them (placement from topology.placement).
)";

constexpr const char* kTimeModel = R"(
time model (alpha-beta):
  per collective on a group of n ranks: alpha x messages (ring reduce_scatter/all_gather n-1, all_reduce 2(n-1),
  all_to_all n-1) + bytes this rank sends / bandwidth. A group whose ranks span nodes runs at the inter-node link
  (a ring goes at its slowest hop), else intra-node; all_to_all splits its blocks by target. Bandwidths are per rank
  with all ranks of a node communicating (hsdp-commbench's busbw); an inter-node hop of a ring whose node holds m of
  the group's ranks, c of them sending across, gets m / c times that (fewer flows share the node's network), at
  most the intra-node bandwidth.
  compute: tokens per rank x (6P + 12 L C T) FLOPs / --compute-tflops (+ 2P + 4 L C T per token of recomputation
  when only activation checkpointing fits, or the deck asks for it).
  overlap: parallel.prefetch=false: step = compute + comm. prefetch on: the engine's schedule replayed on a clock:
  the host computes unit by unit (a third of a unit's FLOPs in forward, the rest in backward) and waits where
  hsdp-train waits (a unit's gather before its compute, every reduction before the next micro-batch and the
  optimizer step); a gather runs from its prefetch, a gradient reduction from the end of its unit's backward
  (qgZ's second hop, hybrid's cross-node all-reduce after the hop before), each on its link (intra- or
  inter-node: one collective at a time). exposed = step - compute: the time compute waits for communication.
  --calibrate measures the bandwidth by message size: a collective gets the one of its size.

memory: fits = model state + transient (gathered units, full gradients, staging, hpZ copies: an estimate of what
  hsdp allocates during a step) + activations <= memory per rank x (1 - --memory-margin).

recommendation rule:
)";

constexpr const char* kExamples = R"(
examples:
  hsdp-plan --config input/quickstart.ini --nodes 2 --ranks-per-node 2
  hsdp-plan --model llama-70b --nodes 2 --ranks-per-node 4 --inter-gbyte-s 3 --micro-batch 1 --seq-len 2048
  hsdp-plan --model gpt2-1.5b --nodes 16 --ranks-per-node 8 --inter-gbit-per-node 200 --device cuda
  mpirun -np 16 hsdp-commbench --topology.ranks_per_node=8 --json > bench.json
  hsdp-bench-train-cpu --threads 2 --json > train.json      # the threads one rank gets (device.threads)
  hsdp-plan --model gpt2-1.5b --nodes 2 --ranks-per-node 8 --calibrate bench.json --calibrate train.json --json

exit codes: 0 done; 1 internal error; 2 bad input (the message names the flag, key or file).
)";

struct Flags {
  bool help = false, version = false, json = false;
  std::optional<std::string> config, model, param_dtype, reduce_dtype;
  std::vector<std::string> calibrate;
  std::optional<long long> micro_batch, seq_len, grad_accum;
  int nodes = 1, ranks_per_node = 0, hpz = 0;
  Cluster cluster;
  std::vector<std::string> explicit_links;  // link flags the user gave (they win over --calibrate)
};

// The dtypes --param-dtype and --reduce-dtype accept: exactly the choices of the deck key they set.
const std::string& dtype_choices(const char* key) {
  return hsdp::app::find_option(key)->choices;
}

std::string dtype_help(const char* key) {
  return dtype_choices(key) + " (" + key + ")";
}

po::options_description flag_description(Flags& f) {
  po::options_description d("flags");
  const Cluster defaults;
  d.add_options()("help,h", po::bool_switch(&f.help), "this text")("version", po::bool_switch(&f.version),
                                                                   "print the version")(
      "config,c", po::value<std::string>()->value_name("FILE"), "read the deck from FILE (as hsdp-train)")(
      "model", po::value<std::string>()->value_name("NAME"),
      "a named shape instead of the deck's [model]: gpt2-124m|gpt2-350m|gpt2-1.5b|llama-7b|llama-13b|llama-70b")(
      "nodes", po::value(&f.nodes)->default_value(1), "nodes")(
      "ranks-per-node", po::value(&f.ranks_per_node)->default_value(0),
      "ranks per node; 0 = the deck's topology.ranks_per_node if > 0, else 8")(
      "memory-per-rank-gib", po::value(&f.cluster.memory_per_rank_gib)->default_value(defaults.memory_per_rank_gib),
      "memory of one rank (GiB)")(
      "memory-margin", po::value(&f.cluster.memory_margin)->default_value(defaults.memory_margin, "0.1"),
      "fraction of a rank's memory kept free for the runtime, allocator and communication library")(
      "intra-gbyte-s", po::value(&f.cluster.intra.gbps)->default_value(defaults.intra.gbps),
      "intra-node bandwidth per rank, GB/s (gigaBYTES per second: hsdp-commbench's busbw; NVLink 4: ~370)")(
      "inter-gbyte-s", po::value(&f.cluster.inter.gbps)->default_value(defaults.inter.gbps),
      "inter-node bandwidth per rank with every rank of the node sending, GB/s (gigaBYTES per second, busbw)")(
      "inter-gbit-per-node", po::value<double>()->value_name("GBIT"),
      "instead of --inter-gbyte-s: the node's network rate in Gbit/s (gigaBITS per second, as InfiniBand and "
      "Ethernet are sold: 200 for one HDR NIC, 8 x 400 for eight NDR NICs), shared by the node's ranks: "
      "per rank GB/s = GBIT / 8 / ranks per node")(
      "device", po::value<std::string>()->value_name("cpu|cuda"),
      "the device planned for (default: the deck's device.type); cuda plans every strategy with bf16 compute "
      "copies (precision.param=bf16, precision.reduce=fp32) and prints device.type=cuda among the deck keys")(
      "intra-latency-us", po::value(&f.cluster.intra.latency_us)->default_value(defaults.intra.latency_us),
      "intra-node latency per message, us")(
      "inter-latency-us", po::value(&f.cluster.inter.latency_us)->default_value(defaults.inter.latency_us),
      "inter-node latency per message, us")(
      "compute-tflops", po::value(&f.cluster.compute_tflops)->default_value(defaults.compute_tflops),
      "sustained compute per rank, TFLOP/s")("micro-batch", po::value<long long>(),
                                             "sequences per micro-batch per rank (train.micro_batch)")(
      "seq-len", po::value<long long>(), "tokens per sequence (train.seq_len)")(
      "grad-accum", po::value<long long>(), "micro-batches per step (train.grad_accum)")(
      "param-dtype", po::value<std::string>(), dtype_help("precision.param").c_str())(
      "reduce-dtype", po::value<std::string>(), dtype_help("precision.reduce").c_str())(
      "hpz-partition-size", po::value(&f.hpz)->default_value(0),
      "hpZ group of the full_shard+qwZ+hpZ+qgZ row; 0 = zeropp.hpz_partition_size if > 0, else ranks per node")(
      "calibrate", po::value<std::vector<std::string>>(&f.calibrate)->composing()->value_name("FILE"),
      "measured numbers instead of the defaults (repeatable; flags given explicitly still win): intra/inter "
      "bandwidth (busbw at the largest size) and latency (time per message at the smallest) from hsdp-commbench "
      "--json lines; the compute rate per rank from hsdp-bench-train-cpu/-gpu --json lines (hsdp-plan's FLOPs of "
      "the measured step / its mean step_ms: so the plan of the benchmarked model on one rank takes that step's "
      "time; run the bench with the threads or device one rank has)")(
      "json", po::bool_switch(&f.json), "one JSON object per strategy instead of the tables");
  return d;
}

// `--section.key=value` and `--section.key value` are deck overrides; everything else is a flag of hsdp-plan.
void split_arguments(int argc, char** argv, std::vector<std::string>& flags,
                     std::vector<std::pair<std::string, std::string>>& deck) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::string name = arg.rfind("--", 0) == 0 ? arg.substr(2, arg.find('=') - 2) : "";
    if (name.find('.') == std::string::npos) {
      flags.push_back(arg);
      continue;
    }
    if (arg.find('=') != std::string::npos) {
      deck.emplace_back(name, arg.substr(arg.find('=') + 1));
    } else if (i + 1 < argc) {
      deck.emplace_back(name, argv[++i]);
    } else {
      hsdp::throw_config("--" + name + " needs a value");
    }
  }
}

std::string deck_dtype(const std::string& text, const char* flag, const char* key) {
  std::istringstream choices(dtype_choices(key));
  for (std::string choice; std::getline(choices, choice, '|');) {
    if (choice == text) return text;
  }
  hsdp::throw_config(std::string(flag) + ": '" + text + "' is not one of " + dtype_help(key));
}

ConfigDeck build_deck(const Flags& f, const std::vector<std::pair<std::string, std::string>>& overrides) {
  ConfigDeck deck = ConfigDeck::defaults();
  if (f.config) {
    std::ifstream file(*f.config);
    if (!file) hsdp::throw_config("--config: cannot open deck '" + *f.config + "' (no such file or not readable)");
    std::stringstream text;
    text << file.rdbuf();
    deck = ConfigDeck::from_text(text.str(), "deck '" + *f.config + "'");
  }
  if (f.model) {
    const hsdp::model::GptConfig g = hsdp::plan::named_config(*f.model);
    for (const auto& [key, value] :
         std::vector<std::pair<std::string, int>>{{"model.n_layer", g.n_layer},
                                                  {"model.n_head", g.n_head},
                                                  {"model.n_embd", g.n_embd},
                                                  {"model.block_size", g.block_size},
                                                  {"model.vocab_size", g.vocab_size},
                                                  {"model.padded_vocab_size", g.padded_vocab_size}}) {
      deck.set(key, std::to_string(value));
    }
    deck.set("model.arch", hsdp::model::arch_name(g.arch));
    if (g.llama()) {
      deck.set("model.n_kv_head", std::to_string(g.n_kv_head));
      deck.set("model.ffn_dim", std::to_string(g.ffn_dim));
    }
  }
  for (const auto& [key, value] : overrides) deck.set(key, value);
  if (f.micro_batch) deck.set("train.micro_batch", std::to_string(*f.micro_batch));
  if (f.seq_len) deck.set("train.seq_len", std::to_string(*f.seq_len));
  if (f.grad_accum) deck.set("train.grad_accum", std::to_string(*f.grad_accum));
  if (f.param_dtype) deck.set("precision.param", deck_dtype(*f.param_dtype, "--param-dtype", "precision.param"));
  if (f.reduce_dtype) deck.set("precision.reduce", deck_dtype(*f.reduce_dtype, "--reduce-dtype", "precision.reduce"));
  return deck;
}

using Overrides = std::vector<std::pair<std::string, std::string>>;

// " with model.n_layer=6, ...": the command line's model keys that change a named shape, for its name.
std::string model_overrides_text(const Overrides& overrides) {
  std::string text;
  for (const auto& [key, value] : overrides) {
    if (key.rfind("model.", 0) == 0 && key != "model.seed")
      text += (text.empty() ? " with " : ", ") + key + "=" + value;
  }
  return text;
}

hsdp::plan::PlanModel model_of(const Flags& f, const hsdp::train::TrainOptions& d, const Overrides& overrides,
                               std::int64_t seq_len) {
  hsdp::model::GptConfig c = d.model;
  if (c.padded_vocab_size == 0) c.padded_vocab_size = (c.vocab_size + 127) / 128 * 128;  // as hsdp-train
  if (c.padded_vocab_size < c.vocab_size) {
    hsdp::throw_config("model.padded_vocab_size (" + std::to_string(c.padded_vocab_size) +
                       ") must be 0 or >= model.vocab_size (" + std::to_string(c.vocab_size) + ")");
  }
  if (seq_len > c.block_size) {
    hsdp::throw_config("train.seq_len (" + std::to_string(seq_len) + ") exceeds model.block_size (" +
                       std::to_string(c.block_size) + ")");
  }
  return hsdp::plan::gpt_model(c, f.model    ? *f.model + model_overrides_text(overrides)
                                  : f.config ? "deck " + *f.config
                                             : "deck defaults");
}

// One line each on stderr for bandwidths no cluster has: most often a unit mistaken (gigabits for gigabytes, per node
// for per rank). The plan goes on with them.
void warn_implausible(const Cluster& c) {
  const double node_gbit = c.inter.gbps * 8 * c.ranks_per_node;
  std::ostringstream w;
  if (c.inter.gbps > c.intra.gbps) {
    w << "inter-node bandwidth " << c.inter.gbps << " GB/s per rank exceeds intra-node " << c.intra.gbps
      << " GB/s per rank: links between nodes are not faster than inside one (a value in Gbit/s given as GB/s? "
         "--inter-gbit-per-node takes Gbit/s)\n";
  }
  if (node_gbit > 8 * 800.0) {
    w << "inter-node bandwidth " << c.inter.gbps << " GB/s per rank x " << c.ranks_per_node << " ranks = " << node_gbit
      << " Gbit/s per node, beyond eight 800 Gbit/s NICs\n";
  }
  if (c.intra.gbps > 2000) {
    w << "intra-node bandwidth " << c.intra.gbps << " GB/s per rank is beyond any GPU interconnect (NVLink 5: ~900)\n";
  }
  std::istringstream lines(w.str());
  for (std::string line; std::getline(lines, line);) std::cerr << "hsdp-plan: warning: " << line << "\n";
}

void check_cluster(const Cluster& c) {
  const auto positive = [](double x, const char* flag) {
    if (!(x > 0)) hsdp::throw_config(std::string(flag) + " must be positive");
  };
  positive(c.memory_per_rank_gib, "--memory-per-rank-gib");
  positive(c.intra.gbps, "--intra-gbyte-s");
  positive(c.inter.gbps, "--inter-gbyte-s (or --inter-gbit-per-node)");
  positive(c.compute_tflops, "--compute-tflops");
  if (!(c.memory_margin >= 0 && c.memory_margin < 1)) hsdp::throw_config("--memory-margin must be in [0, 1)");
  if (!(c.intra.latency_us >= 0) || !(c.inter.latency_us >= 0)) {
    hsdp::throw_config("--intra-latency-us and --inter-latency-us must be >= 0");
  }
}

int run(int argc, char** argv) {
  std::vector<std::string> flag_args;
  std::vector<std::pair<std::string, std::string>> overrides;
  split_arguments(argc, argv, flag_args, overrides);
  Flags f;
  const po::options_description description = flag_description(f);
  // The flags of earlier versions, whose unit ("gbps") read as gigabits while it meant gigabytes: refused, naming
  // what replaces them (not in --help).
  po::options_description retired("retired");
  retired.add_options()("intra-gbps", po::value<double>())("inter-gbps", po::value<double>());
  po::options_description all;
  all.add(description).add(retired);
  po::variables_map vm;
  try {
    const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    po::store(po::command_line_parser(flag_args).options(all).style(style).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    hsdp::throw_config(std::string(e.what()) + " (hsdp-plan --help lists the flags)");
  }
  for (const char* link : {"intra", "inter"}) {
    if (vm.count(std::string(link) + "-gbps")) {
      hsdp::throw_config(std::string("--") + link + "-gbps is gone: it meant gigaBYTES per second per rank, which " +
                         "reads as gigabits; use --" + link + "-gbyte-s (GB/s per rank)" +
                         (std::string(link) == "inter" ? " or --inter-gbit-per-node (the node's network in Gbit/s, "
                                                         "e.g. 200 for HDR InfiniBand)"
                                                       : ""));
    }
  }
  if (f.help) {
    std::cout << kAbout << "\n" << description << kTimeModel;
    std::istringstream rule(hsdp::plan::kRecommendationRule());
    for (std::string line; std::getline(rule, line);) std::cout << "  " << line << "\n";
    std::cout << kExamples;
    return hsdp::kExitOk;
  }
  if (f.version) {
    std::cout << "hsdp-plan " << HSDP_VERSION << "\n";
    return hsdp::kExitOk;
  }
  const auto text = [&](const char* key, std::optional<std::string>& out) {
    if (vm.count(key)) out = vm[key].as<std::string>();
  };
  const auto whole = [&](const char* key, std::optional<long long>& out) {
    if (vm.count(key)) out = vm[key].as<long long>();
  };
  text("config", f.config);
  text("model", f.model);
  text("param-dtype", f.param_dtype);
  text("reduce-dtype", f.reduce_dtype);
  whole("micro-batch", f.micro_batch);
  whole("seq-len", f.seq_len);
  whole("grad-accum", f.grad_accum);

  // Every key read where the option table reads it for hsdp-train (build_deck wrote the flags into the deck).
  const hsdp::train::TrainOptions d = hsdp::app::deck_values(build_deck(f, overrides));
  hsdp::plan::PlanInputs in;
  in.work.micro_batch = d.micro_batch;
  in.work.seq_len = d.seq_len;
  in.work.grad_accum = d.grad_accum;
  in.activation_checkpointing = d.activation_checkpointing;
  in.model = model_of(f, d, overrides, in.work.seq_len);

  Cluster& c = in.cluster;
  c = f.cluster;
  c.nodes = f.nodes;
  const int deck_ranks = d.topology.ranks_per_node;
  c.ranks_per_node = f.ranks_per_node > 0 ? f.ranks_per_node : deck_ranks > 0 ? deck_ranks : 8;
  if (f.ranks_per_node < 0) hsdp::throw_config("--ranks-per-node must be >= 0");
  c.placement = d.topology.placement;
  if (vm.count("inter-gbit-per-node")) {
    if (!vm["inter-gbyte-s"].defaulted()) {
      hsdp::throw_config("--inter-gbit-per-node and --inter-gbyte-s both give the inter-node bandwidth: give one");
    }
    c.inter.gbps = vm["inter-gbit-per-node"].as<double>() / 8.0 / c.ranks_per_node;
  }
  hsdp::plan::ReportContext context;
  if (!f.calibrate.empty()) {
    const hsdp::plan::Calibration cal = hsdp::plan::read_calibration(f.calibrate);
    const auto apply = [&](const std::optional<hsdp::plan::LinkCalibration>& link, hsdp::plan::LinkClass& into,
                           const std::string& group, const std::string& gbps_flag, const std::string& latency_flag) {
      if (!link) {
        context.cluster_notes += "calibration: " + cal.source + " has no " + group + " ring collectives; --" +
                                 gbps_flag + " and --" + latency_flag + " keep their values\n";
        return;
      }
      context.cluster_notes += "calibration: " + link->how + "\n";
      if (vm[gbps_flag].defaulted() && !(gbps_flag == "inter-gbyte-s" && vm.count("inter-gbit-per-node"))) {
        into.gbps = link->gbps;
        into.by_size = link->by_size;
      } else
        context.cluster_notes += "  --" + gbps_flag + " given: it wins over the calibration\n";
      if (vm[latency_flag].defaulted())
        into.latency_us = link->latency_us;
      else
        context.cluster_notes += "  --" + latency_flag + " given: it wins over the calibration\n";
    };
    apply(cal.intra, c.intra, "intra-node", "intra-gbyte-s", "intra-latency-us");
    apply(cal.inter, c.inter, "inter-node", "inter-gbyte-s", "inter-latency-us");
    if (cal.node_ring) {
      const bool inter_given = !vm["inter-gbyte-s"].defaulted() || vm.count("inter-gbit-per-node") > 0;
      context.cluster_notes += "calibration: " + cal.node_ring->how + "\n";
      if (inter_given) {
        context.cluster_notes += "  the inter-node bandwidth given wins: rings over nodes of " +
                                 std::to_string(cal.node_ring_members) + " ranks take it too\n";
      } else {
        c.node_ring = {cal.node_ring->gbps, cal.node_ring->latency_us, cal.node_ring->by_size};
        c.node_ring_members = cal.node_ring_members;
        context.cluster_notes += "  ring collectives over groups of " + std::to_string(cal.node_ring_members) +
                                 " ranks on each node take their time from it\n";
      }
    }
    if (!cal.compute) {
      context.cluster_notes += "calibration: " + cal.source +
                               " has no bench=train_cpu or bench=train_gpu lines; --compute-tflops keeps its value\n";
    } else {
      context.cluster_notes += "calibration: " + cal.compute->how + "\n";
      if (vm["compute-tflops"].defaulted())
        c.compute_tflops = cal.compute->tflops;
      else
        context.cluster_notes += "  --compute-tflops given: it wins over the calibration\n";
      c.host_polls = cal.compute->cpu;
      if (c.host_polls) {
        context.cluster_notes +=
            "  the CPU engine: a collective's every step waits half a poll interval for its ranks (the compute "
            "between two polls: a micro-batch's over 12 L + 6)\n";
      }
    }
  }
  check_cluster(c);
  warn_implausible(c);

  hsdp::shard::EngineOptions& o = in.base;
  o.param_dtype = d.engine.param_dtype;
  o.reduce_dtype = d.engine.reduce_dtype;
  std::string device = d.device_type == hsdp::device::DeviceType::cuda ? "cuda" : "cpu";
  if (vm.count("device")) device = vm["device"].as<std::string>();
  if (device != "cpu" && device != "cuda") hsdp::throw_config("--device " + device + ": cpu or cuda");
  in.cuda = device == "cuda";
  if (in.cuda && (o.param_dtype != hsdp::DType::bf16 || o.reduce_dtype != hsdp::DType::f32)) {
    context.cluster_notes +=
        "device cuda: planned with precision.param=bf16 (the GPU model's bf16 compute copies) and "
        "precision.reduce=fp32\n";
    o.param_dtype = hsdp::DType::bf16;
    o.reduce_dtype = hsdp::DType::f32;
  }
  o.prefetch = d.engine.prefetch;
  o.bucket_mb = d.engine.bucket_mb;
  o.grad_accum = in.work.grad_accum;
  in.deck_zeropp = d.engine.zeropp;
  hsdp::quant::validate({in.deck_zeropp.grad_bits, in.deck_zeropp.block});
  if (f.hpz < 0) hsdp::throw_config("--hpz-partition-size must be >= 0");
  in.hpz_partition_size = f.hpz > 0 ? f.hpz : d.engine.zeropp.hpz_partition_size;
  in.islands = d.islands;
  in.deck_sharding = d.engine.strategy;
  in.outer = d.outer;

  const hsdp::plan::Plan plan = hsdp::plan::make_plan(in);
  if (f.json) {
    if (!context.cluster_notes.empty()) std::cerr << context.cluster_notes;
    std::cout << hsdp::plan::json_report(in, plan);
  } else {
    std::cout << hsdp::plan::table_report(in, plan, context);
  }
  return hsdp::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const hsdp::Error& e) {
    std::cerr << "hsdp-plan: " << hsdp::to_string(e.kind()) << " error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "hsdp-plan: internal error: " << e.what() << "\n";
    return hsdp::kExitInternal;
  }
}
