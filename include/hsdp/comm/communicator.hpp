#pragma once
// Communicator: the collectives hsdp uses, blocking and async, with byte counters per link class.
// All buffers are host memory on the CPU path. Types: f32, f64, bf16, f16, int8, uint8 (packed int4).
// Reductions (all_reduce, reduce_scatter) accept the floating types and int8 (sum only); uint8 carries
// packed int4 and is for all_gather, all_to_all and broadcast only (a reduction on it is an internal error).
// avg = sum / n, computed in the element type (f32 accumulation for bf16 and f16).
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <type_traits>

#include "hsdp/comm/types.hpp"
#include "hsdp/core/dtype.hpp"

namespace hsdp::comm {

template <typename T>
constexpr DType dtype_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) return DType::f32;
  else if constexpr (std::is_same_v<U, double>) return DType::f64;
  else if constexpr (std::is_same_v<U, bf16_t>) return DType::bf16;
  else if constexpr (std::is_same_v<U, f16_t>) return DType::f16;
  else if constexpr (std::is_same_v<U, std::int8_t>) return DType::i8;
  else if constexpr (std::is_same_v<U, std::uint8_t>) return DType::u8;
  else static_assert(sizeof(T) == 0, "unsupported element type");
}

// An operation in flight. wait() blocks until it completes (under the watchdog); the destructor waits too,
// because the buffers of a pending collective must outlive it.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
};

class CommHandle {
 public:
  CommHandle() = default;
  explicit CommHandle(std::unique_ptr<PendingOp> op) : op_(std::move(op)) {}
  CommHandle(CommHandle&&) noexcept = default;
  CommHandle& operator=(CommHandle&& other) noexcept;
  ~CommHandle();
  void wait();
  bool done();  // completes it if finished; true when nothing is pending
  bool pending() const { return op_ != nullptr; }

 private:
  std::unique_ptr<PendingOp> op_;
};

// What every implementation refuses for a reduction (all_reduce, reduce_scatter): uint8, which carries packed int4,
// and avg of an integer type. Throws an internal Error naming the collective and the group.
void check_reduction(DType t, ReduceOp op, const std::string& group, Collective c);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The group's role: "world", "node", "cross_node", "shard", "replicate", "hpz", ...
  virtual const std::string& name() const = 0;
  // Node id of every member, indexed by rank in this communicator (drives link classes).
  virtual std::span<const int> node_of_rank() const = 0;

  // send == recv means in place. Counts are in elements.
  virtual CommHandle all_reduce_async(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) = 0;
  // send holds size() * recv_count elements; block i goes, reduced, to rank i.
  virtual CommHandle reduce_scatter_async(const void* send, void* recv, std::size_t recv_count, DType t,
                                          ReduceOp op) = 0;
  // recv holds size() * send_count elements, block i from rank i. send may alias recv's own block.
  virtual CommHandle all_gather_async(const void* send, void* recv, std::size_t send_count, DType t) = 0;
  // send and recv hold size() blocks of count_per_peer; block i of send goes to rank i.
  virtual CommHandle all_to_all_async(const void* send, void* recv, std::size_t count_per_peer, DType t) = 0;
  virtual CommHandle broadcast_async(void* buffer, std::size_t count, DType t, int root) = 0;
  virtual CommHandle barrier_async() = 0;

  void all_reduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) {
    all_reduce_async(send, recv, count, t, op).wait();
  }
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType t, ReduceOp op) {
    reduce_scatter_async(send, recv, recv_count, t, op).wait();
  }
  void all_gather(const void* send, void* recv, std::size_t send_count, DType t) {
    all_gather_async(send, recv, send_count, t).wait();
  }
  void all_to_all(const void* send, void* recv, std::size_t count_per_peer, DType t) {
    all_to_all_async(send, recv, count_per_peer, t).wait();
  }
  void broadcast(void* buffer, std::size_t count, DType t, int root) { broadcast_async(buffer, count, t, root).wait(); }
  void barrier() { barrier_async().wait(); }

  // Typed conveniences (sizes are checked: a mismatch is an internal Error).
  template <typename T>
  void all_reduce(std::span<T> data, ReduceOp op = ReduceOp::sum) {
    all_reduce(data.data(), data.data(), data.size(), dtype_of<T>(), op);
  }
  template <typename T>
  CommHandle all_reduce_async(std::span<T> data, ReduceOp op = ReduceOp::sum) {
    return all_reduce_async(data.data(), data.data(), data.size(), dtype_of<T>(), op);
  }
  template <typename T>
  CommHandle reduce_scatter_async(std::span<const std::type_identity_t<T>> send, std::span<T> recv,
                                  ReduceOp op = ReduceOp::sum) {
    check_blocks(send.size(), recv.size(), "reduce_scatter");
    return reduce_scatter_async(send.data(), recv.data(), recv.size(), dtype_of<T>(), op);
  }
  template <typename T>
  void reduce_scatter(std::span<const std::type_identity_t<T>> send, std::span<T> recv, ReduceOp op = ReduceOp::sum) {
    reduce_scatter_async<T>(send, recv, op).wait();
  }
  template <typename T>
  CommHandle all_gather_async(std::span<const std::type_identity_t<T>> send, std::span<T> recv) {
    check_blocks(recv.size(), send.size(), "all_gather");
    return all_gather_async(send.data(), recv.data(), send.size(), dtype_of<T>());
  }
  template <typename T>
  void all_gather(std::span<const std::type_identity_t<T>> send, std::span<T> recv) {
    all_gather_async<T>(send, recv).wait();
  }
  template <typename T>
  void all_to_all(std::span<const std::type_identity_t<T>> send, std::span<T> recv) {
    check_all_to_all(send.size(), recv.size());
    all_to_all(send.data(), recv.data(), send.size() / static_cast<std::size_t>(size()), dtype_of<T>());
  }
  template <typename T>
  void broadcast(std::span<T> data, int root) {
    broadcast(data.data(), data.size(), dtype_of<T>(), root);
  }

  // Bytes this rank sent through this communicator since creation or the last reset, by the traffic model.
  virtual const ByteCounters& counters() const = 0;
  virtual void reset_counters() = 0;
  // Collectives issued on this communicator so far (the watchdog names the sequence number).
  virtual std::uint64_t sequence() const = 0;

 protected:
  // Throws an internal Error unless whole == block * size().
  void check_blocks(std::size_t whole, std::size_t block, const char* what) const;
  // Throws an internal Error unless send == recv and both divide by size().
  void check_all_to_all(std::size_t send, std::size_t recv) const;
};

}  // namespace hsdp::comm
