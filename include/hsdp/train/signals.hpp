#pragma once
// Stop requests from the batch system: SIGUSR1 (Slurm's --signal=B:USR1@<s> warning, forwarded to the step) and
// SIGTERM (the time limit, scancel). hsdp-train installs the handlers first thing in main(), before MPI_Init, so a
// signal during start-up is not fatal. The handler only records the signal; the trainer asks requested() before the
// first step (a stop there exits 3 with no checkpoint: the model is the one the run started from) and at each step
// boundary (every rank agrees through an all-reduce, checkpoints, and exits with code 3).
#include <csignal>

namespace hsdp::train {

class StopSignals {
 public:
  StopSignals();   // installs the handlers (sigaction)
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  bool requested() const;
  int signal_number() const;  // the last signal received, 0 if none

 private:
  struct sigaction previous_usr1_ {};
  struct sigaction previous_term_ {};
};

}  // namespace hsdp::train
