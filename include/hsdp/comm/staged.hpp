#pragma once
// StagedCommunicator: the collectives of a group whose transport cannot reach the engine's memory (MPI without CUDA
// awareness, over GPU memory), staged through host buffers. Each collective is three steps:
//   1. its input is copied to a host buffer (HostStaging::to_host: on a GPU a copy on the stream the caller works
//      on, ordered after the kernels that produced the input);
//   2. once that copy has landed, the host issues the collective of the carrying communicator on the host buffers;
//   3. once it has completed, its result is copied back (HostStaging::to_device); the handle is done when that copy
//      has landed.
// The carrying communicator's collectives are issued in the order of the calls, whatever order the copies land in
// (nonblocking collectives on one communicator must start in the same order on every rank): a collective whose
// input has landed waits for every earlier one's to be issued first. Each step advances whenever any handle of this
// communicator is polled, and wait() blocks on the step in the way.
//
// Byte counters, sequence numbers and the watchdog are the carrying communicator's: staging adds no traffic, and a
// collective that never completes is named exactly as it would be unstaged. The host buffers come from a pool kept
// for the communicator's lifetime, so a training step allocates none after the first (pinned host memory is slow to
// allocate and to free). In-place forms stay in place on the host (all_reduce send == recv, reduce_scatter's full
// input in recv, all_gather's send being recv's own block).
//
// On the CPU (`comm.stage=host`) the copies are memcpy: the GPU's staged path runs, and the engine's suites check it
// bit for bit against the direct one, on every CI run.
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string_view>
#include <vector>

#include "hsdp/comm/communicator.hpp"

namespace hsdp::comm {

// A copy between device memory and a host buffer, in flight.
class StagedCopy {
 public:
  virtual ~StagedCopy() = default;
  virtual bool done() = 0;  // true once the bytes have landed
  virtual void wait() = 0;
};

// Host memory a staged collective works on (pinned on a GPU); freed by its owner's deleter.
using HostBlock = std::unique_ptr<std::byte, std::function<void(std::byte*)>>;

// How a StagedCommunicator reaches device memory.
class HostStaging {
 public:
  virtual ~HostStaging() = default;
  // "memcpy", "cuda": for messages.
  virtual std::string_view name() const = 0;
  virtual HostBlock allocate(std::size_t bytes) = 0;
  // Starts a copy ordered after the device work issued so far to the stream the caller works on.
  virtual std::unique_ptr<StagedCopy> to_host(const void* device, void* host, std::size_t bytes) = 0;
  virtual std::unique_ptr<StagedCopy> to_device(const void* host, void* device, std::size_t bytes) = 0;
  // No copy: done once the device work issued so far to the caller's stream has completed (before the carrier reads
  // and writes device memory itself).
  virtual std::unique_ptr<StagedCopy> fence() = 0;
};

// The CPU device's staging: memory is host memory, so every copy is a memcpy, done when it returns.
std::shared_ptr<HostStaging> make_memcpy_staging();

// Which collectives the carrier runs on device memory itself, after a fence: none (every one staged), or those that
// only move bytes (all_gather, all_to_all, broadcast, barrier: CUDA-aware MPI, whose reductions of bf16 and f16 and
// whose avg run on the host and so must stay staged).
enum class DirectCollectives { none, data_movement };

class StagedCommunicator final : public Communicator {
 public:
  // `carrier` must outlive this communicator (the mesh owns both).
  StagedCommunicator(Communicator& carrier, std::shared_ptr<HostStaging> staging,
                     DirectCollectives direct = DirectCollectives::none);
  // The same, owning its carrier.
  StagedCommunicator(std::unique_ptr<Communicator> carrier, std::shared_ptr<HostStaging> staging,
                     DirectCollectives direct = DirectCollectives::none);
  ~StagedCommunicator() override;
  StagedCommunicator(const StagedCommunicator&) = delete;
  StagedCommunicator& operator=(const StagedCommunicator&) = delete;

  int rank() const override { return carrier_.rank(); }
  int size() const override { return carrier_.size(); }
  const std::string& name() const override { return carrier_.name(); }
  std::span<const int> node_of_rank() const override { return carrier_.node_of_rank(); }
  const ByteCounters& counters() const override { return carrier_.counters(); }
  void reset_counters() override { carrier_.reset_counters(); }
  // Collectives called so far: the carrier's issued ones and those whose inputs are still being copied.
  std::uint64_t sequence() const override;
  Communicator& carrier() const { return carrier_; }
  const HostStaging& staging() const { return *staging_; }

  using Communicator::all_gather_async;
  using Communicator::all_reduce_async;
  using Communicator::reduce_scatter_async;

  CommHandle all_reduce_async(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) override;
  CommHandle reduce_scatter_async(const void* send, void* recv, std::size_t recv_count, DType t, ReduceOp op) override;
  CommHandle all_gather_async(const void* send, void* recv, std::size_t send_count, DType t) override;
  CommHandle all_to_all_async(const void* send, void* recv, std::size_t count_per_peer, DType t) override;
  CommHandle broadcast_async(void* buffer, std::size_t count, DType t, int root) override;
  CommHandle barrier_async() override;

  // Host buffers the pool holds (free or in use), for tests: a steady step allocates none.
  std::size_t host_buffers_allocated() const;

  struct Operation;
  struct Pool;

 private:
  // The device ranges a collective reads and writes, and how it runs on the host copies of them.
  struct Shape {
    const void* send = nullptr;
    std::size_t send_bytes = 0;
    void* recv = nullptr;
    std::size_t recv_bytes = 0;  // what comes back to the device (0: nothing, as on a broadcast's root)
    std::function<CommHandle(const void* host_send, void* host_recv)> issue;
  };
  CommHandle staged(Shape shape);
  // The carrier on the device ranges themselves, after a fence, in call order with the staged ones.
  CommHandle direct(std::function<CommHandle()> issue);
  CommHandle queued(std::shared_ptr<Operation> op);

  std::unique_ptr<Communicator> owned_;  // the carrier, where this communicator owns it
  Communicator& carrier_;
  std::shared_ptr<HostStaging> staging_;
  DirectCollectives direct_;
  std::shared_ptr<Pool> pool_;  // shared with the operations in flight
};

}  // namespace hsdp::comm
