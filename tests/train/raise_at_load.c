// Preloaded into hsdp-train by own_run.sh (the stop case): raises SIGTERM from a shared library's constructor, the
// moment in start-up when the libraries initialise (after the executable's preinit_array, before main), so the test
// lands its signal in that window every time instead of after a guessed delay. Only in hsdp-train, once: the
// variable is removed so that processes it starts (Open MPI's singleton daemon) load nothing of this.
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

__attribute__((constructor)) static void raise_sigterm_at_load(void) {
  unsetenv("LD_PRELOAD");
  if (strcmp(program_invocation_short_name, "hsdp-train") == 0) raise(SIGTERM);
}
