#include "hsdp/train/trainer.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "hsdp/comm/agree.hpp"
#include "hsdp/comm/topology.hpp"
#include "hsdp/core/buffer.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/fault.hpp"
#include "hsdp/core/files.hpp"
#include "hsdp/core/json.hpp"
#include "hsdp/core/memory.hpp"
#include "hsdp/core/stall.hpp"
#include "hsdp/core/timer.hpp"
#include "hsdp/data/sampler.hpp"
#include "hsdp/data/token_file.hpp"
#include "hsdp/data/tokenizer.hpp"
#include "hsdp/device/blas_info.hpp"
#include "hsdp/device/threads.hpp"
#include "hsdp/model/flops.hpp"
#include "hsdp/model/gpu_activations.hpp"
#include "hsdp/model/layout.hpp"
#include "hsdp/optim/grad_clip.hpp"
#include "hsdp/optim/loss_scaler.hpp"
#include "hsdp/shard/formulas.hpp"
#include "hsdp/shard/outer.hpp"
#include "hsdp/train/backend.hpp"
#include "hsdp/train/checkpointing.hpp"
#include "hsdp/train/cuda_backend.hpp"
#include "hsdp/train/memory_check.hpp"
#include "hsdp/train/metrics.hpp"
#include "hsdp/train/replicas.hpp"
#include "hsdp/train/signals.hpp"

namespace hsdp::train {

namespace {

// hsdp-data synth's source.json: "entropy_nats_per_token": a finite number >= 0 (anything else is a data Error: a
// wrong entropy rate would make every "x the entropy rate" figure of the run wrong).
double read_entropy_rate(const std::string& path) {
  if (path.empty()) return -1;
  require_regular_input(path, "data.entropy_json");  // a FIFO would block the open until the start-up watchdog
  std::ifstream file(path);
  if (!file) throw_data("data.entropy_json: cannot open '" + path + "'");
  std::stringstream text;
  text << file.rdbuf();
  const std::string s = text.str();
  const std::string key = "\"entropy_nats_per_token\"";
  auto at = s.find(key);
  if (at == std::string::npos) throw_data("data.entropy_json: '" + path + "' has no entropy_nats_per_token");
  at = s.find_first_not_of(" \t\r\n", at + key.size());
  if (at != std::string::npos && s[at] == ':') at = s.find_first_not_of(" \t\r\n", at + 1);
  const char* begin = at == std::string::npos ? s.c_str() + s.size() : s.c_str() + at;
  char* end = nullptr;
  const double rate = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(rate) || rate < 0) {
    const std::string shown = std::string(begin, std::min<std::size_t>(std::strcspn(begin, ",}\n"), 40));
    throw_data("data.entropy_json: '" + path + "': entropy_nats_per_token is '" + shown +
               "', not a finite number >= 0 (hsdp-data synth writes it)");
  }
  return rate;
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

// The global batch of the checkpoint's last segment: recorded since 2026-11-29; before, the run's mean (tokens / step),
// which is the same unless an accepted change of the global batch came before.
std::int64_t saved_tokens_per_step(const ckpt::TrainState& s) {
  return s.tokens_per_step > 0 ? s.tokens_per_step : s.tokens / s.step;
}

// A resume keeps the run's global batch (the checkpoint's tokens per step): on another number of ranks, or on the same
// after a segment that changed train.grad_accum (a run resumed on fewer ranks, then requeued on as many),
// train.grad_accum follows when micro_batch x seq_len x ranks divides it, else a config error listing what would. A
// deck that sets another train.grad_accum than the checkpoint's deck, or another train.micro_batch on the same ranks,
// asks for it: check_resume_changes then refuses another global batch unless checkpoint.accept_changes.
int accumulation_for_resume(const ckpt::TrainState& s, const TrainOptions& o, int ranks, const Logger& log) {
  if (s.step <= 0) return o.grad_accum;
  for (const DeckChange& c : deck_changes(s.deck_text, o.deck_text)) {
    if (c.key == "train.grad_accum" || (c.key == "train.micro_batch" && s.world_size == ranks)) return o.grad_accum;
  }
  const std::int64_t saved = saved_tokens_per_step(s);
  const std::int64_t per_micro_step = static_cast<std::int64_t>(o.micro_batch) * o.seq_len * ranks;
  if (per_micro_step * o.grad_accum == saved) return o.grad_accum;
  if (saved % per_micro_step == 0) {
    const auto k = static_cast<int>(saved / per_micro_step);
    const std::string resume =
        s.world_size == ranks ? "resume on " + std::to_string(ranks) + " ranks"
                              : "resume: " + std::to_string(s.world_size) + " -> " + std::to_string(ranks) + " ranks";
    log.info(resume, ": train.grad_accum ", o.grad_accum, " -> ", k, " keeps the run's global batch of ", saved,
             " tokens per step");
    return k;
  }
  // checkpoint.accept_changes: the deck's grad_accum, and another global batch (check_resume_changes says it).
  if (o.checkpoint_accept_changes) return o.grad_accum;
  // What would keep it: another micro_batch on these ranks, or another number of ranks with this micro_batch.
  std::string micro_batches, rank_counts;
  for (std::int64_t m = 1; m * o.seq_len * ranks <= saved && micro_batches.size() < 40; ++m) {
    if (saved % (m * o.seq_len * ranks) == 0) micro_batches += (micro_batches.empty() ? "" : ", ") + std::to_string(m);
  }
  for (std::int64_t r = 1; r * o.micro_batch * o.seq_len <= saved && rank_counts.size() < 40; ++r) {
    if (saved % (r * o.micro_batch * o.seq_len) == 0)
      rank_counts += (rank_counts.empty() ? "" : ", ") + std::to_string(r);
  }
  std::string choices;
  if (!micro_batches.empty()) choices += "set train.micro_batch to one of " + micro_batches + ", or ";
  if (!rank_counts.empty()) choices += "run on one of " + rank_counts + " ranks, or ";
  choices += "set checkpoint.accept_changes=true to train on with another global batch, or ";
  throw_config("resume: the checkpoint's run took " + std::to_string(saved) + " tokens per step on " +
               std::to_string(s.world_size) + " rank(s); on " + std::to_string(ranks) +
               " ranks micro_batch x seq_len x ranks = " + std::to_string(o.micro_batch) + " x " +
               std::to_string(o.seq_len) + " x " + std::to_string(ranks) + " = " + std::to_string(per_micro_step) +
               " does not divide it, so no train.grad_accum keeps the global batch: " + choices +
               "start a new run with checkpoint.resume=none");
}

// A resume with a deck other than the checkpoint's says each difference in one line (rank 0). Those that change what
// is trained (the training data and its order, the global batch) are a config error naming them unless
// checkpoint.accept_changes=true; another model shape never loads. The keys that say how this segment runs (resume,
// stop_at_step, ...) are not said.
void check_resume_changes(const ckpt::TrainState& s, const TrainOptions& o, std::int64_t tokens_per_step,
                          std::uint64_t data_windows, const Logger& log) {
  // What orders the windows (data/sampler.hpp) and which of them this job reads: under another value the saved
  // position would continue another stream.
  static const std::vector<std::string> kDataOrderKeys = {"data.train", "train.seq_len", "train.seed", "data.part"};
  if (s.deck_text.empty() || s.step <= 0) return;  // an imported model (step 0) has no run to continue
  std::vector<std::string> trained;                // differences in what is trained
  for (const DeckChange& c : deck_changes(s.deck_text, o.deck_text)) {
    const std::string line = c.key + " = " + c.now + " (the checkpoint's run: " + c.saved + ")";
    // The exchange in flight at the save is applied to its fragment's units, which outer.fragments decides: under
    // another count they are other units (the shift it saved would land on the wrong ones, or on none).
    if (c.key == "outer.fragments" && s.islands > 1 && o.islands > 1 && s.outer_in_flight >= 0) {
      throw_config("resume: " + line + ", but the checkpoint was saved with the outer exchange of fragment " +
                   std::to_string(s.outer_in_flight) + " in flight (applied at step " +
                   std::to_string(s.outer_apply_step) + "): resume with outer.fragments = " + c.saved +
                   ", or change it from a checkpoint saved with no exchange in flight (outer.overlap = 0, or a step "
                   "at least outer.overlap after a fragment's exchange started)");
    }
    // A model of another shape does not load (the ckpt layer says so); the seed and the vocabulary's padding are said.
    if (std::find(kDataOrderKeys.begin(), kDataOrderKeys.end(), c.key) != kDataOrderKeys.end()) {
      trained.push_back(line);
    } else {
      log.info("resume: ", line);
    }
  }
  if (s.data_windows > 0 && s.data_windows != data_windows) {  // the files changed under the same data.train
    trained.push_back("the training data holds " + std::to_string(data_windows) + " windows of train.seq_len + 1 " +
                      "tokens (the checkpoint's run: " + std::to_string(s.data_windows) + ")");
  }
  const std::int64_t saved_tokens = saved_tokens_per_step(s);
  if (saved_tokens != tokens_per_step) {
    trained.push_back("global batch " + std::to_string(tokens_per_step) +
                      " tokens per step (the checkpoint's run: " + std::to_string(saved_tokens) + ")");
  }
  if (trained.empty()) return;
  std::string list;
  for (const auto& t : trained) list += (list.empty() ? "" : "; ") + t;
  if (o.checkpoint_accept_changes || o.eval_only) {  // an evaluation trains nothing
    log.warn("resume: continuing with what is trained changed", o.eval_only ? "" : " (checkpoint.accept_changes=true)",
             ": ", list);
    return;
  }
  throw_config("resume: this deck changes what the checkpoint's run trained: " + list +
               ". Set checkpoint.accept_changes=true to continue with the change, or start a new run "
               "(another checkpoint.dir, or checkpoint.resume=none)");
}

// Empty where a resume from `s` continues the record in this run's log.dir: the checkpoint's run kept its record in
// the same folder (its deck's log.dir, compared as an absolute path with symbolic links resolved, so also where it is
// written otherwise; a relative one is taken from this run's working directory, as a requeued job's is). Else why
// not, for guard_log_dir's message: an imported model (step 0) continues no run, and a checkpoint of a run that
// logged elsewhere continues that run's record, not the one here.
std::string record_continued(const ckpt::TrainState& s, const TrainOptions& o) {
  if (s.step <= 0) return "it resumed from an imported model, step 0, which continues no run";
  namespace fs = std::filesystem;
  const auto folder = [](const std::string& path) {  // symbolic links resolved, "runs/a/" is "runs/a"
    std::error_code ec;
    fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec).lexically_normal();
    return p.has_filename() ? p : p.parent_path();
  };
  for (const DeckChange& c : deck_changes(s.deck_text, o.deck_text)) {
    if (c.key == "log.dir" && folder(c.saved) != folder(c.now)) {
      return "it resumed from a checkpoint of the run whose log.dir was '" + c.saved + "'";
    }
  }
  return {};
}

// The host names of the job's nodes, in node order (each node's first rank's MPI_Get_processor_name), on rank 0.
std::vector<std::string> host_names(MPI_Comm world, const comm::Topology& topo) {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  std::vector<char> all(static_cast<std::size_t>(topo.world_size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, world);
  std::vector<std::string> hosts;
  if (topo.world_rank != 0) return hosts;
  for (int node = 0; node < topo.num_nodes(); ++node) {
    const int first = topo.ranks_on_node(node).front();
    std::string host(&all[static_cast<std::size_t>(first) * MPI_MAX_PROCESSOR_NAME]);
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);  // emulated nodes share one
  }
  return hosts;
}

// The batch system's job id, if any (Slurm, PBS, LSF), with the array task for a Slurm array.
std::string batch_job_id() {
  for (const char* var : {"SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID"}) {
    if (const char* id = std::getenv(var); id != nullptr && *id != '\0') {
      std::string job = id;
      if (const char* task = std::getenv("SLURM_ARRAY_TASK_ID");
          task != nullptr && *task != '\0' && std::string(var) == "SLURM_JOB_ID") {
        job += "_" + std::string(task);
      }
      return job;
    }
  }
  return "";
}

// Bytes by link class this step: summed over every rank (what the job moved) and the busiest rank's; and the bytes
// of the outer exchange (islands), summed over every rank (a rank's shard, and so its message, can be shorter than
// another's). On world, whose counters are not the mesh's: it does not count itself.
struct JobBytes {
  comm::LinkBytes all_ranks, max_rank;
  std::uint64_t outer_all_ranks = 0;
};
JobBytes job_bytes(comm::Communicator& world, const comm::LinkBytes& mine, std::uint64_t outer_mine) {
  constexpr std::size_t kValues = 3;
  const double send[kValues] = {static_cast<double>(mine.intra), static_cast<double>(mine.inter),
                                static_cast<double>(outer_mine)};
  std::vector<double> every(kValues * static_cast<std::size_t>(world.size()));
  world.all_gather(send, every.data(), kValues, DType::f64);
  JobBytes job;
  for (std::size_t r = 0; r < every.size(); r += kValues) {
    const comm::LinkBytes theirs{static_cast<std::uint64_t>(every[r]), static_cast<std::uint64_t>(every[r + 1])};
    job.all_ranks += theirs;
    job.max_rank.intra = std::max(job.max_rank.intra, theirs.intra);
    job.max_rank.inter = std::max(job.max_rank.inter, theirs.inter);
    job.outer_all_ranks += static_cast<std::uint64_t>(every[r + 2]);
  }
  return job;
}

// Whether any rank received a stop signal: agreed (an all-reduce), so every rank stops at the same point.
bool stop_agreed(comm::Communicator& world, const StopSignals& signals) {
  double stop = signals.requested() ? 1.0 : 0.0;
  world.all_reduce(std::span<double>(&stop, 1), comm::ReduceOp::sum);
  return stop > 0;
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
  text << "training diverged at step " << step << ": " << (std::isfinite(loss) ? "the gradients are" : "the loss is")
       << " not finite (loss " << loss << "; ";
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

// One run of hsdp-train on this rank, phase by phase (train() below reads as the list of them). Every phase that can
// fail on one rank only agrees on it (comm::agree), so every rank ends with the same error.
class Run {
 public:
  Run(const TrainOptions& o, comm::ProcessMesh& mesh, const StopSignals& signals, const Logger& log)
      : o_(o),
        mesh_(mesh),
        signals_(signals),
        log_(log),
        world_(mesh.mpi_world()),
        island_(mesh.island()),
        rank_(world_.rank()),
        grad_accum_(o.grad_accum) {}

  // Start-up (watched as one phase by comm.startup_timeout_s): threads, the data files and the model's backend.
  void start_up() {
    const StallPhase startup("start-up", o_.comm.startup_timeout_s, "comm.startup_timeout_s", rank_ == 0);
    comm::agree(world_.raw(), [&] { thread_count_ = threads_per_rank(o_.threads, mesh_.topology()); });
    threads_.emplace(thread_count_);
    rank_hosts_ = rank_host_names(world_);
    {
      const StallGuard op("opening the data");
      open_data();
    }
    const StallGuard op("building the model");
    build_backend();
    if (mesh_.islands() > 1) {
      outer_ = std::make_unique<shard::OuterOptimizer>(o_.outer, mesh_.outer(), *layout_,
                                                       backend_->checkpoint_shards(), memory_);
      outer_->reset(backend_->checkpoint_shards());
    }
    hosts_ = host_names(world_.raw(), mesh_.world_topology());
    if (o_.replicas_every > 0) replicas_ = std::make_unique<ReplicaChecker>(world_, *layout_, rank_hosts_);
  }

  // The checkpoint checkpoint.resume names, if any: the model, the data order, the loss scale, the step.
  void resume() {
    checkpoints_ = std::make_unique<Checkpointer>(o_, mesh_, *backend_, *layout_, outer_.get(), log_);
    // Not inside agree(): its collectives are the ckpt layer's, which agrees on its own failures (AgreedError).
    const std::optional<ckpt::TrainState> resumed = checkpoints_->resume();
    // Rank 0 reads and may cut back the run's record while the others wait in agree's all-reduce: watched, so that a
    // file system that stops answering ends the job instead of holding every rank.
    const StallPhase phase("resume", o_.checkpoint_timeout_s, "checkpoint.timeout_s");
    const StallGuard op("checking the resume against the deck and the run's record in " + o_.log_dir);
    comm::agree(world_.raw(), [&] {
      fault_point("record", rank_);
      if (const auto& state = resumed) {
        first_step_ = state->step;
        tokens_seen_ = state->tokens;
        sampler_->restore(state->sampler);
        scaler_.restore(state->scaler);
        optimizer_steps_ = state->step - state->scaler.skipped_steps;
        summary_.resumed_from_step = state->step;
        summary_.earlier_seconds = state->train_seconds;
        summary_.segments = state->segments + 1;
        if (state->tokenizer != tokenizer_) {
          throw_config("resume: the checkpoint's run was trained on token ids of tokenizer " + state->tokenizer +
                       ", this deck's data.tokenizer is " +
                       (o_.tokenizer.empty() ? std::string("empty (bytes)") : "'" + o_.tokenizer + "' (" + tokenizer_ + ")") +
                       ": the ids would mean other text. Give data.tokenizer the run's model file, or start a new run "
                       "(another checkpoint.dir, or checkpoint.resume=none)");
        }
        grad_accum_ = accumulation_for_resume(*state, o_, world_.size(), log_);
        sampler_->set_micro_batches(grad_accum_);  // the same global batch, split another way
        check_resume_changes(*state, o_, static_cast<std::int64_t>(tokens_per_micro()) * grad_accum_ * world_.size(),
                             sampler_->window_count(), log_);
      }
      if (log_.is_root()) guard_log_dir(resumed ? record_continued(*resumed, o_) : "it resumed from no checkpoint");
      // eval_only leaves a training run's metrics.jsonl as it is.
      if (log_.is_root() && !o_.eval_only) metrics_->keep_through_step(first_step_);
    });
    tokens_per_step_ = static_cast<std::int64_t>(tokens_per_micro()) * grad_accum_ * world_.size();
    steps_done_ = first_step_;
    end_step_ = o_.stop_at_step > 0 ? std::min(o_.stop_at_step, o_.steps) : o_.steps;
  }

  // A run's record (metrics.jsonl, summary.json) is replaced only by the run that continues it (a resume from its
  // checkpoints: `not_continued` empty), by a run told to start over (log.overwrite=true, or checkpoint.overwrite=true:
  // its checkpoints go too): another run is refused with one line that says why this run does not continue it
  // (`not_continued`) and the way out (train.eval_only writes eval_step_<N>.json beside it and touches neither).
  // Rank 0.
  void guard_log_dir(const std::string& not_continued) const {
    if (not_continued.empty() || o_.eval_only || o_.log_overwrite || o_.checkpoint_overwrite) return;
    namespace fs = std::filesystem;
    const fs::path dir(o_.log_dir);
    std::error_code ec;
    const bool metrics = fs::exists(dir / "metrics.jsonl", ec);
    const bool summary = fs::exists(dir / "summary.json", ec);
    if (!metrics && !summary) return;
    std::string held;
    if (metrics) {
      std::ifstream in(dir / "metrics.jsonl");
      std::int64_t lines = 0;
      for (std::string line; std::getline(in, line);) ++lines;
      held = "metrics.jsonl with " + std::to_string(lines) + " step(s)";
    }
    if (summary) held += std::string(held.empty() ? "" : " and ") + "summary.json";
    throw_config("log.dir '" + o_.log_dir + "' holds another run's record (" + held +
                 ") and this run does not continue it (" + not_continued +
                 "): give this run a log.dir of its own, or set log.overwrite=true to replace the record");
  }

  // What runs, on rank 0: the model, the ranks, the strategy, the batch; a BLAS that does not know this CPU.
  void announce() const {
    log_.info("hsdp-train: ", layout_->total_numel(), " parameters (", layout_->num_units(), " units), ",
              world_.size(), " rank(s), strategy ", shard::to_string(o_.engine.strategy), " (param ",
              to_string(o_.engine.param_dtype), ", reduce ", to_string(o_.engine.reduce_dtype), "), ", tokens_per_step_,
              " tokens per step (micro_batch ", o_.micro_batch, " x seq_len ", o_.seq_len, " x grad_accum ",
              grad_accum_, " x ", world_.size(), " data-parallel), ", thread_count_, " thread(s) per rank");
    if (mesh_.islands() > 1) {
      const shard::OuterOptions& q = o_.outer;
      log_.info("islands: ", mesh_.islands(), " islands of ", island_.size(), " rank(s), each ",
                shard::to_string(o_.engine.strategy), " over its own ranks; outer step every ", q.inner_steps,
                " steps", q.fragments > 1 ? " per fragment (" + std::to_string(q.fragments) + " fragments, one every " +
                                                std::to_string(q.inner_steps / q.fragments) + " steps)"
                                          : std::string(),
                ": lr ", q.lr, ", Nesterov momentum ", q.momentum, ", pseudo-gradients in ",
                q.bits == 32 ? std::string("fp32") : q.bits == 16 ? std::string("bf16")
                                                                   : "int" + std::to_string(q.bits),
                q.bits < 32 ? (q.error_feedback ? " with error feedback" : " without error feedback") : "",
                q.overlap > 0 ? ", each exchange overlapped with the next " + std::to_string(q.overlap) + " inner steps"
                              : std::string());
    }
    // After every input was checked (a bad input ends with its one line of error only).
    if (const std::string better = device::recommended_blas_coretype(); !better.empty()) {
      log_.warn("OpenBLAS runs its ", device::blas_core_name(),
                " kernels: it does not recognise this CPU. GEMMs are "
                "several times faster with `export OPENBLAS_CORETYPE=",
                better,
                "` before launching (mpirun -x "
                "OPENBLAS_CORETYPE, or in the job script).");
    }
  }

  // train.eval_only: the val loss of the model as it is, and no training.
  void evaluate_only() {
    summary_.final_val_loss = evaluate(first_step_);
    summary_.final_val_loss_step = first_step_;
    end_step_ = first_step_;            // no training: straight to the summary
    if (summary_.final_val_loss < 0) {  // stopped by a signal: nothing measured, run it again
      summary_.stopped_by_signal = true;
      return;
    }
    std::ostringstream line;
    line.precision(9);
    line << "eval only: val loss " << summary_.final_val_loss << " over " << evaluator_->windows() << " windows of "
         << o_.seq_len << " tokens at step " << first_step_;
    if (entropy_rate_ > 0) line << " | source entropy " << entropy_rate_;
    log_.info(line.str());
  }

  // The steps from the checkpoint's (or 0) to train.stop_at_step or train.steps, or to an agreed stop request.
  void train_steps() {
    if (first_step_ >= end_step_ && !o_.eval_only) {
      log_.info("nothing to do: the checkpoint is at step ", first_step_, " of ", end_step_);
    }
    // The first safe point: a stop requested during start-up or resume ends the run before its first step, with no
    // checkpoint (the model is the one the run started from: a fresh one, or the checkpoint it resumed).
    if (stop_agreed(world_, signals_) && first_step_ < end_step_) {
      summary_.stopped_by_signal = true;
      summary_.resumable = checkpoints_->enabled();
      end_step_ = first_step_;
      log_.info("stop requested by a signal before the first step: nothing to checkpoint (the run is at step ",
                first_step_, ", ", first_step_ > 0 ? "the checkpoint it resumed" : "a fresh start", "); ", exit_line());
    }
    run_clock_.restart();
    if (first_step_ < end_step_) {  // the state the run starts from
      if (const std::string fault = fault_action("update=" + std::to_string(first_step_), rank_); !fault.empty()) {
        inject_flip(fault, first_step_);
      }
      check_replicas(first_step_);
    }
    for (std::int64_t step = first_step_; step < end_step_; ++step) {
      StepMetrics m = train_step(step);
      const bool last = m.step == o_.steps;
      if (evaluator_ && ((o_.eval_every > 0 && m.step % o_.eval_every == 0) || last)) {
        m.val_loss = evaluate(m.step);
        if (m.val_loss >= 0) {
          summary_.final_val_loss = m.val_loss;
          summary_.final_val_loss_step = m.step;
        }
      }
      report(m, last);
      if (checkpoint_or_stop(m.step)) break;
    }
    // The last AdamW, not waited for by its step: done (or its error thrown) before the run reports success.
    backend_->synchronize();
    // An outer exchange still in flight completes here (its checkpoint, if one was written, holds its shift), so
    // that no collective is open at shutdown.
    if (outer_) outer_->settle();
  }

  // Every rank arrives before MPI_Finalize, under the collective watchdog, which names a rank that does not.
  void shut_down() {
    {
      const StallPhase phase("shutdown", o_.comm.timeout_s, "comm.timeout_s");
      fault_point("shutdown", rank_);
      world_.barrier();
    }
    summary_.steps = steps_done_;
    summary_.ended = summary_.stopped_by_signal
                         ? (o_.eval_only         ? "eval_only, stopped by a signal (exit 3)"
                            : summary_.resumable ? "stopped by a signal: requeue (exit 3)"
                                                 : "stopped by a signal, no checkpoint.dir (exit 6)")
                     : o_.eval_only            ? "eval_only"
                     : steps_done_ >= o_.steps ? (first_step_ >= o_.steps ? "nothing to do: the checkpoint was at "
                                                                            "train.steps"
                                                                          : "train.steps reached")
                                               : "train.stop_at_step reached";
    summary_.seconds = summary_.earlier_seconds + run_clock_.seconds();
    summary_.tokens_per_s = timed_seconds_ > 0 ? static_cast<double>(timed_tokens_) / timed_seconds_ : 0;
  }

  // summary.json (eval_step_<N>.json for eval_only) and the last line, on rank 0.
  void write_summary() const {
    if (!log_.is_root()) return;
    // The other ranks wait in MPI_Finalize meanwhile: a write that stalls ends the job.
    const StallPhase phase("shutdown", o_.comm.timeout_s, "comm.timeout_s");
    const StallGuard op("writing " + o_.log_dir + "/summary.json");
    fault_point("summary", rank_);
    JsonLine j;
    j.add("steps", summary_.steps).add("ended", summary_.ended);
    j.add("resumed_from_step", summary_.resumed_from_step).add("segment_steps", summary_.steps - first_step_);
    j.add("final_loss", summary_.final_loss);
    if (summary_.final_val_loss >= 0) {
      j.add("final_val_loss", summary_.final_val_loss).add("final_val_loss_step", summary_.final_val_loss_step);
    }
    if (entropy_rate_ > 0) j.add("entropy_rate", entropy_rate_);
    // seconds: every segment of the run (each resume starts one), as steps counts every step.
    j.add("tokens_per_s", summary_.tokens_per_s).add("seconds", summary_.seconds);
    j.add("segment_seconds", summary_.seconds - summary_.earlier_seconds).add("segments", summary_.segments);
    j.add("world_size", world_.size()).add("nodes", mesh_.world_topology().num_nodes());
    if (outer_) {
      const shard::OuterOptions& q = o_.outer;
      j.add("islands", mesh_.islands()).add("inner_steps", q.inner_steps).add("outer_bits", q.bits);
      j.add("outer_fragments", q.fragments).add("outer_overlap", q.overlap);
      j.add("outer_exchanges", summary_.outer_exchanges);
      j.add("outer_bytes", summary_.outer_bytes).add("outer_exposed_ms", summary_.outer_exposed_ms);
    }
    j.add("replicas_every", o_.replicas_every).add("replica_checks", summary_.replica_checks);
    j.add("replica_check_ms", summary_.replica_check_ms);
    j.add("strategy", shard::to_string(o_.engine.strategy));
    j.add("param_dtype", to_string(o_.engine.param_dtype)).add("reduce_dtype", to_string(o_.engine.reduce_dtype));
    j.add("params", static_cast<std::uint64_t>(layout_->total_numel()));
    j.add("version", HSDP_VERSION);
    j.add_raw("hosts", [&] {
      std::string list;
      for (const std::string& h : hosts_) list += (list.empty() ? "" : ",") + JsonLine::quote(h);
      return "[" + list + "]";
    }());
    if (const std::string job = batch_job_id(); !job.empty()) j.add("job_id", job);
    j.add_raw("memory_peak", [&] {
      JsonLine p;
      for (const MemCategory c : kAllMemCategories) p.add(to_string(c), memory_.peak(c));
      p.add("total", memory_.peak_total());
      return p.str();
    }());
    j.add("deck", o_.deck_text);
    // eval_only never overwrites a training run's summary.json: its result has a file of its own.
    const std::string name = o_.eval_only ? "eval_step_" + std::to_string(first_step_) + ".json" : "summary.json";
    // Through a temporary file renamed over the last segment's summary: a full disk leaves that one as it was.
    if (std::string reason; !try_write_file_atomically(metrics_->dir() + "/" + name, j.str() + "\n", &reason)) {
      // Checkpoints hold the model; what is lost is the run's record: said, and exit 2.
      throw_data("log.dir: cannot write '" + metrics_->dir() + "/" + name + "' after " +
                 std::to_string(summary_.steps) + " steps (final loss " + std::to_string(summary_.final_loss) + "; " +
                 reason + ")");
    }
    const auto steps = [](std::int64_t n) { return std::to_string(n) + (n == 1 ? " step" : " steps"); };
    // tokens/s counts the steps after the first (it pays for page faults and warm-up).
    const std::string speed = summary_.tokens_per_s > 0
                                  ? std::to_string(static_cast<long long>(summary_.tokens_per_s)) + " tokens/s"
                                  : std::string("no tokens/s (measured from the second step of a segment on)");
    if (o_.eval_only) {
      log_.info("done: evaluated the model of step ", first_step_, " in ", format_duration(summary_.seconds -
                summary_.earlier_seconds), " (train.eval_only: nothing trained); ", summary_.ended, "; result in ",
                metrics_->dir(), "/", name);
    } else if (first_step_ > 0) {  // a resumed run: this segment's steps, and where the run is
      log_.info("done: ", steps(summary_.steps - first_step_), " in this run (", first_step_, " -> ", summary_.steps,
                " of ", o_.steps, ") in ", format_duration(summary_.seconds - summary_.earlier_seconds), ", ", speed,
                "; ", summary_.ended, "; metrics in ", metrics_->dir());
    } else {
      log_.info("done: ", steps(summary_.steps), " in ", format_duration(summary_.seconds), ", ", speed, "; ",
                summary_.ended, "; metrics in ", metrics_->dir());
    }
  }

  const TrainSummary& summary() const { return summary_; }

 private:
  std::size_t tokens_per_micro() const { return static_cast<std::size_t>(o_.micro_batch) * o_.seq_len; }

  // Whether any island says yes (each island's ranks agree already): the islands decide together.
  bool any_island(bool mine) {
    if (mesh_.islands() == 1) return mine;
    double flag = mine ? 1.0 : 0.0;
    mesh_.outer().all_reduce(std::span<double>(&flag, 1), comm::ReduceOp::sum);
    return flag > 0;
  }

  void open_data() {
    // Every rank reads its own slice of each global batch: island i's ranks the i-th n of the N*n slices (islands of
    // n ranks), so that the islands together read what the synchronous job reads; data.part I/N reads the I-th n.
    const int dp_rank = o_.data_part * world_.size() + mesh_.island_index() * island_.size() + island_.rank();
    const int dp_size = o_.data_parts * world_.size();
    comm::agree(world_.raw(), [&] {
      fault_point("data", rank_);
      layout_ = std::make_unique<model::ModelLayout>(o_.model);
      train_file_ = std::make_unique<data::TokenShards>(data::TokenShards::open(o_.train_path, "data.train"));
      train_file_->validate_vocab(o_.model.vocab_size);
      sampler_ = std::make_unique<data::Sampler>(*train_file_, o_.micro_batch, o_.seq_len, dp_rank, dp_size,
                                                 o_.data_seed, grad_accum_);
      if (o_.eval_every > 0 || o_.eval_only) {
        val_file_ = std::make_unique<data::TokenShards>(data::TokenShards::open(o_.val_path, "data.val"));
        val_file_->validate_vocab(o_.model.vocab_size);
        // Each island evaluates its own model over the whole evaluation set.
        evaluator_ = std::make_unique<data::EvalLoader>(*val_file_, o_.micro_batch, o_.seq_len, island_.rank(),
                                                        island_.size(), o_.eval_tokens);
      }
      entropy_rate_ = read_entropy_rate(o_.entropy_json);
      const data::Tokenizer tokenizer = data::Tokenizer::from_key(o_.tokenizer);
      // (Bytes, the default, also labels token files made otherwise, as hsdp-data synth's: no size to hold.)
      if (!tokenizer.is_bytes() && tokenizer.vocab_size() > o_.model.vocab_size) {
        throw_config("data.tokenizer '" + o_.tokenizer + "' has " + std::to_string(tokenizer.vocab_size()) + " ids but model.vocab_size is " +
                     std::to_string(o_.model.vocab_size) + ": set model.vocab_size=" +
                     std::to_string(tokenizer.vocab_size()));
      }
      tokenizer_ = tokenizer.identity();
      summary_.entropy_rate = entropy_rate_;
      if (log_.is_root()) metrics_ = std::make_unique<MetricsLog>(o_.log_dir);
    });
    check_same_data();
    inputs_.resize(tokens_per_micro());
    targets_.resize(tokens_per_micro());
  }

  // Every rank reads the same data: the same files, each with the same number of tokens and the same first and last
  // 32 Ki tokens, of data.train and data.val (a copy that differs on some nodes, at the same path, trains each node
  // on other data). Collective; exit 2 naming the data, the ranks and their hosts.
  void check_same_data() {
    constexpr std::size_t kEdge = 32 * 1024;
    const auto sample = [&](const data::TokenShards* files) -> std::array<std::uint64_t, 2> {
      if (files == nullptr) return {0, 0};
      std::uint64_t sum = 0;
      for (std::size_t i = 0; i < files->count(); ++i) {
        const data::TokenFile& f = files->shard(i);
        const auto text = [](std::span<const std::byte> s) {
          return std::string_view(reinterpret_cast<const char*>(s.data()), s.size());
        };
        const std::size_t n = std::min(kEdge, f.size());
        const std::uint64_t one = fingerprint(f.path().string()) ^ (f.size() * 0xC2B2AE3D27D4EB4Full) ^
                                  fingerprint(text(f.bytes(0, n))) ^
                                  (fingerprint(text(f.bytes(f.size() - n, n))) * 0x9E3779B97F4A7C15ull);
        sum = sum * 0x100000001B3ull + one;
      }
      return {files->tokens(), sum};
    };
    using Files = std::array<std::array<std::uint64_t, 2>, 2>;  // train, val: token count and sample checksum
    const Files mine = {sample(train_file_.get()), sample(val_file_.get())};
    std::vector<Files> all(static_cast<std::size_t>(world_.size()));
    world_.all_gather(&mine, all.data(), sizeof(Files), DType::u8);
    for (std::size_t f = 0; f < 2; ++f) {
      std::string ranks;
      int count = 0;
      for (std::size_t r = 1; r < all.size(); ++r) {
        if (all[r][f] == all[0][f]) continue;
        if (++count <= 8) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r) + " (" + rank_hosts_[r] + ")";
      }
      if (count == 0) continue;
      if (count > 8) ranks += " and " + std::to_string(count - 8) + " more";
      const data::TokenShards& file = f == 0 ? *train_file_ : *val_file_;
      throw comm::AgreedError(
          ErrorKind::data,
          file.what() + " " + file.describe() + " is not the same file on every rank: rank(s) " + ranks +
              " read other tokens than rank 0 (" + rank_hosts_[0] + ", " + std::to_string(all[0][f][0]) +
              " tokens) in its size or its first or last 32 Ki tokens: every rank must read the same data (a copy "
              "that differs on some nodes? compare `hsdp-data info` of it on those hosts)");
    }
  }

  void build_backend() {
    const int sharing = comm::ranks_on_host(world_.raw());
    comm::agree(world_.raw(), [&] {
      if (o_.device_type == device::DeviceType::cpu) {
        check_memory_fits(o_, *layout_, mesh_.topology(), mesh_.shard().size(), host_memory_available(), sharing,
                          "host " + host_name());
      } else {
        const GpuMemory gpu = cuda_memory_available(world_.raw());
        check_memory_fits(o_, *layout_, mesh_.topology(), mesh_.shard().size(), gpu.memory, gpu.sharing, gpu.where);
      }
    });
    comm::agree(world_.raw(), [&] {
      fault_point("model", rank_);
      backend_ = o_.device_type == device::DeviceType::cuda ? make_cuda_backend(o_, *layout_, mesh_, memory_, log_)
                                                            : make_cpu_backend(o_, *layout_, mesh_, memory_, log_);
    });
    backend_->start();  // its collectives: every rank built its backend
  }

  // The val loss over the evaluation set (the same windows on any number of ranks): per-position losses summed.
  // A stop signal (Slurm's warning before the time limit) ends an evaluation at the next batch, agreed by every rank
  // (every rank has the same number of batches): -1, no val loss; the caller checkpoints and stops.
  double evaluate(std::int64_t at_step) {
    // Its collectives are the collective watchdog's: the phase only names them.
    const StallPhase phase("evaluation at step " + std::to_string(at_step), 0);
    fault_point("eval", rank_);
    evaluator_->reset();
    double sum = 0;
    for (std::uint64_t b = 0; b < evaluator_->batch_count(); ++b) {
      if (b > 0 && stop_agreed(world_, signals_)) {
        log_.info("evaluation at step ", at_step, " stopped by a signal after ", b, " of ", evaluator_->batch_count(),
                  " batches: no val loss for this step");
        return -1;
      }
      const std::size_t rows = evaluator_->next(inputs_, targets_);
      sum += backend_->evaluate_loss_sum(inputs_, targets_, rows);
    }
    island_.all_reduce(std::span<double>(&sum, 1), comm::ReduceOp::sum);
    const double val = sum / static_cast<double>(evaluator_->windows() * static_cast<std::uint64_t>(o_.seq_len));
    return mesh_.islands() > 1 ? global_mean(mesh_.outer(), val) : val;  // the islands' mean
  }

  // One optimizer step (step is 0-based): micro-batches, the norm or an fp16 overflow skip, AdamW; its metrics.
  StepMetrics train_step(std::int64_t step) {
    Backend& backend = *backend_;
    const bool fp16 = o_.engine.param_dtype == DType::f16;
    Stopwatch step_clock;
    mesh_.reset_counters();
    backend.begin_step();
    const float loss_scale = fp16 ? scaler_.scale() : 1.0f;
    fault_point("step", rank_);
    for (int micro = 0; micro < grad_accum_; ++micro) {
      sampler_->next(inputs_, targets_);
      backend.forward_backward(inputs_, targets_, loss_scale / static_cast<float>(grad_accum_),
                               micro + 1 == grad_accum_);
    }
    // The step's one wait for the device: loss, norm and (fp16, qgZ) non-finite flag in one read. qgZ zeroes a
    // non-finite gradient before quantizing it (the norm stays finite): its flag is what says a bf16/fp32 run diverged.
    const bool qgz = o_.engine.zeropp.quantized_gradients;
    const shard::StepScalars scalars = backend.step_scalars(fp16 || qgz);
    double loss = global_mean(island_, scalars.loss_sum / grad_accum_);
    std::vector<double> island_losses;
    if (mesh_.islands() > 1) {  // the islands' losses, and their mean
      island_losses.resize(static_cast<std::size_t>(mesh_.islands()));
      mesh_.outer().all_gather(std::span<const double>(&loss, 1), std::span<double>(island_losses));
      loss = 0;  // their mean, summed in island order: the same on every rank
      for (const double l : island_losses) loss += l;
      loss /= static_cast<double>(island_losses.size());
    }
    const double lr = optim::learning_rate(o_.schedule, step);
    optim::ClipResult clip;
    bool skipped = false;
    if (fp16 && scaler_.update(any_island(scalars.nonfinite))) {
      skipped = true;
      log_.info("step ", step + 1, ": fp16 gradients overflowed; step skipped, loss scale now ", scaler_.scale());
    } else {
      const double scale_squared = static_cast<double>(loss_scale) * loss_scale;
      clip = optim::clip_coefficient(scalars.norm_squared / scale_squared, o_.grad_clip);
      // The loss and the norm are all-reduced (the norm over the island, then agreed across islands), so every rank
      // sees the same: every rank throws, rank 0 says it.
      if (any_island(!clip.finite || scalars.nonfinite) || !std::isfinite(loss)) {
        throw comm::AgreedError(ErrorKind::diverged, divergence_text(step + 1, loss, last_finite_, *checkpoints_, o_));
      }
      optimizer_steps_ += 1;
      const optim::AdamWStep update{static_cast<float>(lr), optimizer_steps_, clip.coefficient / loss_scale};
      backend.optimizer_step(o_.adamw, update);
    }
    if (const std::string fault = fault_action("update=" + std::to_string(step + 1), rank_); !fault.empty()) {
      inject_flip(fault, step + 1);
    }
    shard::OuterReport outer;
    if (outer_) {
      outer = outer_->after_step(
          step + 1, outer_->needs_masters(step + 1) ? backend.checkpoint_shards() : std::vector<shard::UnitShard>{});
      if (outer.applied >= 0) backend.checkpoint_loaded();  // the masters were rewritten
    }

    StepMetrics m;
    m.step = step + 1;
    m.loss = loss;
    m.lr = lr;
    m.grad_norm = clip.norm;
    m.tokens = tokens_per_step_;
    m.data = sampler_->take_fingerprint();
    m.world_size = world_.size();
    m.strategy = shard::to_string(o_.engine.strategy);
    m.step_ms = step_clock.milliseconds();
    m.comm_ms = backend.timing().comm_ms;
    m.exposed_comm_ms = backend.timing().exposed_comm_ms;
    m.skipped = skipped;
    m.tokens_per_s = static_cast<double>(tokens_per_step_) / (m.step_ms / 1e3);
    if (const double peak = backend.peak_tflops(); peak > 0) {  // every rank's device alike: world x its peak
      m.mfu = model::train_flops(o_.model, tokens_per_step_, o_.seq_len) / (m.step_ms / 1e3) /
              (peak * 1e12 * world_.size());
    }
    comm::LinkBytes mine = mesh_.total_counters().total();
    mine += backend.own_bytes();
    const JobBytes job = job_bytes(world_, mine, outer.bytes);
    m.bytes = job.all_ranks;
    m.bytes_max_rank = job.max_rank;
    if (outer_) {
      m.island_losses = std::move(island_losses);
      m.outer_fragment = outer.fragment;
      m.outer_applied = outer.applied;
      m.outer_bytes = job.outer_all_ranks;
      m.outer_exposed_ms = outer.ms;
      summary_.outer_exposed_ms += outer.ms;
      if (outer.fragment >= 0) {
        summary_.outer_exchanges += 1;
        summary_.outer_bytes += m.outer_bytes;
      }
    }
    tokens_seen_ += tokens_per_step_;
    if (step > first_step_) {  // the first step pays for page faults and warm-up
      timed_seconds_ += m.step_ms / 1e3;
      timed_tokens_ += tokens_per_step_;
    }
    summary_.final_loss = loss;
    last_finite_ = {m.step, loss};
    steps_done_ = m.step;
    return m;
  }

  // metrics.jsonl, the progress line and the eval line, on rank 0.
  void report(const StepMetrics& m, bool last) {
    if (!log_.is_root()) return;
    if (metrics_->write(to_json(m, memory_))) {
      log_.warn(metrics_->failure(), " (from step ", m.step, " on, metrics.jsonl misses the steps; training goes on)");
    }
    if (m.step == 1 || m.step % o_.log_every == 0 || last) {
      const double per_step = run_clock_.seconds() / static_cast<double>(m.step - first_step_);
      log_.info(progress_line(m, o_.steps, memory_, per_step * static_cast<double>(end_step_ - m.step)));
    }
    if (m.val_loss >= 0) {
      std::ostringstream line;
      line << "eval step " << m.step << " | val loss " << m.val_loss;
      if (entropy_rate_ > 0) {
        line << " | source entropy " << entropy_rate_ << " (ratio " << m.val_loss / entropy_rate_ << ")";
      }
      log_.info(line.str());
    }
  }

  // At the end of `step` (1-based): a checkpoint when due, at the end, or on a stop request agreed by every rank (so
  // every rank checkpoints the same step). True: stop here.
  bool checkpoint_or_stop(std::int64_t step) {
    const bool stop = stop_agreed(world_, signals_);
    const bool end_of_run = step == end_step_ || stop;
    const bool save = checkpoints_->enabled() && (end_of_run || checkpoints_->due(step));
    if (save || (o_.replicas_every > 0 && step % o_.replicas_every == 0)) check_replicas(step);
    bool saved = false;
    if (save) {
      saved = checkpoints_->save({.step = step,
                                  .tokens = tokens_seen_,
                                  .tokens_per_step = tokens_per_step_,
                                  .sampler = sampler_->state(),
                                  .data_windows = sampler_->window_count(),
                                  .scaler = scaler_.state(),
                                  .deck_text = {},
                                  .strategy = {},
                                  .world_size = 0,
                                  .nodes = 0,
                                  .mesh = {},
                                  .train_seconds = summary_.earlier_seconds + run_clock_.seconds(),
                                  .segments = summary_.segments,
                                  .tokenizer = tokenizer_});
    }
    if (!stop) return false;
    summary_.stopped_by_signal = true;
    summary_.resumable = checkpoints_->enabled();
    log_.info("stop requested by a signal: ",
              saved ? "checkpointed"
              : checkpoints_->enabled()
                  ? "the checkpoint failed (checkpoint.on_error=continue), so NOT checkpointed (a requeued job resumes "
                    "from the last checkpoint that was written)"
                  : "no checkpoint.dir, so NOT checkpointed",
              " at step ", step, "; ", exit_line());
    return true;
  }

  // Bit 16 of the 32-bit word at `at` (an fp32 value's mantissa).
  static void flip_bit16(void* at) {
    std::uint32_t word = 0;
    std::memcpy(&word, at, sizeof word);
    word ^= 1u << 16;
    std::memcpy(at, &word, sizeof word);
  }

  // HSDP_FAULT's flip=<state> (core/fault.hpp): mantissa bit 16 of the first element this rank holds.
  void inject_flip(const std::string& action, std::int64_t step) {
    const std::string what = action.rfind("flip=", 0) == 0 ? action.substr(5) : "";
    const bool outer = what == "outer";
    if (what == "full") {  // the persistent full parameters, where they are the host's memory
      const std::vector<shard::Engine::ReplicatedParams> full = backend_->replicated_params();
      if (full.empty() || !full.front().in_place || full.front().size < 4) {
        throw_internal("HSDP_FAULT: flip=full needs persistent full parameters in host memory (zero1 on the CPU)");
      }
      flip_bit16(full.front().bytes);
      std::fprintf(stderr, "HSDP_FAULT: rank %d flipped bit 16 of its full compute parameters (unit %s) after step %lld\n",
                   rank_, layout_->unit(full.front().unit).name.c_str(), static_cast<long long>(step));
      return;
    }
    if (what != "params" && what != "exp_avg" && what != "exp_avg_sq" && !(outer && outer_)) {
      throw_internal("HSDP_FAULT: '" + action + "' at update=" + std::to_string(step) +
                     ": the action there is flip=params, exp_avg, exp_avg_sq, full or (with islands) outer");
    }
    const std::vector<shard::UnitShard> views = outer ? outer_->state_views() : backend_->checkpoint_shards();
    const auto held = std::find_if(views.begin(), views.end(), [](const shard::UnitShard& v) { return v.count > 0; });
    if (held == views.end()) return;
    flip_bit16(what == "exp_avg" ? held->exp_avg : what == "exp_avg_sq" ? held->exp_avg_sq : held->params);
    if (!outer) backend_->checkpoint_loaded();
    std::fprintf(stderr, "HSDP_FAULT: rank %d flipped bit 16 of its first %s element (unit %s, element %zu) "
                 "after step %lld\n", rank_, what.c_str(), layout_->unit(held->unit).name.c_str(), held->begin,
                 static_cast<long long>(step));
  }

  // check.replicas_every: every group of ranks that holds the same state compares checksums (train/replicas.hpp);
  // a difference ends the run (exit 7) before a checkpoint of that state is written. Collective.
  void check_replicas(std::int64_t step) {
    if (!replicas_ || replicas_checked_step_ == step) return;
    Stopwatch clock;
    const std::string verdict =
        replicas_->check(mesh_.island_index(), backend_->checkpoint_shards(),
                         outer_ ? outer_->state_views() : std::vector<shard::UnitShard>(),
                         backend_->replicated_params());
    summary_.replica_checks += 1;
    summary_.replica_check_ms += clock.milliseconds();
    if (replicas_checked_step_ < 0) {
      log_.info("replica check every ", o_.replicas_every, " steps and before every checkpoint: ",
                replicas_->groups() == 0
                    ? std::string("this job holds no state twice (") + shard::to_string(o_.engine.strategy) +
                          (mesh_.islands() > 1 ? " inside islands" : "") + "), so it compares nothing"
                    : std::to_string(replicas_->groups()) + " groups of ranks holding the same range compared",
                " (check.replicas_every)");
    }
    replicas_checked_step_ = step;
    if (verdict.empty()) return;
    const std::int64_t latest = checkpoints_->latest_step();
    throw comm::AgreedError(
        ErrorKind::replica,
        "replica check at step " + std::to_string(step) + ": " + verdict +
            ". Replicas of the same state must hold the same bits: a memory fault, a different binary or a faulty "
            "collective on those ranks. The run stops before it writes a checkpoint of this state (exit 7); " +
            (latest > 0 ? "the newest checkpoint, step " + std::to_string(latest) + ", stays `latest`: resume from it "
                          "once the host is found and fixed"
                        : std::string("there is no earlier checkpoint to resume from")));
  }

  // How a run stopped by a signal exits: 3 asks the job script to requeue; 6 (no checkpoint.dir) does not, since a
  // requeued job would start again from step 0.
  std::string exit_line() const {
    return summary_.resumable ? "exiting with code 3 (requeue me)"
                              : "exiting with code 6 (nothing to resume from: do not requeue; set checkpoint.dir to "
                                "make the run resumable)";
  }

  const TrainOptions& o_;
  comm::ProcessMesh& mesh_;
  const StopSignals& signals_;
  const Logger& log_;
  comm::MpiCommunicator& world_;
  // The ranks that train one model between outer steps: the world, or this rank's island (parallel.islands > 1).
  comm::MpiCommunicator& island_;
  const int rank_;
  int thread_count_ = 1;
  std::optional<device::ThreadCountScope> threads_;

  MemoryAccountant memory_;
  std::unique_ptr<model::ModelLayout> layout_;
  std::unique_ptr<data::TokenShards> train_file_, val_file_;
  std::string tokenizer_ = "bytes";  // data.tokenizer's identity, recorded in every checkpoint
  std::unique_ptr<data::Sampler> sampler_;
  std::unique_ptr<data::EvalLoader> evaluator_;
  std::unique_ptr<MetricsLog> metrics_;
  double entropy_rate_ = -1;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<shard::OuterOptimizer> outer_;  // parallel.islands > 1
  std::unique_ptr<Checkpointer> checkpoints_;
  std::unique_ptr<ReplicaChecker> replicas_;  // check.replicas_every > 0
  std::int64_t replicas_checked_step_ = -1;
  optim::LossScaler scaler_;
  std::vector<std::int32_t> inputs_, targets_;

  int grad_accum_;  // a resume on another number of ranks may change it (accumulation_for_resume)
  std::int64_t tokens_per_step_ = 0;
  std::int64_t optimizer_steps_ = 0;  // AdamW's t: steps actually applied (fp16 overflow skips do not count)
  std::int64_t first_step_ = 0;
  std::int64_t end_step_ = 0;
  std::int64_t steps_done_ = 0;  // the step the model is at
  std::int64_t tokens_seen_ = 0;
  FiniteLoss last_finite_;
  Stopwatch run_clock_;
  double timed_seconds_ = 0;
  std::int64_t timed_tokens_ = 0;
  TrainSummary summary_;
  std::vector<std::string> hosts_;       // rank 0: the job's host names, in node order
  std::vector<std::string> rank_hosts_;  // every rank's host name, by world rank (the start-up and replica checks)
};

}  // namespace

TrainSummary train(const TrainOptions& o, comm::ProcessMesh& mesh, const StopSignals& signals, const Logger& log) {
  Run run(o, mesh, signals, log);
  run.start_up();
  run.resume();
  run.announce();
  if (o.eval_only) run.evaluate_only();
  run.train_steps();
  run.shut_down();
  run.write_summary();
  return run.summary();
}

}  // namespace hsdp::train
