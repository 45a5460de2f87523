#pragma once
// The watchdog every backend's pending collective shares: wait() polls with back-off (yield, then short sleeps:
// ranks may share cores) and, once the collective is older than comm.timeout_s, prints on this rank which
// collective, on which group, with which sequence number it was waiting for, and ends the job (exit 4).
#include <cstdint>
#include <string>

#include "hsdp/comm/communicator.hpp"
#include "hsdp/core/log.hpp"

namespace hsdp::comm {

// What the watchdog's message says about one collective.
struct OpIdentity {
  Collective collective;
  std::string group;
  std::uint64_t sequence = 0;
  int size = 1;
  int rank = 0;
  double timeout_s = 300;
  const Logger* logger = nullptr;
  std::string backend;  // "" for MPI, "NCCL", ...: named in the message
};

class WatchedOp : public PendingOp {
 public:
  explicit WatchedOp(OpIdentity identity) : id_(std::move(identity)) {}
  void wait() final;
  bool test() final;
  bool done() const { return done_; }

 protected:
  // True once the collective completed (a backend may finish its work here, e.g. an average's division).
  virtual bool poll() = 0;
  // Called just before the job is aborted (e.g. ncclCommAbort, so a hung kernel lets go of the GPU).
  virtual void before_abort() const {}
  [[noreturn]] void fail(const std::string& reason) const;
  const OpIdentity& identity() const { return id_; }

 private:
  std::string describe() const;
  [[noreturn]] void fire_watchdog() const;

  OpIdentity id_;
  bool done_ = false;
};

}  // namespace hsdp::comm
