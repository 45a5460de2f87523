#include "hsdp/train/signals.hpp"

#include <csignal>

namespace hsdp::train {

namespace {
// The one mutable namespace-scope variable in hsdp: a signal handler may only store to a volatile sig_atomic_t.
volatile std::sig_atomic_t g_received_signal = 0;

extern "C" void record_signal(int signal) {
  g_received_signal = signal;
}

void install(struct sigaction* previous_usr1, struct sigaction* previous_term) {
  struct sigaction action {};
  action.sa_handler = record_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, previous_usr1);
  sigaction(SIGTERM, &action, previous_term);
}
}  // namespace

void StopSignals::record_from_start() {
  install(nullptr, nullptr);
}

// A signal recorded since record_from_start() stays recorded.
StopSignals::StopSignals() {
  install(&previous_usr1_, &previous_term_);
}

StopSignals::~StopSignals() {
  sigaction(SIGUSR1, &previous_usr1_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
}

bool StopSignals::requested() const { return g_received_signal != 0; }
int StopSignals::signal_number() const { return g_received_signal; }

}  // namespace hsdp::train
