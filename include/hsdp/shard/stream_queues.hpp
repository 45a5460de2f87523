#pragma once
// Queues of ordered work for the CPU device, with the stream checker as an execution mode.
//
//   StreamQueues queues({.check = true, .threads = true, .seed = 7});
//   QueueId gather = queues.make_queue("gather"), compute = queues.make_queue("compute");
//   BufferId unit = queues.track("gathered unit 3");
//   queues.enqueue(gather, "all_gather unit 3", {writes(unit)}, [&] { ... });
//   StreamEvent gathered = queues.record(gather);
//   queues.wait(compute, gathered);                  // without it: the checker names both operations and queues
//   queues.enqueue(compute, "forward block 3", {reads(unit)}, [&] { ... });
//   queues.release(unit, queues.record(compute), "free unit 3");
//   queues.synchronize(queues.record(compute));       // the host waits (once a step: loss, norm, overflow)
//
// Modes:
//   inline (default)  work runs in the calling thread when enqueued: today's synchronous CPU engine, no overhead
//                     beyond the call; events complete at once.
//   check             every operation, event, wait, host read and release goes through a StreamChecker (logical
//                     order: deterministic, independent of timing).
//   threads           each queue runs its work on a worker thread of its own, in order, after a random delay
//                     (seeded per queue: a seed replays the same delays); wait() blocks the queue, synchronize() the
//                     host, until the event's work has run. With check, the values a run computes are then
//                     exposed to the timing a GPU's streams would have.
// The first exception a worker throws is kept and rethrown by the next call the host makes.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hsdp/shard/stream_checker.hpp"

namespace hsdp::shard {

struct StreamOptions {
  bool check = false;
  bool threads = false;
  std::uint64_t seed = 1;
  double max_delay_us = 200;  // the random delay before each operation, uniform in [0, max)
};

class StreamQueues {
 public:
  explicit StreamQueues(StreamOptions options = {});
  ~StreamQueues();  // runs what is enqueued, then stops the workers
  StreamQueues(const StreamQueues&) = delete;
  StreamQueues& operator=(const StreamQueues&) = delete;

  const StreamOptions& options() const { return options_; }
  QueueId make_queue(std::string name);
  // A buffer the checker follows (-1, and nothing followed, without check).
  BufferId track(std::string name);

  void enqueue(QueueId q, std::string name, std::initializer_list<BufferAccess> accesses, std::function<void()> work);
  StreamEvent record(QueueId q);
  void wait(QueueId q, const StreamEvent& event);
  void synchronize(const StreamEvent& event);
  void host_read(BufferId b, const std::string& what);
  void release(BufferId b, const StreamEvent& event, const std::string& what);
  // The host waits for every queue.
  void drain();

  // The checker (null without check).
  const StreamChecker* checker() const { return checker_.get(); }

 private:
  struct Item {
    std::uint64_t tick = 0;  // this queue's work: its place in the queue's order; 0 for a wait
    std::function<void()> work;
    QueueId wait_queue = -1;  // a wait: until that queue has run its work up to wait_tick
    std::uint64_t wait_tick = 0;
  };
  struct Worker {
    std::string name;
    std::deque<Item> items;
    std::uint64_t enqueued = 0;  // ticks handed out (without check)
    std::uint64_t done = 0;      // ticks run
    std::thread thread;
  };

  void run_worker(QueueId q);
  void wait_for(QueueId q, std::uint64_t tick);  // the calling thread, until queue q has run up to tick
  void rethrow();
  Worker& worker(QueueId q) { return *workers_.at(static_cast<std::size_t>(q)); }

  StreamOptions options_;
  std::unique_ptr<StreamChecker> checker_;
  std::vector<std::unique_ptr<Worker>> workers_;  // [0] the host (no thread)
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  std::exception_ptr failure_;
};

}  // namespace hsdp::shard
