#pragma once
// The training loop on every rank: data-parallel micro-batches with gradient accumulation, AdamW with a
// cosine schedule and global-norm clipping, evaluation, progress on rank 0, metrics.jsonl and summary.json.
#include <string>

#include "hsdp/comm/mesh.hpp"
#include "hsdp/core/log.hpp"
#include "hsdp/train/options.hpp"
#include "hsdp/train/signals.hpp"

namespace hsdp::train {

struct TrainSummary {
  std::int64_t steps = 0;
  double final_loss = 0;
  double final_val_loss = -1;
  double entropy_rate = -1;  // from data.entropy_json, if given
  double tokens_per_s = 0;   // mean over the steps after the first
  double seconds = 0;                  // all segments of the run
  double earlier_seconds = 0;          // the segments before this one (from the checkpoint resumed)
  std::int64_t segments = 1;           // this one and those before it
  std::int64_t resumed_from_step = 0;  // 0: a fresh start
  bool stopped_by_signal = false;      // stopped on SIGUSR1/SIGTERM: exit 3 so the job requeues (6 if !resumable)
  bool resumable = true;               // a requeued job could resume (checkpoint.dir is set)
  std::int64_t final_val_loss_step = 0;  // the step whose model final_val_loss evaluated
  std::string ended;                     // why the run ended (summary.json "ended")
  // parallel.islands > 1, this segment: outer exchanges done, bytes every rank together sent for them, the time rank
  // 0 waited for them.
  std::int64_t outer_exchanges = 0;
  std::uint64_t outer_bytes = 0;
  double outer_exposed_ms = 0;
  // check.replicas_every, this segment: the checks made and rank 0's time in them.
  std::int64_t replica_checks = 0;
  double replica_check_ms = 0;
};

// Validates the options against the data (collectively: a bad file on one rank ends every rank with one
// message) and trains. Throws hsdp::Error.
// `signals`, installed before MPI_Init, is asked before the first step and at every step boundary.
TrainSummary train(const TrainOptions& options, comm::ProcessMesh& mesh, const StopSignals& signals, const Logger& log);

}  // namespace hsdp::train
