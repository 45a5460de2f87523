#pragma once
// Internal to hsdp_ckpt: make every rank fail together. `agreed(comm, body)` runs body on every rank; if it threw
// on any rank, every rank throws the AgreedError of the lowest failing rank (same kind, same message), so no rank is left
// waiting in a later collective. Bodies must not contain collectives a failing rank could skip.
#include <mpi.h>

#include <optional>
#include <string>
#include <utility>

#include "hsdp/core/error.hpp"

namespace hsdp::ckpt {

struct Failure {
  ErrorKind kind = ErrorKind::internal;
  std::string message;
};

// Collective: throws the lowest failing rank's failure on every rank if any rank has one.
void agree(MPI_Comm comm, const std::optional<Failure>& local);

template <typename Body>
void agreed(MPI_Comm comm, Body&& body) {
  std::optional<Failure> failure;
  try {
    std::forward<Body>(body)();
  } catch (const AgreedError&) {
    throw;  // every rank threw it
  } catch (const Error& e) {
    failure = Failure{e.kind(), e.what()};
  } catch (const std::exception& e) {
    failure = Failure{ErrorKind::internal, e.what()};
  }
  agree(comm, failure);
}

}  // namespace hsdp::ckpt
