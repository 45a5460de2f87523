#pragma once
// Stop requests from the batch system: SIGUSR1 (Slurm's --signal=B:USR1@<s> warning, forwarded to the step) and
// SIGTERM (the time limit, scancel). hsdp-train installs the handlers before its libraries' constructors run
// (record_from_start) and again in main(), before MPI_Init, so a signal during start-up is not fatal. The handler only
// records the signal; the trainer asks requested() before the first step (a stop there exits 3 with no checkpoint: the
// model is the one the run started from) and at each step boundary (every rank agrees through an all-reduce,
// checkpoints, and exits with code 3).
#include <csignal>

namespace hsdp::train {

class StopSignals {
 public:
  // Installs the handler before the program's libraries start (hsdp-train calls it from its preinit_array, ahead of
  // every shared library's constructor): a signal in the first milliseconds is recorded, not fatal.
  static void record_from_start();

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
