#include "hsdp/train/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "hsdp/comm/agree.hpp"
#include "hsdp/core/buffer.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/fault.hpp"
#include "hsdp/core/json.hpp"
#include "hsdp/core/memory.hpp"
#include "hsdp/core/stall.hpp"
#include "hsdp/core/timer.hpp"
#include "hsdp/data/sampler.hpp"
#include "hsdp/data/token_file.hpp"
#include "hsdp/device/blas_info.hpp"
#include "hsdp/device/threads.hpp"
#include "hsdp/model/layout.hpp"
#include "hsdp/shard/formulas.hpp"
#include "hsdp/optim/grad_clip.hpp"
#include "hsdp/optim/loss_scaler.hpp"
#include "hsdp/train/backend.hpp"
#include "hsdp/train/checkpointing.hpp"
#include "hsdp/train/cuda_backend.hpp"
#include "hsdp/train/metrics.hpp"
#include "hsdp/train/signals.hpp"

namespace hsdp::train {

namespace {

double read_entropy_rate(const std::string& path) {
  if (path.empty()) return -1;
  std::ifstream file(path);
  if (!file) throw_data("data.entropy_json: cannot open '" + path + "'");
  std::stringstream text;
  text << file.rdbuf();
  const std::string s = text.str();
  const std::string key = "\"entropy_nats_per_token\":";
  const auto at = s.find(key);
  if (at == std::string::npos) throw_data("data.entropy_json: '" + path + "' has no entropy_nats_per_token");
  return std::strtod(s.c_str() + at + key.size(), nullptr);
}

// device.threads = 0: share the node's cores among its ranks, within this rank's affinity mask.
// More threads than the node has hardware threads is a config error: it never helps, and thousands of threads on a
// few cores make every parallel region crawl (the job looks hung).
int threads_per_rank(int configured, const comm::Topology& topology) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (configured > cores) {
    throw_config("device.threads (" + std::to_string(configured) + ") exceeds the " + std::to_string(cores) +
                 " hardware threads of this node (host " + host_name() + "); use at most " + std::to_string(cores) +
                 ", or 0 to share the node's cores among its ranks");
  }
  if (configured > 0) return configured;
  const int share = std::max(1, cores / std::max(1, topology.node_size(topology.node())));
  return std::min(share, device::available_cores());
}

double global_mean(comm::Communicator& comm, double value) {
  comm.all_reduce(std::span<double>(&value, 1), comm::ReduceOp::avg);
  return value;
}

// Resuming on another number of ranks keeps the run's global batch (the checkpoint's tokens per step): train.grad_accum
// follows when micro_batch x seq_len x ranks divides it, else a config error listing what would.
int accumulation_for_resume(const ckpt::TrainState& s, const TrainOptions& o, int ranks, const Logger& log) {
  if (s.step <= 0 || s.world_size == ranks) return o.grad_accum;
  const std::int64_t saved = s.tokens / s.step;
  const std::int64_t per_micro_step = static_cast<std::int64_t>(o.micro_batch) * o.seq_len * ranks;
  if (per_micro_step * o.grad_accum == saved) return o.grad_accum;
  if (saved % per_micro_step == 0) {
    const auto k = static_cast<int>(saved / per_micro_step);
    log.info("resume: ", s.world_size, " -> ", ranks, " ranks: train.grad_accum ", o.grad_accum, " -> ", k,
             " keeps the run's global batch of ", saved, " tokens per step");
    return k;
  }
  // What would keep it: another micro_batch on these ranks, or another number of ranks with this micro_batch.
  std::string micro_batches, rank_counts;
  for (std::int64_t m = 1; m * o.seq_len * ranks <= saved && micro_batches.size() < 40; ++m) {
    if (saved % (m * o.seq_len * ranks) == 0) micro_batches += (micro_batches.empty() ? "" : ", ") + std::to_string(m);
  }
  for (std::int64_t r = 1; r * o.micro_batch * o.seq_len <= saved && rank_counts.size() < 40; ++r) {
    if (saved % (r * o.micro_batch * o.seq_len) == 0) rank_counts += (rank_counts.empty() ? "" : ", ") + std::to_string(r);
  }
  std::string choices;
  if (!micro_batches.empty()) choices += "set train.micro_batch to one of " + micro_batches + ", or ";
  if (!rank_counts.empty()) choices += "run on one of " + rank_counts + " ranks, or ";
  throw_config("resume: the checkpoint's run took " + std::to_string(saved) + " tokens per step on " +
               std::to_string(s.world_size) + " rank(s); on " + std::to_string(ranks) +
               " ranks micro_batch x seq_len x ranks = " + std::to_string(o.micro_batch) + " x " +
               std::to_string(o.seq_len) + " x " + std::to_string(ranks) + " = " + std::to_string(per_micro_step) +
               " does not divide it, so no train.grad_accum keeps the global batch: " + choices +
               "start a new run with checkpoint.resume=none");
}

// Bytes by link class this step: summed over every rank (what the job moved) and the busiest rank's. On world,
// whose counters are not the mesh's: it does not count itself.
struct JobBytes {
  comm::LinkBytes all_ranks, max_rank;
};
JobBytes job_bytes(comm::Communicator& world, const comm::LinkBytes& mine) {
  const double send[2] = {static_cast<double>(mine.intra), static_cast<double>(mine.inter)};
  std::vector<double> every(2 * static_cast<std::size_t>(world.size()));
  world.all_gather(send, every.data(), 2, DType::f64);
  JobBytes job;
  for (std::size_t r = 0; r < every.size(); r += 2) {
    const comm::LinkBytes theirs{static_cast<std::uint64_t>(every[r]), static_cast<std::uint64_t>(every[r + 1])};
    job.all_ranks += theirs;
    job.max_rank.intra = std::max(job.max_rank.intra, theirs.intra);
    job.max_rank.inter = std::max(job.max_rank.inter, theirs.inter);
  }
  return job;
}

// Whether any rank received a stop signal: agreed (an all-reduce), so every rank stops at the same point.
bool stop_agreed(comm::Communicator& world, const StopSignals& signals) {
  double stop = signals.requested() ? 1.0 : 0.0;
  world.all_reduce(std::span<double>(&stop, 1), comm::ReduceOp::sum);
  return stop > 0;
}

// The ranks that share this rank's host (and its memory): MPI_COMM_TYPE_SHARED, whatever nodes are emulated.
int ranks_on_host(MPI_Comm world) {
  MPI_Comm host = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
  int size = 1;
  MPI_Comm_size(host, &size);
  MPI_Comm_free(&host);
  return size;
}

std::string gib(double bytes) {
  std::ostringstream text;
  text.precision(3);
  text << bytes / double(1 << 30) << " GiB";
  return text.str();
}

// Before the model is allocated: the model state (shard::model_state_bytes) and activations
// (model::activation_bytes) this rank will hold, both exact for the CPU engine, against the memory its host has for
// it (host_memory_available() shared by the ranks on the host). What does not fit is a config error that names the
// keys that would make it fit, instead of std::bad_alloc half-way through building the model.
void check_memory_fits(const TrainOptions& o, const model::ModelLayout& layout, const comm::ProcessMesh& mesh,
                       int sharing) {
  const HostMemory host = host_memory_available();
  if (host.available == 0) return;  // nothing to compare with
  const double available = static_cast<double>(host.available) / sharing;
  const int world = mesh.topology().world_size;
  const auto state = [&](shard::Sharding s, int shard_size) {
    return static_cast<double>(shard::model_state_bytes(layout, s, shard_size, o.engine.param_dtype));
  };
  const auto activations = [&](std::int64_t micro_batch, bool checkpointing) {
    return static_cast<double>(
        model::activation_bytes(model::activation_shape(o.model), micro_batch, o.seq_len, checkpointing));
  };
  const double mine_state = state(o.engine.strategy, mesh.shard().size());
  const double mine_act = activations(o.micro_batch, o.activation_checkpointing);
  if (mine_state + mine_act <= available) return;

  std::vector<std::string> fixes;
  if (!o.activation_checkpointing && mine_state + activations(o.micro_batch, true) <= available) {
    fixes.push_back("train.activation_checkpointing=true");
  }
  for (const shard::Sharding s : {shard::Sharding::zero1, shard::Sharding::shard_grad_op, shard::Sharding::full_shard}) {
    if (s != o.engine.strategy && state(s, world) + mine_act <= available) {
      fixes.push_back("parallel.sharding=" + std::string(shard::to_string(s)));
      break;
    }
  }
  // Activations are linear in the micro-batch: the largest that fits.
  const double per_sequence = activations(1, o.activation_checkpointing);
  const auto fitting_batch = static_cast<std::int64_t>(
      std::min(static_cast<double>(o.micro_batch - 1), std::floor((available - mine_state) / per_sequence)));
  if (fitting_batch > 0) {
    fixes.push_back("train.micro_batch=" + std::to_string(fitting_batch) + " (with train.grad_accum to keep the batch)");
  }
  std::string advice;
  for (const std::string& f : fixes) advice += (advice.empty() ? "set " : ", or ") + f;
  if (state(shard::Sharding::full_shard, world) > available) {
    advice += std::string(advice.empty() ? "" : "; ") + "run on more ranks (full_shard over " + std::to_string(world) +
              " rank(s) still holds " + gib(state(shard::Sharding::full_shard, world)) + " of model state per rank)";
  }
  throw_config("memory: this rank needs at least " + gib(mine_state + mine_act) + " (model state " + gib(mine_state) +
               " with " + std::string(shard::to_string(o.engine.strategy)) + " over " +
               std::to_string(mesh.shard().size()) + " rank(s), activations " + gib(mine_act) + " for micro_batch " +
               std::to_string(o.micro_batch) + " x seq_len " + std::to_string(o.seq_len) + ") but has " +
               gib(available) + " (" + host.source + " of host " + host_name() + " / " + std::to_string(sharing) +
               " rank(s) on it): " + (advice.empty() ? "" : advice + "; ") +
               "`hsdp-plan --config <deck>` shows what fits");
}

// The last step whose loss was finite (step 0: none in this segment).
struct FiniteLoss {
  std::int64_t step = 0;
  double loss = 0;
};

std::string divergence_text(std::int64_t step, double loss, const FiniteLoss& last, const Checkpointer& checkpoints,
                            const TrainOptions& o) {
  std::ostringstream text;
  text.precision(6);
  text << "training diverged at step " << step << ": " << (std::isfinite(loss) ? "the gradient norm" : "the loss")
       << " is not finite (loss " << loss << "; ";
  if (last.step > 0) {
    text << "last finite loss " << last.loss << " at step " << last.step;
  } else {
    text << "no earlier step in this run";
  }
  text << "); no checkpoint of this step is written";
  if (const std::int64_t kept = checkpoints.latest_step(); kept > 0) {
    text << " (the last, step " << kept << ", is kept as it was)";
  }
  text << "; lower train.lr (" << o.schedule.lr << ") or check the data";
  return text.str();
}

}  // namespace

TrainSummary train(const TrainOptions& o, comm::ProcessMesh& mesh, const StopSignals& signals, const Logger& log) {
  comm::MpiCommunicator& world = mesh.mpi_world();
  // Every strategy is data-parallel over the whole world: each rank reads its own micro-batches.
  comm::Communicator& data_parallel = world;
  const int dp_rank = data_parallel.rank();
  const int dp_size = data_parallel.size();
  int thread_count = 1;
  comm::agree(world.raw(), [&] { thread_count = threads_per_rank(o.threads, mesh.topology()); });
  const device::ThreadCountScope threads(thread_count);

  MemoryAccountant memory;
  std::unique_ptr<model::ModelLayout> layout;
  std::unique_ptr<data::TokenFile> train_file, val_file;
  std::unique_ptr<data::Sampler> sampler;
  std::unique_ptr<data::EvalLoader> evaluator;
  std::unique_ptr<MetricsLog> metrics;
  double entropy_rate = -1;
  const int rank = world.rank();
  std::optional<StallPhase> startup(std::in_place, "start-up", o.comm.timeout_s, "comm.timeout_s");
  std::optional<StallGuard> startup_op(std::in_place, "opening the data");
  comm::agree(world.raw(), [&] {
    fault_point("data", rank);
    layout = std::make_unique<model::ModelLayout>(o.model);
    train_file = std::make_unique<data::TokenFile>(o.train_path, "data.train");
    train_file->validate_vocab(o.model.vocab_size);
    sampler = std::make_unique<data::Sampler>(*train_file, o.micro_batch, o.seq_len, dp_rank, dp_size, o.data_seed);
    if (o.eval_every > 0 || o.eval_only) {
      val_file = std::make_unique<data::TokenFile>(o.val_path, "data.val");
      val_file->validate_vocab(o.model.vocab_size);
      evaluator =
          std::make_unique<data::EvalLoader>(*val_file, o.micro_batch, o.seq_len, dp_rank, dp_size, o.eval_tokens);
    }
    entropy_rate = read_entropy_rate(o.entropy_json);
    if (log.is_root()) metrics = std::make_unique<MetricsLog>(o.log_dir);
  });

  std::unique_ptr<Backend> backend_holder;
  startup_op.emplace("building the model");
  const int sharing = ranks_on_host(world.raw());
  comm::agree(world.raw(), [&] {
    // The CPU engine's formulas; the CUDA backend's memory is its own (data-parallel only).
    if (o.device_type == device::DeviceType::cpu) check_memory_fits(o, *layout, mesh, sharing);
  });
  comm::agree(world.raw(), [&] {
    if (o.device_type == device::DeviceType::cuda) {
      check_cuda_options(o);
      backend_holder = make_cuda_backend(o, *layout, mesh, memory, log);
    } else {
      backend_holder = make_cpu_backend(o, *layout, mesh, memory, log);
    }
  });
  Backend& backend = *backend_holder;
  const bool fp16 = o.engine.param_dtype == DType::f16;
  optim::LossScaler scaler;
  const std::size_t tokens_per_micro = static_cast<std::size_t>(o.micro_batch) * o.seq_len;
  std::vector<std::int32_t> inputs(tokens_per_micro), targets(tokens_per_micro);
  int grad_accum = o.grad_accum;  // a resume on another number of ranks may change it (accumulation_for_resume)

  // The val loss over the evaluation set (the same windows on any number of ranks): per-position losses summed.
  auto evaluate = [&](std::int64_t at_step) {
    // Its collectives are the collective watchdog's: the phase only names them.
    const StallPhase phase("evaluation at step " + std::to_string(at_step), 0);
    fault_point("eval", rank);
    evaluator->reset();
    double sum = 0;
    for (std::uint64_t b = 0; b < evaluator->batch_count(); ++b) {
      const std::size_t rows = evaluator->next(inputs, targets);
      sum += backend.evaluate_loss_sum(inputs, targets, rows);
    }
    data_parallel.all_reduce(std::span<double>(&sum, 1), comm::ReduceOp::sum);
    return sum / static_cast<double>(evaluator->windows() * static_cast<std::uint64_t>(o.seq_len));
  };

  TrainSummary summary;
  summary.entropy_rate = entropy_rate;
  std::int64_t optimizer_steps = 0;  // AdamW's t: steps actually applied (fp16 overflow skips do not count)
  std::int64_t first_step = 0;
  std::int64_t tokens_seen = 0;
  Checkpointer checkpoints(o, mesh, backend, *layout, log);
  startup_op.reset();
  startup.reset();
  // Not inside agree(): its collectives are the ckpt layer's, which agrees on its own failures (AgreedError).
  const std::optional<ckpt::TrainState> resumed = checkpoints.resume();
  comm::agree(world.raw(), [&] {
    if (const auto& state = resumed) {
      first_step = state->step;
      tokens_seen = state->tokens;
      sampler->restore(state->sampler);
      scaler.restore(state->scaler);
      optimizer_steps = state->step - state->scaler.skipped_steps;
      summary.resumed_from_step = state->step;
      summary.earlier_seconds = state->train_seconds;
      summary.segments = state->segments + 1;
      grad_accum = accumulation_for_resume(*state, o, dp_size, log);
    }
    // eval_only leaves a training run's metrics.jsonl as it is.
    if (log.is_root() && !o.eval_only) metrics->keep_through_step(first_step);
  });
  const std::int64_t tokens_per_step = static_cast<std::int64_t>(tokens_per_micro) * grad_accum * dp_size;
  log.info("hsdp-train: ", layout->total_numel(), " parameters (", layout->num_units(), " units), ",
           mesh.topology().world_size, " rank(s), strategy ", shard::to_string(o.engine.strategy), " (param ",
           to_string(o.engine.param_dtype), ", reduce ", to_string(o.engine.reduce_dtype), "), ",
           tokens_per_step, " tokens per step (micro_batch ", o.micro_batch, " x seq_len ", o.seq_len,
           " x grad_accum ", grad_accum, " x ", dp_size, " data-parallel), ", thread_count,
           " thread(s) per rank");
  // After every input was checked (a bad input ends with its one line of error only).
  if (const std::string better = device::recommended_blas_coretype(); !better.empty()) {
    log.warn("OpenBLAS runs its ", device::blas_core_name(), " kernels: it does not recognise this CPU. GEMMs are "
             "several times faster with `export OPENBLAS_CORETYPE=", better, "` before launching (mpirun -x "
             "OPENBLAS_CORETYPE, or in the job script).");
  }
  std::int64_t end_step = o.stop_at_step > 0 ? std::min(o.stop_at_step, o.steps) : o.steps;
  if (o.eval_only) {
    summary.final_val_loss = evaluate(first_step);
    end_step = first_step;  // no training: straight to summary.json
    std::ostringstream line;
    line.precision(9);
    line << "eval only: val loss " << summary.final_val_loss << " over " << evaluator->windows() << " windows of "
         << o.seq_len << " tokens at step " << first_step;
    if (entropy_rate > 0) line << " | source entropy " << entropy_rate;
    log.info(line.str());
  }
  if (first_step >= end_step && !o.eval_only) {
    log.info("nothing to do: the checkpoint is at step ", first_step, " of ", end_step);
  }
  std::int64_t steps_done = first_step;  // the step the model is at
  FiniteLoss last_finite;
  // The first safe point: a stop requested during start-up or resume ends the run before its first step, with no
  // checkpoint (the model is the one the run started from: a fresh one, or the checkpoint it resumed).
  if (stop_agreed(world, signals) && first_step < end_step) {
    summary.stopped_by_signal = true;
    end_step = first_step;
    log.info("stop requested by a signal before the first step: nothing to checkpoint (the run is at step ",
             first_step, ", ", first_step > 0 ? "the checkpoint it resumed" : "a fresh start",
             "); exiting with code 3 (requeue me)");
  }
  Stopwatch run_clock;
  double timed_seconds = 0;
  std::int64_t timed_tokens = 0;
  for (std::int64_t step = first_step; step < end_step; ++step) {
    Stopwatch step_clock;
    mesh.reset_counters();
    backend.begin_step();
    const float loss_scale = fp16 ? scaler.scale() : 1.0f;
    double loss = 0;
    fault_point("step", rank);
    for (int micro = 0; micro < grad_accum; ++micro) {
      sampler->next(inputs, targets);
      loss += backend.forward_backward(inputs, targets, loss_scale / static_cast<float>(grad_accum),
                                       micro + 1 == grad_accum);
    }
    loss = global_mean(data_parallel, loss / grad_accum);
    const double lr = optim::learning_rate(o.schedule, step);
    optim::ClipResult clip;
    bool skipped = false;
    if (fp16 && scaler.update(backend.found_nonfinite())) {
      skipped = true;
      log.info("step ", step + 1, ": fp16 gradients overflowed; step skipped, loss scale now ", scaler.scale());
    } else {
      const double scale_squared = static_cast<double>(loss_scale) * loss_scale;
      clip = optim::clip_coefficient(backend.grad_norm_squared() / scale_squared, o.grad_clip);
      // The loss and the norm are all-reduced, so every rank sees the same: every rank throws, rank 0 says it.
      if (!clip.finite || !std::isfinite(loss)) throw comm::AgreedError(ErrorKind::diverged, divergence_text(step + 1, loss, last_finite, checkpoints, o));
      optimizer_steps += 1;
      const optim::AdamWStep update{static_cast<float>(lr), optimizer_steps, clip.coefficient / loss_scale};
      backend.optimizer_step(o.adamw, update);
    }
    const double comm_ms = backend.timing().comm_ms;

    StepMetrics m;
    m.step = step + 1;
    m.loss = loss;
    m.lr = lr;
    m.grad_norm = clip.norm;
    m.tokens = tokens_per_step;
    m.step_ms = step_clock.milliseconds();
    m.comm_ms = comm_ms;
    m.exposed_comm_ms = backend.timing().exposed_comm_ms;
    m.skipped = skipped;
    m.tokens_per_s = static_cast<double>(tokens_per_step) / (m.step_ms / 1e3);
    comm::LinkBytes mine = mesh.total_counters().total();
    mine += backend.own_bytes();
    const JobBytes job = job_bytes(world, mine);
    m.bytes = job.all_ranks;
    m.bytes_max_rank = job.max_rank;
    tokens_seen += tokens_per_step;
    if (step > first_step) {  // the first step pays for page faults and warm-up
      timed_seconds += m.step_ms / 1e3;
      timed_tokens += tokens_per_step;
    }
    const bool last = step + 1 == o.steps;
    if (evaluator && ((o.eval_every > 0 && m.step % o.eval_every == 0) || last)) {
      m.val_loss = evaluate(m.step);
      summary.final_val_loss = m.val_loss;
    }
    summary.final_loss = loss;
    last_finite = {m.step, loss};
    steps_done = m.step;
    if (log.is_root()) {
      metrics->write(to_json(m, memory));
      if (m.step == 1 || m.step % o.log_every == 0 || last) {
        const double per_step = run_clock.seconds() / static_cast<double>(m.step - first_step);
        log.info(progress_line(m, o.steps, memory, per_step * static_cast<double>(end_step - m.step)));
      }
      if (m.val_loss >= 0) {
        std::ostringstream line;
        line << "eval step " << m.step << " | val loss " << m.val_loss;
        if (entropy_rate > 0) line << " | source entropy " << entropy_rate << " (ratio " << m.val_loss / entropy_rate << ")";
        log.info(line.str());
      }
    }
    // Stop requests are agreed at the step boundary, so every rank checkpoints the same step.
    const bool stop = stop_agreed(world, signals);
    const bool end_of_run = m.step == end_step || stop;
    bool saved = false;
    if (checkpoints.enabled() && (end_of_run || checkpoints.due(m.step))) {
      saved = checkpoints.save({.step = m.step, .tokens = tokens_seen, .sampler = sampler->state(), .scaler = scaler.state(),
                        .deck_text = {}, .strategy = {}, .world_size = 0, .nodes = 0, .mesh = {},
                        .train_seconds = summary.earlier_seconds + run_clock.seconds(), .segments = summary.segments});
    }
    if (stop) {
      summary.stopped_by_signal = true;
      log.info("stop requested by a signal: ",
               saved                   ? "checkpointed"
               : checkpoints.enabled() ? "the checkpoint failed (checkpoint.on_error=continue), so NOT checkpointed"
                                       : "no checkpoint.dir, so NOT checkpointed",
               " at step ", m.step, "; exiting with code 3 (requeue me)");
      break;
    }
  }
  {
    // Every rank arrives before MPI_Finalize, under the collective watchdog, which names a rank that does not.
    const StallPhase phase("shutdown", o.comm.timeout_s, "comm.timeout_s");
    fault_point("shutdown", rank);
    world.barrier();
  }
  summary.steps = steps_done;
  summary.seconds = summary.earlier_seconds + run_clock.seconds();
  summary.tokens_per_s = timed_seconds > 0 ? static_cast<double>(timed_tokens) / timed_seconds : 0;

  if (log.is_root()) {
    JsonLine j;
    j.add("steps", summary.steps).add("final_loss", summary.final_loss);
    if (summary.final_val_loss >= 0) j.add("final_val_loss", summary.final_val_loss);
    if (entropy_rate > 0) j.add("entropy_rate", entropy_rate);
    // seconds: every segment of the run (each resume starts one), as steps counts every step.
    j.add("tokens_per_s", summary.tokens_per_s).add("seconds", summary.seconds);
    j.add("segment_seconds", summary.seconds - summary.earlier_seconds).add("segments", summary.segments);
    j.add("world_size", mesh.topology().world_size).add("nodes", mesh.topology().num_nodes());
    j.add("strategy", shard::to_string(o.engine.strategy));
    j.add("param_dtype", to_string(o.engine.param_dtype)).add("reduce_dtype", to_string(o.engine.reduce_dtype));
    j.add("params", static_cast<std::uint64_t>(layout->total_numel()));
    j.add_raw("memory_peak", [&] {
      JsonLine p;
      for (const MemCategory c : kAllMemCategories) p.add(to_string(c), memory.peak(c));
      p.add("total", memory.peak_total());
      return p.str();
    }());
    j.add("deck", o.deck_text);
    // eval_only never overwrites a training run's summary.json: its result has a file of its own.
    const std::string name = o.eval_only ? "eval_step_" + std::to_string(first_step) + ".json" : "summary.json";
    std::ofstream(metrics->dir() + "/" + name) << j.str() << "\n";
    log.info("done: ", summary.steps, " steps in ", format_duration(summary.seconds), ", ",
             static_cast<long long>(summary.tokens_per_s), " tokens/s; metrics in ", metrics->dir());
  }
  return summary;
}

}  // namespace hsdp::train
