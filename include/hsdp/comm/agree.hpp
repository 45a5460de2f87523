#pragma once
// Agreement on failure during set-up: a bad input seen by one rank (a data file, a config value) must end
// every rank with the same message, printed once on rank 0, and never leave the others waiting.
#include <mpi.h>

#include <functional>

#include "hsdp/core/error.hpp"

namespace hsdp::comm {

// Thrown on EVERY rank by agree(): all ranks know, so they exit together without MPI_Abort.
using hsdp::AgreedError;

// Runs `step` on every rank of `comm`. If it throws on any rank, every rank throws an AgreedError carrying
// the kind and message of the lowest failing rank (prefixed with that rank when it is not rank 0). An AgreedError
// from `step` (thrown by every rank) passes through as it is. `step` must not contain collectives a failing rank
// could skip: an error in the middle of those is not this function's to catch (see AgreedError).
void agree(MPI_Comm comm, const std::function<void()>& step);

}  // namespace hsdp::comm
