#pragma once
// Fault injection for the fault tests (tests/train/faults.sh): the environment variable
//   HSDP_FAULT=<action>:<point>@<rank>[,<action>:<point>@<rank>...]
// makes fault_point(point, world_rank) act on that world rank (or on every rank with @all) when the run passes the
// point. Actions: fail = throw a data Error (a rank-local failure: a file that cannot be read on one node),
// stop = raise(SIGSTOP) (a frozen rank), sleep=<seconds> = pause (a slow rank, or a window for a signal).
// Points in hsdp-train: startup (after MPI_Init, before the deck is agreed on), data, resume, step, eval,
// checkpoint (in the middle of writing a checkpoint's data), shutdown (after the last step). Unset: nothing happens.
#include <string_view>

namespace hsdp {

void fault_point(std::string_view point, int world_rank);

}  // namespace hsdp
