// Preloaded into hsdp-train by own_run.sh (the stop case): raises SIGTERM from a shared library's constructor, the
// moment in start-up when the libraries initialise (after the executable's preinit_array, before main), so the test
// lands its signal in that window every time instead of after a guessed delay. Only in hsdp-train, once: the
// variable is removed so that processes it starts (Open MPI's singleton daemon) load nothing of this.
#include <cerrno>  // program_invocation_short_name (glibc; g++ defines _GNU_SOURCE)
#include <csignal>
#include <cstdlib>
#include <cstring>

namespace {

[[gnu::constructor]] void raise_sigterm_at_load() {
  unsetenv("LD_PRELOAD");
  if (std::strcmp(program_invocation_short_name, "hsdp-train") == 0) std::raise(SIGTERM);
}

}  // namespace
