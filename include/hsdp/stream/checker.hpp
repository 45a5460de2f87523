#pragma once
// The stream checker: proves on the CPU that work issued on several queues (CUDA streams on a GPU) is ordered as the
// memory it touches requires, deterministically, without a GPU.
//
// The order is the one queues, events and host waits define, kept as vector clocks (one counter per queue; the
// host is queue 0):
//   - work on a queue is ordered after the work enqueued before it on the same queue, and after everything the host
//     did and waited for before enqueuing it (the host's operations are synchronous);
//   - record() on a queue gives an event carrying the queue's clock; wait(event) on another queue orders that queue's
//     later work after everything the event covers; the host's synchronize(event) does the same for the host.
// Every operation declares the buffers it reads and writes. The checker keeps, per buffer, its last write and the
// reads since, and ends the run (a hsdp::Error naming the buffer, the two operations and their queues) on
//   - a read not ordered after the write it reads (compute reading a gathered unit before the gather's event);
//   - a write not ordered after the last write or the reads it overwrites (a buffer refilled while a collective still
//     reads it);
//   - memory released (back to its pool, to be reused) after an event that does not cover every access to it (a
//     staging buffer freed while its collective may still read it);
//   - a host read (the loss, the norm, the overflow flag) not ordered after the write that produced the value.
// The checks use the logical order only, so a missing wait is found whether or not the timing of a run exposes it;
// the threads executor (executor.hpp) adds threads and random delays so that the values do too. The queues
// (queues.hpp) tell the checker what they hand to their executor, in that order, and a wait once the executor has
// put it in place.
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace hsdp::stream {

using QueueId = int;   // 0 is the host
using BufferId = int;  // one allocation

enum class AccessMode { read, write };

struct BufferAccess {
  BufferId buffer = -1;
  AccessMode mode = AccessMode::read;
};

inline BufferAccess reads(BufferId b) {
  return {b, AccessMode::read};
}
inline BufferAccess writes(BufferId b) {
  return {b, AccessMode::write};
}

// A point of a queue's order and everything ordered before it: the queue's vector clock there.
struct CheckerEvent {
  QueueId queue = -1;  // -1: the empty event (covers nothing)
  std::vector<std::uint64_t> clock;
};

class StreamChecker {
 public:
  static constexpr QueueId kHost = 0;

  StreamChecker();
  QueueId add_queue(std::string name);
  BufferId add_buffer(std::string name);
  const std::string& queue_name(QueueId q) const { return queues_.at(static_cast<std::size_t>(q)).name; }
  const std::string& buffer_name(BufferId b) const { return buffers_.at(static_cast<std::size_t>(b)).name; }

  // An operation `name` on queue q touching `accesses`: checked, then recorded; its place in q's order (1, 2, ...).
  // Throws on a violation. Ordered after everything the host did and waited for so far.
  std::uint64_t operation(QueueId q, const std::string& name, std::span<const BufferAccess> accesses);
  // The same, ordered after what the host had done and waited for at `host` (record(kHost) when the host enqueued
  // it), for work the queues hand to their executor after the host moved on.
  std::uint64_t operation(QueueId q, const CheckerEvent& host, const std::string& name,
                          std::span<const BufferAccess> accesses);
  CheckerEvent record(QueueId q);
  void wait(QueueId q, const CheckerEvent& event);
  // The host blocks until `event` has happened.
  void synchronize(const CheckerEvent& event) { wait(kHost, event); }
  // The host reads buffer b (a scalar the step needs): a read on the host queue.
  void host_read(BufferId b, const std::string& what);
  // Buffer b goes back to its pool once `event` has happened: every access to it must be ordered before the event.
  // The buffer id is dead afterwards; any later access is a violation.
  void release(BufferId b, const CheckerEvent& event, const std::string& what);

  std::size_t operations() const { return operations_; }

 private:
  struct Stamp {
    QueueId queue = -1;
    std::uint64_t tick = 0;
    std::string op;
  };
  struct QueueState {
    std::string name;
    std::vector<std::uint64_t> clock;
  };
  struct BufferState {
    std::string name;
    Stamp last_write;          // queue -1: never written
    std::vector<Stamp> reads;  // since the last write
    bool released = false;
    std::string released_by;  // the release and its event's queue
  };

  static bool ordered(const Stamp& before, const std::vector<std::uint64_t>& clock);
  std::uint64_t check_and_record(QueueId q, const std::string& name, std::span<const BufferAccess> accesses);
  std::vector<std::uint64_t>& clock_of(QueueId q);
  [[noreturn]] void violation(const std::string& what, const BufferState& b, const Stamp& earlier, QueueId q,
                              const std::string& op) const;

  mutable std::mutex mutex_;
  std::vector<QueueState> queues_;
  std::vector<BufferState> buffers_;
  std::size_t operations_ = 0;
};

}  // namespace hsdp::stream
