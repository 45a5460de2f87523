// hsdp-train: parse the deck, build the mesh, train. Every rank runs this.
#include <iostream>

#include "hsdp/comm/agree.hpp"
#include "hsdp/app/options.hpp"
#include "hsdp/comm/mesh.hpp"
#include "hsdp/comm/mpi.hpp"
#include "hsdp/comm/topology.hpp"
#include "hsdp/core/log.hpp"
#include "hsdp/quant/blockwise.hpp"
#include "hsdp/shard/strategy.hpp"
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
  if (o.resume == "auto" && o.checkpoint_dir.empty()) o.resume = "none";
  o.log_dir = deck.get("log.dir");
  o.log_every = deck.get_int("log.every");
  o.deck_text = deck.to_ini(false);
  return o;
}

int run(int argc, char** argv, const hsdp::Logger& log) {
  CommandLine cli;
  ConfigDeck deck;
  hsdp::comm::agree(MPI_COMM_WORLD, [&] { deck = ConfigDeck::parse(argc, argv, cli); });
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
  hsdp::comm::agree(MPI_COMM_WORLD,
                   [&] { topology = hsdp::comm::detect_topology(MPI_COMM_WORLD, topology_options(deck)); });
  hsdp::comm::MpiCommunicator world(hsdp::comm::MpiComm(MPI_COMM_WORLD), "world", topology.node_of_rank,
                                    comm_options, log);
  hsdp::train::TrainOptions options;
  hsdp::comm::agree(MPI_COMM_WORLD, [&] { options = train_options(deck); });
  std::unique_ptr<hsdp::comm::ProcessMesh> mesh;
  hsdp::comm::agree(MPI_COMM_WORLD, [&] {
    mesh = std::make_unique<hsdp::comm::ProcessMesh>(
        world, topology, hsdp::shard::mesh_options(options.engine.strategy, options.engine.zeropp.hpz_partition_size));
  });
  if (cli.print_mesh) {
    const std::string text = mesh->describe();
    log.info(text);
    return hsdp::kExitOk;
  }
  const auto summary = hsdp::train::train(options, *mesh, log);
  return summary.stopped_by_signal ? hsdp::kExitRequeue : hsdp::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  hsdp::comm::MpiEnvironment mpi(&argc, &argv);
  const hsdp::Logger log(mpi.world_rank(), hsdp::host_name());
  try {
    return run(argc, argv, log);
  } catch (const hsdp::comm::AgreedError& e) {
    // Every rank has this error; rank 0 says it once.
    if (log.is_root()) std::cerr << "hsdp-train: " << hsdp::to_string(e.kind()) << " error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const hsdp::Error& e) {
    // Only this rank knows: say where, and end every rank so none waits forever.
    log.error(hsdp::to_string(e.kind()), ": ", e.what());
    hsdp::comm::MpiEnvironment::abort_job(e.exit_code());
  } catch (const std::exception& e) {
    log.error("internal: ", e.what());
    hsdp::comm::MpiEnvironment::abort_job(hsdp::kExitInternal);
  }
}
