#pragma once
// The MPI implementation of Communicator, over an RAII MPI_Comm; async through MPI's nonblocking collectives,
// except all_reduce, reduce_scatter and all_gather of CommOptions::ring_min_bytes or more (the whole buffer): those
// are rings of point-to-point messages on a duplicate of the communicator, its members in node-major order,
// advanced a step each time any operation is polled. Open MPI's nonblocking collectives (libnbc) reduce-scatter by
// a binomial reduce to rank 0 and a linear scatter, all-reduce in place, or over fewer than 4 ranks, by a binomial
// reduce and broadcast, and all-gather linearly (every rank to every rank): whole buffers through one rank, the two
// directions of a link used one after the other (a 2-node all-reduce takes twice a ring's time), a node's every
// rank sending to every other node. The ring sends (n-1)/n of the buffer per rank per phase, crossing each node
// boundary once, every link busy both ways at once: the bytes the traffic model counts (traffic.hpp) and the time
// the plan's calibration measures (hsdp-commbench goes through the same calls).
// bf16 and f16 travel as 2-byte MPI types with user-defined sum ops (f32 accumulation). Each communicator of more
// than one rank publishes every issued sequence number on the watchdog's side channel (sequence_board.hpp): a
// communicator made from a raw MPI_Comm (the world) makes the SequenceBoard, collectively, and its splits share
// it, each taking a seat (slot) on it; the board's window is freed, collectively, with the last of them.
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "hsdp/comm/communicator.hpp"
#include "hsdp/core/log.hpp"

namespace hsdp::comm {

class SequenceBoard;
struct OpIdentity;
class BoardSeat;

// True once MPI_Finalize has run (nothing MPI may be called then, not even to free a handle).
bool mpi_finalized();

// MPI_Init_thread on construction (MPI_THREAD_FUNNELED), MPI_Finalize on destruction.
class MpiEnvironment {
 public:
  MpiEnvironment(int* argc, char*** argv);
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // Ends every rank of the job now with `exit_code` (MPI_Abort on MPI_COMM_WORLD); if MPI_Abort has not ended
  // this rank after kAbortGraceS (its launcher unreachable), the rank exits by itself. Never returns.
  [[noreturn]] static void abort_job(int exit_code);
  static constexpr double kAbortGraceS = 5.0;

 private:
  int world_rank_ = 0;
  int world_size_ = 1;
};

// Owns an MPI_Comm (freed on destruction unless it is MPI_COMM_WORLD/MPI_COMM_SELF).
class MpiComm {
 public:
  MpiComm() = default;
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {}
  ~MpiComm();
  MpiComm(MpiComm&& o) noexcept : comm_(o.comm_) { o.comm_ = MPI_COMM_NULL; }
  MpiComm& operator=(MpiComm&& o) noexcept;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm`. `node_of_world_rank` is the Topology's node map (indexed by world rank);
  // the communicator learns each member's world rank once, at construction, and takes its seat on `side_channel`:
  // split() passes the parent's; null makes a new board over `comm` (the world does; every split shares it).
  MpiCommunicator(MpiComm comm, std::string name, const std::vector<int>& node_of_world_rank,
                  const CommOptions& options, const Logger& logger,
                  std::shared_ptr<SequenceBoard> side_channel = nullptr);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  std::span<const int> node_of_rank() const override { return node_of_rank_; }
  MPI_Comm raw() const { return comm_.get(); }

  // Keep the typed conveniences of Communicator visible next to the overrides below.
  using Communicator::all_gather_async;
  using Communicator::all_reduce_async;
  using Communicator::reduce_scatter_async;

  CommHandle all_reduce_async(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) override;
  CommHandle reduce_scatter_async(const void* send, void* recv, std::size_t recv_count, DType t,
                                  ReduceOp op) override;
  CommHandle all_gather_async(const void* send, void* recv, std::size_t send_count, DType t) override;
  CommHandle all_to_all_async(const void* send, void* recv, std::size_t count_per_peer, DType t) override;
  CommHandle broadcast_async(void* buffer, std::size_t count, DType t, int root) override;
  CommHandle barrier_async() override;

  const ByteCounters& counters() const override { return counters_; }
  void reset_counters() override { counters_ = {}; }
  std::uint64_t sequence() const override { return sequence_; }

  // Splits this communicator (MPI_Comm_split) into a new named one; collective over this communicator.
  std::unique_ptr<MpiCommunicator> split(int color, int key, std::string name) const;
  const std::vector<int>& node_of_world_rank() const { return node_of_world_rank_; }
  // The watchdog's side channel this communicator and its splits publish on (null in a one-rank job).
  const std::shared_ptr<SequenceBoard>& side_channel() const { return side_channel_; }
  const CommOptions& options() const { return options_; }
  const Logger& logger() const { return logger_; }

 private:
  // Counts an issued collective (sequence number, bytes by the traffic model) and wraps its request for waiting;
  // avg_data/avg_count: the result to divide by size() once it has arrived (avg), nullptr otherwise.
  CommHandle issued(MPI_Request request, Collective c, std::size_t count, DType t, void* avg_data,
                    std::size_t avg_count, int root = 0);
  // Counts an issued collective and names it for the watchdog.
  OpIdentity identify(Collective c, std::size_t count, DType t, int root);
  // The ring of all_reduce, reduce_scatter or all_gather over `count` elements in size() blocks of `block`.
  CommHandle ring(Collective c, const void* send, void* recv, std::size_t count, std::size_t block, DType t,
                  ReduceOp op);
  bool use_ring(std::size_t bytes) const { return size_ > 1 && bytes >= options_.ring_min_bytes; }

  struct Impl;
  std::unique_ptr<Impl> impl_;
  MpiComm comm_;
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> node_of_world_rank_;
  std::vector<int> node_of_rank_;
  CommOptions options_;
  const Logger& logger_;
  ByteCounters counters_;
  std::uint64_t sequence_ = 0;
  MpiComm ring_comm_;            // the rings' point-to-point messages (a duplicate: never matched by anything else)
  std::vector<int> ring_order_;  // the members in node-major order
  int ring_place_ = 0;           // this rank's place in it
  std::uint64_t rings_ = 0;      // rings issued: the tag of the next
  std::shared_ptr<SequenceBoard> side_channel_;
  std::shared_ptr<BoardSeat> seat_;  // null for one rank; pending ops hold it weakly
};

// The MPI communicator behind a group, for what only MPI does (NCCL's bootstrap, the side channel); an internal
// Error naming the group when another transport carries it.
MpiCommunicator& as_mpi(Communicator& group);
const MpiCommunicator& as_mpi(const Communicator& group);

}  // namespace hsdp::comm
