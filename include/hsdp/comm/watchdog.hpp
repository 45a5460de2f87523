#pragma once
// The watchdog every backend's pending collective shares: wait() polls with back-off (yield, then short sleeps:
// ranks may share cores) and, once the collective is older than comm.timeout_s, ends the job (exit 4) after
// printing, on this rank, one line: which collective, on which group, with which sequence number it was waiting
// for, and which ranks of the group have not reached it. Those it learns from the group's seat on the side channel
// (BoardSeat, sequence_board.hpp), where every member publishes the sequence number of the last collective it
// issued: a rank whose number is below the one waited for has not issued the collective (rank, world rank, host
// and its last number are named). Ranks whose slot does not arrive within kSideChannelLimitS are named as silent;
// if MPI itself blocks in that read, a second thread prints the line without them and aborts at
// kSideChannelLimitS + 2 s. Every rank whose watchdog fires prints its own line; the first to abort ends the job.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "hsdp/comm/communicator.hpp"
#include "hsdp/comm/sequence_board.hpp"
#include "hsdp/core/log.hpp"

namespace hsdp::comm {

// How long the watchdog waits for the other ranks' slots on the side channel.
inline constexpr double kSideChannelLimitS = 5.0;

// What the watchdog's message says about one collective.
struct OpIdentity {
  Collective collective;
  std::string group;
  std::uint64_t sequence = 0;
  int size = 1;
  int rank = 0;
  double timeout_s = 300;
  const Logger* logger = nullptr;
  std::string backend;                  // "" for MPI, "NCCL", ...: named in the message
  std::weak_ptr<const BoardSeat> seat;  // the group's side channel; empty: nobody is named (one-rank groups)
};

// The watchdog's account of who is behind collective #sequence on `group`, from a reading of its seat, e.g.
// "ranks 2, 3 of group 'shard' have not reached it (rank 2: world rank 6 on host n2, last issued #16; ...)",
// then "rank 5 of group 'shard' did not answer on the side channel within 5 s" for silent ones, joined by "; ";
// "every rank of group 'shard' has reached it (...)" when all answered and none is behind.
std::string laggards_text(std::span<const MemberSequence> members, std::uint64_t sequence, const std::string& group,
                          double limit_s);

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
  // The laggards_text of the group's seat, read within kSideChannelLimitS; "" without a seat.
  std::string who_is_behind() const;
  [[noreturn]] void fire_watchdog() const;

  OpIdentity id_;
  bool done_ = false;
};

}  // namespace hsdp::comm
