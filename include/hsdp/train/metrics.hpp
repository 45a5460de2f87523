#pragma once
// Per-step metrics: the rank-0 progress line, metrics.jsonl (one JSON object per step) and summary.json.
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "hsdp/comm/types.hpp"
#include "hsdp/core/memory.hpp"

namespace hsdp::train {

struct StepMetrics {
  std::int64_t step = 0;  // 1-based: optimizer steps done
  double loss = 0;        // mean training loss of the step over all micro-batches and data-parallel ranks
  double lr = 0;
  double grad_norm = 0;
  std::int64_t tokens = 0;  // tokens this step, all ranks
  std::uint64_t data = 0;   // data::Sampler::take_fingerprint() of the step: which windows it trained on
  double tokens_per_s = 0;
  double mfu = -1;  // model FLOPs utilization (model::train_flops over the device's bf16 peak); < 0: no peak known
  double step_ms = 0;
  double comm_ms = 0;          // wall time with at least one collective in flight (<= step_ms)
  double exposed_comm_ms = 0;  // time compute waited for collectives (not hidden behind compute; <= comm_ms)
  bool skipped = false;        // fp16 overflow: no update
  comm::LinkBytes bytes;           // sent this step by every rank together (job-wide), by link class
  comm::LinkBytes bytes_max_rank;  // the most one rank sent, by link class
  double val_loss = -1;  // < 0: not evaluated this step
  int world_size = 0;    // the ranks of the segment that ran the step (a resumed run may change them)
  std::string strategy;  // and its parallel.sharding
  // parallel.islands > 1: each island's mean loss (in island order; `loss` is their mean), and the outer step's
  // exchanges after this step: the fragment whose exchange started (-1: none), the fragment whose outer step was
  // applied (the same without outer.overlap), the bytes every rank together sent for the started one, the time the
  // step spent on both (starting, waiting, applying: what the overlap did not hide).
  std::vector<double> island_losses;
  int outer_fragment = -1;
  int outer_applied = -1;
  std::uint64_t outer_bytes = 0;
  double outer_exposed_ms = 0;
};

std::string memory_json(const MemoryAccountant& memory);
// Now, as ISO 8601 UTC with milliseconds: "2026-11-24T05:10:00.123Z".
std::string utc_timestamp();
std::string to_json(const StepMetrics& m, const MemoryAccountant& memory);
// "step 10/300 | loss 3.2145 | lr 6.0e-04 | norm 1.234 | 12345 tok/s | 85.2 ms (comm 3.1, exposed 0.4) |
//  mem 12.3 MiB | all ranks intra 1.2 MiB inter 0.3 MiB | ETA 0:25"
// What the timing words mean, for --help and the README.
inline constexpr const char* kProgressLineLegend =
    "progress line (rank 0, every log.every steps): step, loss, lr, gradient norm, tokens/s, then the step's wall\n"
    "  time in ms with `comm` = the time at least one collective was in flight (issue to observed completion;\n"
    "  never more than the step) and `exposed` = the part of it compute waited for (not hidden behind compute),\n"
    "  this rank's memory, the bytes every rank together sent this step over intra-node and inter-node links, ETA.\n"
    "  metrics.jsonl has the same per step (bytes_intra/bytes_inter: all ranks; *_max_rank: the busiest rank) and\n"
    "  a wall-clock time stamp (\"time\", UTC).";
std::string progress_line(const StepMetrics& m, std::int64_t total_steps, const MemoryAccountant& memory,
                          double eta_s);
std::string format_duration(double seconds);

// Writes metrics.jsonl line by line (flushed each step, so a killed job keeps what it logged).
class MetricsLog {
 public:
  explicit MetricsLog(const std::string& dir);  // creates dir; data Error naming it if that fails
  // Appends the line. A line the file system does not take (a full disk, a quota) is lost, and training goes on:
  // true only for the first such failure, so that the caller says it once (failure() says what it was).
  bool write(const std::string& json_line);
  const std::string& failure() const { return failure_; }
  // On resume: keep the lines of steps <= `step` (0: none), so the log reads like one uninterrupted run; then opens
  // the file to append. The cut file replaces the old one whole (config Error naming the file where it cannot be
  // written: the old one is then as it was).
  void keep_through_step(std::int64_t step);
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::ofstream file_;
  std::string failure_;
};

}  // namespace hsdp::train
