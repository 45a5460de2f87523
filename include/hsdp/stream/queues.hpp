#pragma once
// Queues of ordered work (CUDA streams on a GPU) over an executor (executor.hpp), with the stream checker.
//
//   StreamQueues queues({.check = true, .threads = true, .seed = 7});
//   QueueId compute = queues.make_queue("compute", QueueRole::compute), gather = queues.make_queue("gather");
//   BufferId unit = queues.track("gathered unit 3");
//   queues.collective(gather, "all_gather unit 3", {&group}, {reads(shard), writes(unit)},
//                     [&] { return group.all_gather_async(...); });
//   StreamEvent gathered = queues.record(gather);  // after the all-gather and the work enqueued behind it
//   queues.wait(compute, gathered);                // without it: the checker names both operations and queues
//   queues.enqueue(compute, "forward block 3", {reads(unit)}, [&] { ... });
//   queues.release(unit, queues.record(compute), "free unit 3", [&] { free it });  // back to its pool after the event
//   queues.synchronize(queues.record(compute));    // the host waits (once a step: loss, norm, overflow)
//
// Each queue is a stream of the executor. What the queues add to it:
//   - a collective is issued by the host (MPI is initialised FUNNELED; NCCL is called from the host too) once the
//     work enqueued before it on its queue has completed and every collective enqueued before it on the same group
//     has been issued: nonblocking collectives on one communicator must start in the same order on every rank, and
//     this order is the program's, whatever the timing. The work enqueued behind it reaches the executor once the
//     host has seen it complete;
//   - a wait for another queue's event reaches the executor once that queue's work up to the event has (the
//     executor's event exists then);
//   - a release's `free` runs on the host once its event has happened;
//   - the checker sees every operation, event and wait in the order the executor receives them (a wait once the
//     executor has put it in place), so it checks what the executor was told, and an executor that loses a wait is
//     caught.
// Work and waits reach the executor when enqueued unless something held before them on their queue keeps them
// back; the host moves what it can whenever it is inside a queue call (progress(), waits, synchronize()).
//
// Options (device.streams):
//   inline (default)  the inline executor: the host runs the work when it reaches the executor; a compute queue's
//                     waits block the host (the synchronous CPU engine: collectives overlap compute, nothing else).
//   check             every operation, event, wait, host read and release goes through a StreamChecker.
//   threads           the threads executor: each queue on a worker thread of its own, CUDA's rules, random delays
//                     (a seed replays them). With check, the values a run computes are exposed to the timing a
//                     GPU's streams could have, and must not change.
// An executor given to the constructor, or made by StreamOptions::make_executor, replaces both (the CUDA executor,
// cuda/executor.hpp).
// The first exception work throws off the host thread is rethrown by the next call the host makes.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hsdp/comm/communicator.hpp"
#include "hsdp/stream/checker.hpp"
#include "hsdp/stream/executor.hpp"

namespace hsdp::stream {

struct StreamOptions {
  bool check = false;
  bool threads = false;
  std::uint64_t seed = 1;
  double max_delay_us = 200;  // the threads executor's random delay before each item, uniform in [0, max)
  // Makes the executor (the CUDA executor on a GPU; tests); empty: inline, or threads with `threads`.
  std::function<std::unique_ptr<Executor>(const StreamOptions&)> make_executor = {};
};

// compute: the work the host would otherwise wait for anyway (inline: its waits block the host).
// comm: collectives and the work that follows them.
enum class QueueRole { compute, comm };

// A point of a queue's order: everything enqueued to it before record() was called. Copies share its state.
struct EventPoint;
struct StreamEvent {
  QueueId queue = -1;  // -1: the empty event (covers nothing, has happened)
  std::shared_ptr<EventPoint> point;
};

class StreamQueues {
 public:
  explicit StreamQueues(StreamOptions options = {}, std::unique_ptr<Executor> executor = nullptr);
  ~StreamQueues();  // the executor stops (what it has not run is dropped: call drain() first)
  StreamQueues(const StreamQueues&) = delete;
  StreamQueues& operator=(const StreamQueues&) = delete;

  const StreamOptions& options() const { return options_; }
  Executor& executor() { return *executor_; }
  QueueId make_queue(std::string name, QueueRole role = QueueRole::comm);
  // A buffer the checker follows (-1, and nothing followed, without check).
  BufferId track(std::string name);

  void enqueue(QueueId q, std::string name, const std::vector<BufferAccess>& accesses, std::function<void()> work);
  // A collective on `groups` (any pointers naming the communicators it runs on): `start` issues it on the host
  // thread and returns its handle; the queue's later work runs once the handle is done.
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
  // Issues and completes collectives and hands the executor what it can, without blocking.
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
  enum class CollectiveState { queued, started };
  struct Item {
    Kind kind = Kind::work;
    std::uint64_t seq = 0;  // the place in the queue's order (waits included)
    std::string name;
    std::vector<BufferAccess> accesses;
    CheckerEvent host;  // the host's order when it enqueued the item (check)
    std::function<void()> work;
    StreamEvent awaited;  // a wait
    std::function<comm::CommHandle()> start;
    std::vector<std::pair<const void*, std::uint64_t>> turns;  // (group, place in the group's order)
    CollectiveState state = CollectiveState::queued;
    bool before_recorded = false;
    ExecEvent before;  // the queue's work before the collective
    comm::CommHandle handle;
    double issued_at = 0;
  };
  struct Queue {
    std::string name;
    QueueRole role = QueueRole::comm;
    int stream = -1;                                 // the executor's
    std::deque<std::shared_ptr<Item>> held;          // enqueued, not handed to the executor yet
    std::uint64_t enqueued = 0;                      // items enqueued (waits included)
    std::uint64_t handed = 0;                        // items handed to the executor (a collective: completed)
    std::deque<std::shared_ptr<EventPoint>> points;  // recorded, not reached yet, in order
  };
  struct Release {
    StreamEvent event;
    BufferId buffer = -1;
    std::string what;
    std::function<void()> free;
  };

  Queue& queue(QueueId q);
  CheckerEvent host_order();
  void push(QueueId q, std::shared_ptr<Item> item);
  void reach(QueueId q, EventPoint& point);
  void handed(QueueId q, std::uint64_t seq);
  bool advance();  // hands the executor what it can, issues and completes collectives, runs releases
  bool hand_over(QueueId q, Item& item);
  void check_release(const Release& r);
  void block_until_reached(const StreamEvent& event);
  bool block_on_something(QueueId q);
  void run_traced(QueueId q, const std::string& name, const std::function<void()>& work);

  StreamOptions options_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<StreamChecker> checker_;
  std::vector<std::unique_ptr<Queue>> queues_;  // [0] the host
  std::map<const void*, std::uint64_t> group_enqueued_, group_started_;
  std::vector<Release> releases_;
  bool advancing_ = false;
  std::function<void(double, double)> collective_sink_;
  SpanSink span_sink_;
  double host_waited_s_ = 0;
};

}  // namespace hsdp::stream
