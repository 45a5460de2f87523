#include "hsdp/stream/checker.hpp"

#include <algorithm>

#include "hsdp/core/error.hpp"

namespace hsdp::stream {

StreamChecker::StreamChecker() {
  add_queue("host");
}

QueueId StreamChecker::add_queue(std::string name) {
  const std::lock_guard lock(mutex_);
  queues_.push_back(QueueState{std::move(name), {}});
  return static_cast<QueueId>(queues_.size() - 1);
}

BufferId StreamChecker::add_buffer(std::string name) {
  const std::lock_guard lock(mutex_);
  buffers_.push_back(BufferState{std::move(name), {}, {}, false, {}});
  return static_cast<BufferId>(buffers_.size() - 1);
}

std::vector<std::uint64_t>& StreamChecker::clock_of(QueueId q) {
  if (q < 0 || static_cast<std::size_t>(q) >= queues_.size())
    throw_internal("stream checker: no queue " + std::to_string(q));
  auto& clock = queues_[static_cast<std::size_t>(q)].clock;
  if (clock.size() < queues_.size()) clock.resize(queues_.size(), 0);
  return clock;
}

bool StreamChecker::ordered(const Stamp& before, const std::vector<std::uint64_t>& clock) {
  if (before.queue < 0) return true;
  const auto q = static_cast<std::size_t>(before.queue);
  return q < clock.size() && clock[q] >= before.tick;
}

void StreamChecker::violation(const std::string& what, const BufferState& b, const Stamp& earlier, QueueId q,
                              const std::string& op) const {
  throw Error(ErrorKind::internal, "stream checker: buffer '" + b.name + "': " + what + " by '" + op + "' on queue '" +
                                       queues_[static_cast<std::size_t>(q)].name + "' is not ordered after '" +
                                       earlier.op + "' on queue '" +
                                       queues_[static_cast<std::size_t>(earlier.queue)].name +
                                       "' (no event of that queue was waited for in between)");
}

std::uint64_t StreamChecker::operation(QueueId q, const std::string& name, std::span<const BufferAccess> accesses) {
  const std::lock_guard lock(mutex_);
  auto& clock = clock_of(q);
  if (q != kHost) {
    // The host enqueues this work after everything it did and waited for: ordered after it.
    const auto& host = clock_of(kHost);
    for (std::size_t i = 0; i < host.size(); ++i) clock[i] = std::max(clock[i], host[i]);
  }
  return check_and_record(q, name, accesses);
}

std::uint64_t StreamChecker::operation(QueueId q, const CheckerEvent& host, const std::string& name,
                                       std::span<const BufferAccess> accesses) {
  const std::lock_guard lock(mutex_);
  auto& clock = clock_of(q);
  for (std::size_t i = 0; i < host.clock.size() && i < clock.size(); ++i) clock[i] = std::max(clock[i], host.clock[i]);
  return check_and_record(q, name, accesses);
}

std::uint64_t StreamChecker::check_and_record(QueueId q, const std::string& name,
                                              std::span<const BufferAccess> accesses) {
  auto& clock = clock_of(q);
  ++clock[static_cast<std::size_t>(q)];
  const Stamp now{q, clock[static_cast<std::size_t>(q)], name};
  for (const BufferAccess& a : accesses) {
    if (a.buffer < 0 || static_cast<std::size_t>(a.buffer) >= buffers_.size()) {
      throw_internal("stream checker: '" + name + "' touches an unknown buffer");
    }
    BufferState& b = buffers_[static_cast<std::size_t>(a.buffer)];
    if (b.released) {
      throw Error(ErrorKind::internal, "stream checker: buffer '" + b.name + "': '" + name + "' on queue '" +
                                           queues_[static_cast<std::size_t>(q)].name +
                                           "' touches it after it went back to its pool ('" + b.released_by + "')");
    }
    if (!ordered(b.last_write, clock)) {
      violation(a.mode == AccessMode::read ? "a read" : "a write", b, b.last_write, q, name);
    }
    if (a.mode == AccessMode::write) {
      for (const Stamp& r : b.reads) {
        if (!ordered(r, clock)) violation("a write over what it reads", b, r, q, name);
      }
    }
  }
  for (const BufferAccess& a : accesses) {
    BufferState& b = buffers_[static_cast<std::size_t>(a.buffer)];
    if (a.mode == AccessMode::write) {
      b.last_write = now;
      b.reads.clear();
    } else {
      // One read per queue is enough: a later read on a queue is ordered after its earlier ones.
      auto same = std::find_if(b.reads.begin(), b.reads.end(), [q](const Stamp& s) { return s.queue == q; });
      if (same == b.reads.end()) {
        b.reads.push_back(now);
      } else {
        *same = now;
      }
    }
  }
  ++operations_;
  return now.tick;
}

CheckerEvent StreamChecker::record(QueueId q) {
  const std::lock_guard lock(mutex_);
  return CheckerEvent{q, clock_of(q)};
}

void StreamChecker::wait(QueueId q, const CheckerEvent& event) {
  const std::lock_guard lock(mutex_);
  auto& clock = clock_of(q);
  for (std::size_t i = 0; i < event.clock.size() && i < clock.size(); ++i)
    clock[i] = std::max(clock[i], event.clock[i]);
}

void StreamChecker::host_read(BufferId b, const std::string& what) {
  const BufferAccess access = reads(b);
  operation(kHost, what, std::span(&access, 1));
}

void StreamChecker::release(BufferId id, const CheckerEvent& event, const std::string& what) {
  const std::lock_guard lock(mutex_);
  BufferState& b = buffers_.at(static_cast<std::size_t>(id));
  const QueueId q = event.queue < 0 ? kHost : event.queue;
  const auto& clock = event.clock;
  if (!ordered(b.last_write, clock)) violation("release to the pool (" + what + ")", b, b.last_write, q, what);
  for (const Stamp& r : b.reads) {
    if (!ordered(r, clock)) violation("release to the pool (" + what + ")", b, r, q, what);
  }
  b.released = true;
  b.released_by = what + "' after an event of queue '" + queues_[static_cast<std::size_t>(q)].name;
}

}  // namespace hsdp::stream
