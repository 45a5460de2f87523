#pragma once
// The stall watch: a bound on how long this rank may stay in one operation of a phase whose waits are not covered by
// the collective watchdog (watchdog.hpp): start-up, resume reads, checkpoint writes and commits, shutdown. Those
// wait inside blocking MPI and collective HDF5 calls, where the waiting thread cannot look at the clock, so a second
// thread (started on first use) does: when a watched operation outlives its phase's limit it calls the stall
// handler, which ends the job.
//
//   StallPhase phase("checkpoint save of step 40", o.checkpoint_timeout_s, "checkpoint.timeout_s");  // sets the limit
//   StallGuard op("writing the tensor data");                                      // watched until it ends
//
// Phases nest (the innermost counts; a limit <= 0 leaves its operations unwatched); operations outside any phase
// are not watched. Only the thread that made the phase may open guards in it (the training thread).
#include <functional>
#include <string>

namespace hsdp {

struct StallReport {
  std::string phase;
  std::string operation;
  double limit_s = 0;
  std::string limit_key;  // the deck key that set the limit, e.g. "checkpoint.timeout_s"
};

// Runs on the watch thread and must not return (it ends the process: MPI_Abort). Until one is set, a stall
// prints the report to stderr and exits with kExitComm.
using StallHandler = std::function<void(const StallReport&)>;
void set_stall_handler(StallHandler handler);

class StallPhase {
 public:
  // `limit_key` names the setting the limit comes from (in the report); a limit <= 0 leaves the phase unwatched.
  // `notices`: while an operation of this phase waits, say so on stderr every limit / 4 seconds (at least 1, at most
  // 30), so a long wait is never silent (rank 0's start-up: a rank that does not arrive).
  StallPhase(std::string name, double limit_s, std::string limit_key = "", bool notices = false);
  ~StallPhase();
  StallPhase(const StallPhase&) = delete;
  StallPhase& operator=(const StallPhase&) = delete;
};

class StallGuard {
 public:
  explicit StallGuard(std::string operation);
  ~StallGuard();
  StallGuard(const StallGuard&) = delete;
  StallGuard& operator=(const StallGuard&) = delete;
};

// "checkpoint save of step 40 (writing the tensor data)": the innermost phase and operation, "" outside any phase.
// The collective watchdog names it in its diagnosis.
std::string stall_context();

}  // namespace hsdp
