// hsdp-train: parse the deck, build the mesh, train. Every rank runs this.
#include <chrono>
#include <exception>
#include <iostream>
#include <optional>
#include <thread>

#include "hsdp/comm/agree.hpp"
#include "hsdp/app/options.hpp"
#include "hsdp/comm/mesh.hpp"
#include "hsdp/comm/mpi.hpp"
#include "hsdp/comm/topology.hpp"
#include "hsdp/core/fault.hpp"
#include "hsdp/core/log.hpp"
#include "hsdp/core/stall.hpp"
#include "hsdp/quant/blockwise.hpp"
#include "hsdp/shard/strategy.hpp"
#include "hsdp/train/signals.hpp"
#include "hsdp/train/trainer.hpp"

namespace {

using hsdp::app::CommandLine;
using hsdp::app::ConfigDeck;

hsdp::comm::TopologyOptions topology_options(const ConfigDeck& deck) {
  hsdp::comm::TopologyOptions options;
  options.ranks_per_node = static_cast<int>(deck.get_int("topology.ranks_per_node"));
  options.placement = hsdp::comm::parse_placement(deck.get("topology.placement"));
  return options;
}

hsdp::train::TrainOptions train_options(const ConfigDeck& deck) {
  hsdp::train::TrainOptions o;
  auto integer = [&](const char* key) { return static_cast<int>(deck.get_int(key)); };
  o.model.n_layer = integer("model.n_layer");
  o.model.n_head = integer("model.n_head");
  o.model.n_embd = integer("model.n_embd");
  o.model.block_size = integer("model.block_size");
  o.model.vocab_size = integer("model.vocab_size");
  o.model.padded_vocab_size = integer("model.padded_vocab_size");
  if (o.model.padded_vocab_size == 0) o.model.padded_vocab_size = (o.model.vocab_size + 127) / 128 * 128;
  if (o.model.padded_vocab_size < o.model.vocab_size) {
    hsdp::throw_config("model.padded_vocab_size (" + std::to_string(o.model.padded_vocab_size) +
                       ") must be 0 or >= model.vocab_size (" + std::to_string(o.model.vocab_size) + ")");
  }
  o.model.validate();
  o.model_seed = static_cast<std::uint64_t>(deck.get_int("model.seed"));
  o.train_path = deck.get("data.train");
  o.val_path = deck.get("data.val");
  o.entropy_json = deck.get("data.entropy_json");
  o.steps = deck.get_int("train.steps");
  o.micro_batch = integer("train.micro_batch");
  o.seq_len = integer("train.seq_len");
  if (o.seq_len > o.model.block_size) {
    hsdp::throw_config("train.seq_len (" + std::to_string(o.seq_len) + ") exceeds model.block_size (" +
                       std::to_string(o.model.block_size) + ")");
  }
  o.grad_accum = integer("train.grad_accum");
  o.engine.grad_accum = o.grad_accum;
  o.schedule.lr = deck.get_real("train.lr");
  o.schedule.min_lr = deck.get_real("train.min_lr");
  o.schedule.warmup_steps = deck.get_int("train.warmup_steps");
  o.schedule.max_steps = o.steps;
  hsdp::optim::validate(o.schedule);
  o.adamw.beta1 = static_cast<float>(deck.get_real("train.beta1"));
  o.adamw.beta2 = static_cast<float>(deck.get_real("train.beta2"));
  o.adamw.eps = static_cast<float>(deck.get_real("train.eps"));
  o.adamw.weight_decay = static_cast<float>(deck.get_real("train.weight_decay"));
  hsdp::optim::validate(o.adamw, o.schedule.lr);
  o.grad_clip = deck.get_real("train.grad_clip");
  o.data_seed = static_cast<std::uint64_t>(deck.get_int("train.seed"));
  o.eval_every = deck.get_int("train.eval_every");
  o.eval_tokens = deck.get_int("train.eval_tokens");
  o.activation_checkpointing = deck.get_bool("train.activation_checkpointing");
  o.engine.strategy = hsdp::shard::parse_sharding(deck.get("parallel.sharding"));
  o.engine.param_dtype = hsdp::parse_dtype(deck.get("precision.param"), "precision.param");
  o.engine.reduce_dtype = hsdp::parse_dtype(deck.get("precision.reduce"), "precision.reduce");
  o.engine.prefetch = deck.get_bool("parallel.prefetch");
  o.engine.bucket_mb = deck.get_real("parallel.bucket_mb");
  auto& z = o.engine.zeropp;
  z.quantized_weights = deck.get_bool("zeropp.quantized_weights");
  z.hpz_partition_size = integer("zeropp.hpz_partition_size");
  z.quantized_gradients = deck.get_bool("zeropp.quantized_gradients");
  z.grad_bits = deck.get("zeropp.grad_bits") == "8" ? hsdp::quant::Bits::int8 : hsdp::quant::Bits::int4;
  z.block = static_cast<std::size_t>(deck.get_int("zeropp.block"));
  hsdp::quant::validate({z.grad_bits, z.block});
  o.threads = integer("device.threads");
  const std::string streams = deck.get("device.streams");
  o.engine.streams.check = streams != "inline";
  o.engine.streams.threads = streams == "threads";
  o.engine.streams.seed = static_cast<std::uint64_t>(deck.get_int("device.streams_seed"));
  o.device_type = hsdp::device::parse_device_type(deck.get("device.type"));
  o.comm_intra = hsdp::comm::parse_transport(deck.get("comm.intra"), "comm.intra");
  o.comm_inter = hsdp::comm::parse_transport(deck.get("comm.inter"), "comm.inter");
  o.comm.timeout_s = deck.get_real("comm.timeout_s");
  o.stop_at_step = deck.get_int("train.stop_at_step");
  o.eval_only = deck.get_bool("train.eval_only");
  o.checkpoint_dir = deck.get("checkpoint.dir");
  o.checkpoint_every = deck.get_int("checkpoint.every");
  o.checkpoint_keep = integer("checkpoint.keep");
  o.checkpoint_keep_every = integer("checkpoint.keep_every");
  o.resume = deck.get("checkpoint.resume");
  o.checkpoint_overwrite = deck.get_bool("checkpoint.overwrite");
  o.checkpoint_fallback = deck.get_bool("checkpoint.fallback");
  o.checkpoint_timeout_s = deck.get_real("checkpoint.timeout_s");
  o.checkpoint_continue_on_error = deck.get("checkpoint.on_error") == "continue";
  if (o.resume == "auto" && o.checkpoint_dir.empty()) o.resume = "none";
  o.log_dir = deck.get("log.dir");
  o.log_every = deck.get_int("log.every");
  o.deck_text = deck.to_ini(false);
  return o;
}

// Watched start-up: before the deck is read, stalls are bounded by comm.timeout_s's default.
constexpr double kStartupDefaultLimitS = 300;

int run(int argc, char** argv, const hsdp::Logger& log, const hsdp::train::StopSignals& signals) {
  const int rank = log.rank();
  CommandLine cli;
  ConfigDeck deck;
  // Parsed by every rank on its own, so that the deck's comm.timeout_s bounds even the first collective.
  std::optional<hsdp::Error> parse_error;
  try {
    deck = ConfigDeck::parse(argc, argv, cli);
  } catch (const hsdp::Error& e) {
    parse_error = e;
  }
  const double startup_limit_s = parse_error ? kStartupDefaultLimitS : deck.get_real("comm.timeout_s");
  std::optional<hsdp::StallPhase> startup(std::in_place, "start-up", startup_limit_s, "comm.timeout_s");
  hsdp::fault_point("startup", rank);
  {
    const hsdp::StallGuard op("agreeing on the deck");
    hsdp::comm::agree(MPI_COMM_WORLD, [&] {
      if (parse_error) throw *parse_error;
    });
  }
  if (cli.help) {
    log.info(hsdp::app::help_text("hsdp-train"));
    return hsdp::kExitOk;
  }
  if (cli.version) {
    log.info("hsdp-train ", HSDP_VERSION);
    return hsdp::kExitOk;
  }
  if (cli.print_config) {
    log.info(deck.to_ini());
    return hsdp::kExitOk;
  }

  hsdp::comm::CommOptions comm_options;
  comm_options.timeout_s = deck.get_real("comm.timeout_s");
  hsdp::comm::Topology topology;
  {
    const hsdp::StallGuard op("detecting the topology");
    hsdp::comm::agree(MPI_COMM_WORLD,
                      [&] { topology = hsdp::comm::detect_topology(MPI_COMM_WORLD, topology_options(deck)); });
  }
  hsdp::comm::MpiCommunicator world(hsdp::comm::MpiComm(MPI_COMM_WORLD), "world", topology.node_of_rank,
                                    comm_options, log);
  hsdp::train::TrainOptions options;
  std::unique_ptr<hsdp::comm::ProcessMesh> mesh;
  {
    const hsdp::StallGuard op("building the process mesh");
    hsdp::comm::agree(MPI_COMM_WORLD, [&] { options = train_options(deck); });
    hsdp::comm::agree(MPI_COMM_WORLD, [&] {
      mesh = std::make_unique<hsdp::comm::ProcessMesh>(
          world, topology,
          hsdp::shard::mesh_options(options.engine.strategy, options.engine.zeropp.hpz_partition_size));
    });
  }
  if (cli.print_mesh) {
    const std::string text = mesh->describe();
    log.info(text);
    return hsdp::kExitOk;
  }
  startup.reset();  // train() watches its own phases
  const auto summary = hsdp::train::train(options, *mesh, signals, log);
  return summary.stopped_by_signal ? hsdp::kExitRequeue : hsdp::kExitOk;
}

// An error only this rank has: the other ranks wait in some collective for this one. It is said here, on this rank,
// and the job ends at once (MPI_Abort), before unwinding: the destructors on the way (H5Fclose of a parallel file,
// MPI_Win_free) are collective and would wait for ranks that never come. main() catches only the errors every rank
// throws (AgreedError), so any other exception reaches this handler with the stack as it was at the throw.
[[noreturn]] void end_job_on_local_error() {
  int rank = 0;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized != 0 && !hsdp::comm::mpi_finalized()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const hsdp::Logger log(rank, hsdp::host_name());
  int code = hsdp::kExitInternal;
  try {
    if (const std::exception_ptr e = std::current_exception()) std::rethrow_exception(e);
    log.error("internal: terminate called without an exception");
  } catch (const hsdp::Error& e) {
    log.error(hsdp::to_string(e.kind()), ": ", e.what());
    code = e.exit_code();
  } catch (const std::exception& e) {
    log.error("internal: ", e.what());
  } catch (...) {
    log.error("internal: an exception that is not a std::exception");
  }
  hsdp::comm::MpiEnvironment::abort_job(code);
}

// The stall watch's verdict (on its own thread): rank 0 speaks at once; any other rank first gives rank 0 a moment,
// so the job ends with one diagnosis unless rank 0 is the rank that stalled.
void on_stall(const hsdp::Logger& log, const hsdp::StallReport& r) {
  if (!log.is_root()) std::this_thread::sleep_for(std::chrono::seconds(3));
  log.any_rank("watchdog: ", r.phase, ": ", r.operation, " did not finish within ", r.limit_s, " s (", r.limit_key,
               "): another rank is stopped or frozen, or the file system does not answer; aborting the job (exit ",
               hsdp::kExitComm, ")");
  hsdp::comm::MpiEnvironment::abort_job(hsdp::kExitComm);
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything collective: a SIGUSR1 or SIGTERM that lands during start-up is honoured at the first safe point.
  const hsdp::train::StopSignals signals;
  std::set_terminate(end_job_on_local_error);
  hsdp::comm::MpiEnvironment mpi(&argc, &argv);
  const hsdp::Logger log(mpi.world_rank(), hsdp::host_name());
  hsdp::set_stall_handler([&log](const hsdp::StallReport& r) { on_stall(log, r); });
  try {
    return run(argc, argv, log, signals);
  } catch (const hsdp::AgreedError& e) {
    // Every rank has this error; rank 0 says it once.
    if (log.is_root()) {
      // "training diverged at step ..." says what it is; the other kinds name themselves ("config error: ...").
      const std::string kind = e.kind() == hsdp::ErrorKind::diverged ? "" : std::string(hsdp::to_string(e.kind())) + " error: ";
      std::cerr << "hsdp-train: " << kind << e.what() << "\n";
    }
    return e.exit_code();
  }
}
