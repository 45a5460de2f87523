#pragma once
// Queues of ordered work (CUDA streams on a GPU) for the CPU device, with the stream checker as an execution mode.
//
//   StreamQueues queues({.check = true, .threads = true, .seed = 7});
//   QueueId compute = queues.make_queue("compute", QueueRole::compute), gather = queues.make_queue("gather");
//   BufferId unit = queues.track("gathered unit 3");
//   queues.collective(gather, "all_gather unit 3", &group, {reads(shard), writes(unit)}, [&] { return
//   group.all_gather_async(...); }); StreamEvent gathered = queues.record(gather);     // after the all-gather and the
//   work enqueued behind it queues.wait(compute, gathered);                   // without it: the checker names both
//   operations and queues queues.enqueue(compute, "forward block 3", {reads(unit)}, [&] { ... }); queues.release(unit,
//   queues.record(compute), "free unit 3", [&] { free it });   // back to the pool after the event
//   queues.synchronize(queues.record(compute));       // the host waits (once a step: loss, norm, overflow)
//
// Work on a queue runs in the order it was enqueued; the work enqueued behind a collective runs after the collective
// has completed. Collectives are issued by the host thread (MPI is initialised FUNNELED; NCCL's proxy is the GPU's
// counterpart) when they reach the head of their queue and every collective enqueued before them on the same group
// has been issued: nonblocking collectives on one communicator must be issued in the same order on every rank, and
// this order is the program's, whatever the timing.
//
// Modes:
//   inline (default)  the host runs the work: work on a compute queue (and the host's) when enqueued, its waits
//                     blocking the host; work on a comm queue when enqueued if nothing is pending before it, else when
//                     the collective it follows is seen complete (progress(), at every wait). This is the synchronous
//                     CPU engine: collectives overlap compute, nothing else does.
//   check             every operation, event, wait, host read and release goes through a StreamChecker (the logical
//                     order: deterministic, independent of timing).
//   threads           each queue runs its work on a worker thread of its own, in order, after a random delay (seeded
//                     per queue: a seed replays the same delays); a wait holds the queue, synchronize() the host,
//                     until the event's work has run. With check, the values a run computes are then exposed to the
//                     timing a GPU's streams would have.
// The first exception a worker throws is kept and rethrown by the next call the host makes.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hsdp/comm/communicator.hpp"
#include "hsdp/stream/checker.hpp"

namespace hsdp::stream {

struct StreamOptions {
  bool check = false;
  bool threads = false;
  std::uint64_t seed = 1;
  double max_delay_us = 200;  // the random delay before each operation, uniform in [0, max)
};

// compute: the work the host would otherwise wait for anyway (inline: runs when enqueued, its waits block the host).
// comm: collectives and the work that follows them (inline: deferred behind a collective in flight).
enum class QueueRole { compute, comm };

class StreamQueues {
 public:
  explicit StreamQueues(StreamOptions options = {});
  ~StreamQueues();  // stops the workers (what is still enqueued is dropped: call drain() first)
  StreamQueues(const StreamQueues&) = delete;
  StreamQueues& operator=(const StreamQueues&) = delete;

  const StreamOptions& options() const { return options_; }
  QueueId make_queue(std::string name, QueueRole role = QueueRole::comm);
  // A buffer the checker follows (-1, and nothing followed, without check).
  BufferId track(std::string name);

  void enqueue(QueueId q, std::string name, const std::vector<BufferAccess>& accesses, std::function<void()> work);
  // A collective on `group` (any pointer naming the communicator; a list for an operation over several): `start`
  // issues it on the host thread and returns its handle; the queue's later work runs once the handle is done.
  void collective(QueueId q, std::string name, std::vector<const void*> groups,
                  const std::vector<BufferAccess>& accesses, std::function<comm::CommHandle()> start);
  StreamEvent record(QueueId q);
  void wait(QueueId q, const StreamEvent& event);
  // The host blocks until the event has happened, progressing collectives meanwhile.
  void synchronize(const StreamEvent& event);
  bool happened(const StreamEvent& event);
  void host_read(BufferId b, const std::string& what);
  // Buffer b goes back to its pool once `event` has happened: `free` runs then, on the host thread.
  void release(BufferId b, const StreamEvent& event, const std::string& what, std::function<void()> free = {});
  // Issues and completes collectives and runs the work behind them as far as possible without blocking.
  void progress();
  // The host waits for every queue, and every release runs.
  void drain();

  // Each collective's (issue, observed completion) in monotonic seconds, as it completes.
  void on_collective(std::function<void(double, double)> sink) { collective_sink_ = std::move(sink); }
  // Every operation as it ends (trace): the queue's name, the operation's, and its begin and end in monotonic
  // seconds. Work: while it ran (on a worker thread too: the sink must be thread-safe); a collective: issue to
  // observed completion; the host's blocking waits: "wait for <queue>" on queue "host".
  using SpanSink = std::function<void(const std::string& queue, const std::string& name, double begin, double end)>;
  void on_span(SpanSink sink) { span_sink_ = std::move(sink); }
  // Seconds the host spent blocked in synchronize(), wait() on a compute queue (inline) and drain().
  double host_waited_s() const { return host_waited_s_; }

  // The checker (null without check).
  const StreamChecker* checker() const { return checker_.get(); }

 private:
  enum class Kind { work, wait, collective };
  enum class CollectiveState { queued, ready, started, completed };
  struct Item {
    Kind kind = Kind::work;
    std::uint64_t seq = 0;  // the place in the queue's order (waits included)
    std::string name;
    std::function<void()> work;
    QueueId wait_queue = -1;  // a wait: until that queue has run its items up to wait_seq
    std::uint64_t wait_seq = 0;
    std::function<comm::CommHandle()> start;
    std::vector<std::pair<const void*, std::uint64_t>> turns;  // (group, place in the group's order)
    CollectiveState state = CollectiveState::queued;
    comm::CommHandle handle;
    double issued_at = 0;
  };
  struct Worker {
    std::string name;
    QueueRole role = QueueRole::comm;
    std::deque<std::shared_ptr<Item>> items;
    std::uint64_t enqueued = 0;  // items enqueued (waits included)
    std::uint64_t done = 0;      // items run
    std::thread thread;
  };
  struct Release {
    QueueId queue = -1;
    std::uint64_t seq = 0;
    std::function<void()> free;
  };

  void check(QueueId q, const std::string& name, const std::vector<BufferAccess>& accesses);
  void push(QueueId q, std::shared_ptr<Item> item);
  bool done(QueueId q, std::uint64_t seq);                  // under mutex_
  bool advance_locked(std::unique_lock<std::mutex>& lock);  // inline: runs what can run; threads: the collectives
  void block_until(QueueId q, std::uint64_t seq);
  bool block_on_something(QueueId q, std::unique_lock<std::mutex>& lock);
  void run_worker(QueueId q);
  void rethrow();
  void run_traced(QueueId q, const std::string& name, const std::function<void()>& work);
  Worker& worker(QueueId q) { return *workers_.at(static_cast<std::size_t>(q)); }

  StreamOptions options_;
  std::unique_ptr<StreamChecker> checker_;
  std::vector<std::unique_ptr<Worker>> workers_;  // [0] the host (no thread)
  std::map<const void*, std::uint64_t> group_enqueued_, group_started_;
  std::vector<Release> releases_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  bool advancing_ = false;
  std::exception_ptr failure_;
  std::function<void(double, double)> collective_sink_;
  SpanSink span_sink_;
  double host_waited_s_ = 0;
};

}  // namespace hsdp::stream
