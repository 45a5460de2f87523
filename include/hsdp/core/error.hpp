#pragma once
// hsdp::Error: every failure hsdp reports to a user is one of these, with a kind that maps to an exit code.
#include <stdexcept>
#include <string>
#include <string_view>

namespace hsdp {

enum class ErrorKind { config, data, checkpoint, comm, diverged, replica, internal };

// Process exit codes, documented in `hsdp-train --help`.
inline constexpr int kExitOk = 0;
inline constexpr int kExitInternal = 1;   // a bug or an unexpected system failure
inline constexpr int kExitBadInput = 2;   // config, data or checkpoint the user gave is wrong
inline constexpr int kExitRequeue = 3;    // checkpointed on a signal: requeue the job
inline constexpr int kExitComm = 4;       // a collective failed or the watchdog fired
inline constexpr int kExitDiverged = 5;   // training diverged (a non-finite loss or gradient norm)
inline constexpr int kExitStopped = 6;    // stopped on a signal with no checkpoint.dir: nothing to resume, no requeue
inline constexpr int kExitReplica = 7;    // replicas of the same state differ (check.replicas_every): silent corruption

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const;

 private:
  ErrorKind kind_;
};

// An Error every rank of the job throws together (an agreement on a failure, a divergence seen in all-reduced
// values): every rank can unwind and exit, and rank 0 alone says it. Any other Error is this rank's alone: the job
// ends at the throw (hsdp-train's terminate handler: MPI_Abort before unwinding), since unwinding would run
// collective destructors (H5Fclose, MPI_Win_free) that wait for ranks that never come.
class AgreedError : public Error {
 public:
  using Error::Error;
};

std::string_view to_string(ErrorKind kind);
int exit_code_for(ErrorKind kind);

[[noreturn]] inline void throw_config(const std::string& message) { throw Error(ErrorKind::config, message); }
[[noreturn]] inline void throw_data(const std::string& message) { throw Error(ErrorKind::data, message); }
[[noreturn]] inline void throw_internal(const std::string& message) { throw Error(ErrorKind::internal, message); }

}  // namespace hsdp
