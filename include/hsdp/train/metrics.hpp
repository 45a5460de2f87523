#pragma once
// Per-step metrics: the rank-0 progress line, metrics.jsonl (one JSON object per step) and summary.json.
#include <cstdint>
#include <fstream>
#include <string>

#include "hsdp/comm/types.hpp"
#include "hsdp/core/memory.hpp"

namespace hsdp::train {

struct StepMetrics {
  std::int64_t step = 0;  // 1-based: optimizer steps done
  double loss = 0;        // mean training loss of the step over all micro-batches and data-parallel ranks
  double lr = 0;
  double grad_norm = 0;
  std::int64_t tokens = 0;  // tokens this step, all ranks
  double tokens_per_s = 0;
  double step_ms = 0;
  double comm_ms = 0;          // sum over the step's collectives of issue -> observed completion
  double exposed_comm_ms = 0;  // time compute waited for collectives (not hidden behind compute)
  bool skipped = false;        // fp16 overflow: no update
  comm::LinkBytes bytes;
  double val_loss = -1;  // < 0: not evaluated this step
};

std::string memory_json(const MemoryAccountant& memory);
std::string to_json(const StepMetrics& m, const MemoryAccountant& memory);
// "step 10/300 | loss 3.2145 | lr 6.0e-04 | norm 1.234 | 12345 tok/s | 85.2 ms (comm 3.1) | mem 12.3 MiB |
//  intra 1.2 MiB inter 0.3 MiB | ETA 0:25"
std::string progress_line(const StepMetrics& m, std::int64_t total_steps, const MemoryAccountant& memory,
                          double eta_s);
std::string format_duration(double seconds);

// Writes metrics.jsonl line by line (flushed each step, so a killed job keeps what it logged).
class MetricsLog {
 public:
  explicit MetricsLog(const std::string& dir);  // creates dir; data Error naming it if that fails
  void write(const std::string& json_line);
  // On resume: keep the lines of steps <= `step` (0: none), so the log reads like one uninterrupted run.
  void keep_through_step(std::int64_t step);
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::ofstream file_;
};

}  // namespace hsdp::train
