#pragma once
// The watchdog's side channel: every member's latest issued sequence number on each group, readable by any member
// without the others' participation.
//
// SequenceBoard: one MPI window per root communicator (the world; MPI_Win_allocate over a private duplicate of it,
// so it shares nothing with the counted collectives; one window for the job, not one per group: Open MPI 4.1's
// osc/rdma names its shared memory after the communicator id, which disjoint groups made at the same time share).
// Each rank's page holds its host name and kSlots sequence numbers. One passive-target epoch (lock_all) spans the
// board's life.
// BoardSeat: one group's slot on every member's page (the lowest slot free on all of them, agreed at the group's
// construction). publish() is a plain atomic store to this rank's own page (no communication, cheap enough for
// every collective); read() fetches the members' slots with MPI_Rget, which shared memory, RDMA and UCX serve
// without the target calling MPI, and waits for them a bounded time.
#include <mpi.h>

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hsdp/comm/mpi.hpp"

namespace hsdp::comm {

// One member's entry as read from the board.
struct MemberSequence {
  int rank = 0;  // in the group
  int world_rank = 0;
  std::string host;  // as it answered, or as it was when the board was made
  std::uint64_t sequence = 0;
  bool answered = false;
};

class BoardSeat;

class SequenceBoard : public std::enable_shared_from_this<SequenceBoard> {
 public:
  static constexpr int kSlots = 256;  // groups a rank may belong to at once

  // Collective over `root`; world_ranks[i] is the world rank of root's rank i. Where MPI cannot make the window on
  // some rank (a transport without one-sided communication), the board is unavailable on every rank: take_seat()
  // gives no seats and unavailable() says why. Throws a comm Error only if MPI fails otherwise.
  SequenceBoard(MPI_Comm root, std::vector<int> world_ranks);
  // Why the board has no window ("" when it has one).
  const std::string& unavailable() const { return unavailable_; }
  // MPI_Win_free is collective over the root: it is skipped (the window leaks until MPI_Finalize) while an
  // exception unwinds, because then this rank may be the only one tearing down, on its way to abort the job.
  ~SequenceBoard();
  SequenceBoard(const SequenceBoard&) = delete;
  SequenceBoard& operator=(const SequenceBoard&) = delete;

  // Collective over `group`, whose members all belong to the root: claims the lowest slot free on every member's
  // page. Null when none is, or the board is unavailable (the watchdog then names no one for this group).
  std::shared_ptr<BoardSeat> take_seat(MPI_Comm group);

 private:
  friend class BoardSeat;
  struct Page {
    char host[64];
    std::uint64_t sequence[kSlots];
  };

  MpiComm comm_;
  MPI_Group group_ = MPI_GROUP_NULL;
  std::vector<int> world_ranks_;
  int rank_ = 0;
  MPI_Win window_ = MPI_WIN_NULL;
  Page* mine_ = nullptr;
  std::bitset<kSlots> taken_;  // this rank's slots in use
  std::vector<std::string> hosts_;  // by root rank
  std::string unavailable_;
};

class BoardSeat {
 public:
  // Made by SequenceBoard::take_seat. root_ranks[i]: the root rank of the group's rank i.
  BoardSeat(std::shared_ptr<SequenceBoard> board, int slot, int rank, std::vector<int> root_ranks);
  ~BoardSeat();  // gives the slot back on this rank (local)
  BoardSeat(const BoardSeat&) = delete;
  BoardSeat& operator=(const BoardSeat&) = delete;

  // This rank has issued collective #sequence on the group.
  void publish(std::uint64_t sequence);
  // Every member's entry in group rank order (this rank's own read locally), waiting at most `limit_s` for the
  // others; a member whose slot did not arrive in time has answered = false. MPI may block inside MPI_Rget on a
  // transport that needs the target's help (Open MPI's osc/pt2pt): callers bound the whole read themselves.
  std::vector<MemberSequence> read(double limit_s) const;

 private:
  struct Fetched {
    char host[64];
    std::uint64_t sequence;
  };

  std::shared_ptr<SequenceBoard> board_;
  int slot_;
  int rank_;
  std::vector<int> root_ranks_;
  mutable std::vector<Fetched> fetched_;  // Rget targets outlive a read that timed out (the job is aborted next)
};

}  // namespace hsdp::comm
