#pragma once
// Fault injection for the fault tests (tests/train/faults.sh): the environment variable
//   HSDP_FAULT=<action>:<point>@<rank>[,<action>:<point>@<rank>...]
// makes fault_point(point, world_rank) act on that world rank (or on every rank with @all) when the run passes the
// point. Actions: fail = throw a data Error (a rank-local failure: a file that cannot be read on one node),
// stop = raise(SIGSTOP) (a frozen rank), sleep=<seconds> = pause (a slow rank, or a window for a signal).
// Points in hsdp-train: startup (after MPI_Init, before the deck is agreed on), data, model (before the backend
// is built: the others build theirs, zero1's included, without a collective), resume, record (after the
// resume, where rank 0 checks and cuts back the run's record), step, eval, checkpoint (in the middle of writing a
// checkpoint's data), shutdown (after the last step), summary (rank 0 writing summary.json while the others are in
// MPI_Finalize). Unset: nothing happens.
// One more action, at the point update=<step> (after the optimizer step of that step, 1-based; update=0, or the
// step a run resumes at: the state it starts from, before its first replica check): flip=<state>
// flips mantissa bit 16 (2^16 ulps, under 1% of the value: a flip of the lowest bits can be rounded away by the next
// update) of the first element this rank holds of <state>: params (its master weights),
// exp_avg or exp_avg_sq (AdamW's m or v), full (zero1's gathered full parameters, on the CPU), outer (the outer
// parameters, with islands): a silent corruption for the replica check (train/replicas.hpp) to find.
#include <string>
#include <string_view>

namespace hsdp {

void fault_point(std::string_view point, int world_rank);
// The action HSDP_FAULT names for this point and rank ("" if none), for a caller that performs it itself (flip).
std::string fault_action(std::string_view point, int world_rank);

}  // namespace hsdp
