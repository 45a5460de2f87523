#pragma once
// Stop requests from the batch system: SIGUSR1 (Slurm's --signal=B:USR1@<s> warning, forwarded to the step) and
// SIGTERM (the time limit, scancel). The handler only records the signal; the training loop asks requested() at
// each step boundary and all ranks agree through an all-reduce, checkpoint together, and exit with code 3.
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
