#include "hsdp/comm/sequence_board.hpp"

#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <exception>
#include <numeric>
#include <string>

#include "hsdp/core/error.hpp"
#include "hsdp/core/log.hpp"
#include "hsdp/core/timer.hpp"

namespace hsdp::comm {
namespace {

std::string error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<std::size_t>(length));
}

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  throw Error(ErrorKind::comm, std::string("watchdog side channel: ") + what + " failed: " + error_text(code));
}

constexpr int kMaskWords = SequenceBoard::kSlots / 64;

}  // namespace

// ---- SequenceBoard ----

SequenceBoard::SequenceBoard(MPI_Comm root, std::vector<int> world_ranks) : world_ranks_(std::move(world_ranks)) {
  MPI_Comm dup = MPI_COMM_NULL;
  check(MPI_Comm_dup(root, &dup), "MPI_Comm_dup");
  comm_ = MpiComm(dup);
  // Errors come back as codes (reported in the watchdog's line) instead of ending the job from inside MPI.
  check(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(dup, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_group(dup, &group_), "MPI_Comm_group");
  // Every member's host name, by message passing (works on every transport): the watchdog names the host of a
  // member that does not answer, and the board is still useful for that when it has no window.
  std::array<char, sizeof(Page::host)> mine{};
  const std::string host = host_name();
  std::memcpy(mine.data(), host.data(), std::min(host.size(), mine.size() - 1));
  std::vector<char> all(mine.size() * world_ranks_.size());
  check(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, all.data(), static_cast<int>(mine.size()),
                      MPI_CHAR, dup),
        "MPI_Allgather (host names)");
  for (std::size_t r = 0; r < world_ranks_.size(); ++r) {
    const char* name = all.data() + r * mine.size();
    hosts_.emplace_back(name, strnlen(name, mine.size()));
  }

  // One-sided communication is not on every transport (Open MPI's ob1 with the tcp BTL has none): the board then
  // has no window, every rank alike (agreed), and the job goes on; the watchdog names no one behind a stall.
  void* base = nullptr;
  const int code = MPI_Win_allocate(sizeof(Page), 1, MPI_INFO_NULL, dup, &base, &window_);
  const int made = code == MPI_SUCCESS ? 1 : 0;
  int all_made = 0;
  check(MPI_Allreduce(&made, &all_made, 1, MPI_INT, MPI_MIN, dup), "MPI_Allreduce (window made)");
  if (all_made == 0) {
    // A window some rank did make is left to MPI_Finalize: freeing it is collective over ranks that have none.
    window_ = MPI_WIN_NULL;
    unavailable_ = code == MPI_SUCCESS ? std::string("MPI_Win_allocate failed on another rank")
                                       : "MPI_Win_allocate failed: " + error_text(code);
    return;
  }
  check(MPI_Win_set_errhandler(window_, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler");
  mine_ = static_cast<Page*>(base);
  std::memset(mine_, 0, sizeof(Page));
  std::memcpy(mine_->host, mine.data(), sizeof mine_->host);
  check(MPI_Win_lock_all(MPI_MODE_NOCHECK, window_), "MPI_Win_lock_all");
}

SequenceBoard::~SequenceBoard() {
  if (mpi_finalized()) return;
  if (group_ != MPI_GROUP_NULL) MPI_Group_free(&group_);
  if (window_ == MPI_WIN_NULL || std::uncaught_exceptions() > 0) return;
  MPI_Win_unlock_all(window_);
  MPI_Win_free(&window_);
}

std::shared_ptr<BoardSeat> SequenceBoard::take_seat(MPI_Comm group) {
  if (window_ == MPI_WIN_NULL) return nullptr;  // every rank alike: no collective skipped by some
  // The slots any member uses: a slot free in the union is free on every member's page.
  std::array<std::uint64_t, kMaskWords> mine{};
  for (int s = 0; s < kSlots; ++s) {
    if (taken_[static_cast<std::size_t>(s)]) mine[static_cast<std::size_t>(s / 64)] |= std::uint64_t{1} << (s % 64);
  }
  std::array<std::uint64_t, kMaskWords> any{};
  check(MPI_Allreduce(mine.data(), any.data(), kMaskWords, MPI_UINT64_T, MPI_BOR, group), "MPI_Allreduce (slots)");
  int slot = -1;
  for (int s = 0; s < kSlots && slot < 0; ++s) {
    if ((any[static_cast<std::size_t>(s / 64)] >> (s % 64) & 1) == 0) slot = s;
  }
  if (slot < 0) return nullptr;

  int size = 0;
  int rank = 0;
  check(MPI_Comm_size(group, &size), "MPI_Comm_size");
  check(MPI_Comm_rank(group, &rank), "MPI_Comm_rank");
  MPI_Group members = MPI_GROUP_NULL;
  check(MPI_Comm_group(group, &members), "MPI_Comm_group");
  std::vector<int> ranks(static_cast<std::size_t>(size));
  std::iota(ranks.begin(), ranks.end(), 0);
  std::vector<int> root_ranks(ranks.size());
  const int code = MPI_Group_translate_ranks(members, size, ranks.data(), group_, root_ranks.data());
  MPI_Group_free(&members);
  check(code, "MPI_Group_translate_ranks");
  if (std::find(root_ranks.begin(), root_ranks.end(), MPI_UNDEFINED) != root_ranks.end()) {
    throw_internal("watchdog side channel: a group has members outside the root communicator of its board");
  }
  taken_.set(static_cast<std::size_t>(slot));
  std::atomic_ref<std::uint64_t>(mine_->sequence[slot]).store(0, std::memory_order_release);
  return std::make_shared<BoardSeat>(shared_from_this(), slot, rank, std::move(root_ranks));
}

// ---- BoardSeat ----

BoardSeat::BoardSeat(std::shared_ptr<SequenceBoard> board, int slot, int rank, std::vector<int> root_ranks)
    : board_(std::move(board)),
      slot_(slot),
      rank_(rank),
      root_ranks_(std::move(root_ranks)),
      fetched_(root_ranks_.size()) {}

BoardSeat::~BoardSeat() {
  if (!mpi_finalized()) publish(0);  // after MPI_Finalize the page may be gone
  board_->taken_.reset(static_cast<std::size_t>(slot_));
}

void BoardSeat::publish(std::uint64_t sequence) {
  std::atomic_ref<std::uint64_t>(board_->mine_->sequence[slot_]).store(sequence, std::memory_order_release);
}

std::vector<MemberSequence> BoardSeat::read(double limit_s) const {
  const std::size_t n = root_ranks_.size();
  const SequenceBoard& board = *board_;
  // Two gets per member: its host name and its sequence number in this group's slot.
  std::vector<MPI_Request> requests(2 * n, MPI_REQUEST_NULL);
  std::vector<int> arrived(n, 0);  // gets completed, of 2
  for (std::size_t i = 0; i < n; ++i) {
    if (static_cast<int>(i) == rank_) {
      std::memcpy(fetched_[i].host, board.mine_->host, sizeof fetched_[i].host);
      fetched_[i].sequence = std::atomic_ref<std::uint64_t>(board.mine_->sequence[slot_]).load();
      arrived[i] = 2;
      continue;
    }
    const int target = root_ranks_[i];
    const auto sequence_at = static_cast<MPI_Aint>(offsetof(SequenceBoard::Page, sequence) +
                                                   sizeof(std::uint64_t) * static_cast<std::size_t>(slot_));
    if (MPI_Rget(fetched_[i].host, sizeof fetched_[i].host, MPI_BYTE, target, 0, sizeof fetched_[i].host, MPI_BYTE,
                 board.window_, &requests[2 * i]) != MPI_SUCCESS ||
        MPI_Rget(&fetched_[i].sequence, 1, MPI_UINT64_T, target, sequence_at, 1, MPI_UINT64_T, board.window_,
                 &requests[2 * i + 1]) != MPI_SUCCESS) {
      arrived[i] = -1;  // never arrives
    }
  }
  const Stopwatch watch;
  bool waiting = true;
  while (waiting) {
    waiting = false;
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t k = 2 * i; k < 2 * i + 2 && arrived[i] >= 0 && arrived[i] < 2; ++k) {
        if (requests[k] == MPI_REQUEST_NULL) continue;
        int flag = 0;
        if (MPI_Test(&requests[k], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
          arrived[i] = -1;
        } else if (flag != 0) {
          ++arrived[i];  // MPI_Test set the request to MPI_REQUEST_NULL
        }
      }
      if (arrived[i] >= 0 && arrived[i] < 2) waiting = true;
    }
    if (!waiting || watch.seconds() >= limit_s) break;
    sched_yield();
  }

  std::vector<MemberSequence> members(n);
  for (std::size_t i = 0; i < n; ++i) {
    MemberSequence& m = members[i];
    m.rank = static_cast<int>(i);
    m.world_rank = board.world_ranks_[static_cast<std::size_t>(root_ranks_[i])];
    m.answered = arrived[i] == 2;
    if (!m.answered) {
      m.host = board.hosts_[static_cast<std::size_t>(root_ranks_[i])];  // known since the board was made
      continue;
    }
    m.sequence = fetched_[i].sequence;
    m.host.assign(fetched_[i].host, strnlen(fetched_[i].host, sizeof fetched_[i].host));
  }
  return members;
}

}  // namespace hsdp::comm
