#include "hsdp/core/error.hpp"

namespace hsdp {

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::config: return "config";
    case ErrorKind::data: return "data";
    case ErrorKind::checkpoint: return "checkpoint";
    case ErrorKind::comm: return "comm";
    case ErrorKind::diverged: return "diverged";
    case ErrorKind::replica: return "replica";
    case ErrorKind::internal: return "internal";
  }
  return "internal";
}

int exit_code_for(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::config:
    case ErrorKind::data:
    case ErrorKind::checkpoint: return kExitBadInput;
    case ErrorKind::comm: return kExitComm;
    case ErrorKind::diverged: return kExitDiverged;
    case ErrorKind::replica: return kExitReplica;
    case ErrorKind::internal: return kExitInternal;
  }
  return kExitInternal;
}

int Error::exit_code() const { return exit_code_for(kind_); }

}  // namespace hsdp
