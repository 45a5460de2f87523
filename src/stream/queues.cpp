#include "hsdp/stream/queues.hpp"

#include "hsdp/core/error.hpp"
#include "hsdp/core/timer.hpp"

namespace hsdp::stream {

// Filled when the queue's work up to the event's position has been handed to the executor.
struct EventPoint {
  std::uint64_t position = 0;
  bool reached = false;
  ExecEvent exec;
  CheckerEvent checked;
};

namespace {

// Sets a flag for the lifetime of a scope (advance is not reentrant: a callback it runs may call back in).
class Flag {
 public:
  explicit Flag(bool& flag) : flag_(flag) { flag_ = true; }
  ~Flag() { flag_ = false; }
  Flag(const Flag&) = delete;
  Flag& operator=(const Flag&) = delete;

 private:
  bool& flag_;
};

}  // namespace

StreamQueues::StreamQueues(StreamOptions options, std::unique_ptr<Executor> executor)
    : options_(options), executor_(std::move(executor)) {
  if (!executor_ && options_.make_executor) executor_ = options_.make_executor(options_);
  if (!executor_) {
    executor_ = options_.threads ? make_threads_executor(options_.seed, options_.max_delay_us) : make_inline_executor();
  }
  if (options_.check) checker_ = std::make_unique<StreamChecker>();
  auto host = std::make_unique<Queue>();
  host->name = "host";
  host->role = QueueRole::compute;
  queues_.push_back(std::move(host));
}

StreamQueues::~StreamQueues() {
  // Handles of collectives still held wait for them as they go; the executor stops after the queues.
  queues_.clear();
  executor_.reset();
}

StreamQueues::Queue& StreamQueues::queue(QueueId q) {
  if (q < 0 || static_cast<std::size_t>(q) >= queues_.size()) {
    throw_internal("stream queues: no queue " + std::to_string(q));
  }
  return *queues_[static_cast<std::size_t>(q)];
}

QueueId StreamQueues::make_queue(std::string name, QueueRole role) {
  const QueueId id = checker_ ? checker_->add_queue(name) : static_cast<QueueId>(queues_.size());
  if (static_cast<std::size_t>(id) != queues_.size()) throw_internal("stream queues: queue ids out of step");
  auto q = std::make_unique<Queue>();
  q->stream = executor_->make_stream(name, role == QueueRole::compute);
  q->name = std::move(name);
  q->role = role;
  queues_.push_back(std::move(q));
  return id;
}

BufferId StreamQueues::track(std::string name) {
  return checker_ ? checker_->add_buffer(std::move(name)) : -1;
}

CheckerEvent StreamQueues::host_order() {
  return checker_ ? checker_->record(StreamChecker::kHost) : CheckerEvent{};
}

void StreamQueues::enqueue(QueueId q, std::string name, const std::vector<BufferAccess>& accesses,
                           std::function<void()> work) {
  executor_->rethrow();
  Queue& w = queue(q);
  if (q == StreamChecker::kHost) {
    if (checker_) checker_->operation(q, name, accesses);
    run_traced(q, name, work);
    w.handed = ++w.enqueued;
    return;
  }
  auto item = std::make_shared<Item>();
  item->kind = Kind::work;
  item->name = std::move(name);
  item->accesses = accesses;
  item->host = host_order();
  item->work = std::move(work);
  push(q, std::move(item));
}

void StreamQueues::collective(QueueId q, std::string name, std::vector<const void*> groups,
                              const std::vector<BufferAccess>& accesses, std::function<comm::CommHandle()> start) {
  executor_->rethrow();
  if (q == StreamChecker::kHost || queue(q).role != QueueRole::comm) {
    throw_internal("stream queues: collective '" + name + "' on a queue that is not a comm queue");
  }
  auto item = std::make_shared<Item>();
  item->kind = Kind::collective;
  item->name = std::move(name);
  item->accesses = accesses;
  item->host = host_order();
  item->start = std::move(start);
  for (const void* g : groups) item->turns.emplace_back(g, group_enqueued_[g]++);
  push(q, std::move(item));
}

void StreamQueues::push(QueueId q, std::shared_ptr<Item> item) {
  Queue& w = queue(q);
  item->seq = ++w.enqueued;
  if (executor_->synchronous() && w.role == QueueRole::compute && w.held.empty() && item->kind == Kind::work) {
    // The synchronous engine's compute runs here, outside advance(): the model's polls between its kernels
    // (progress()) then move the comm queues while it runs.
    hand_over(q, *item);
    handed(q, item->seq);
    return;
  }
  w.held.push_back(std::move(item));
  advance();
}

StreamEvent StreamQueues::record(QueueId q) {
  Queue& w = queue(q);
  StreamEvent event{q, std::make_shared<EventPoint>()};
  event.point->position = w.enqueued;
  if (w.handed == w.enqueued) {
    reach(q, *event.point);
  } else {
    w.points.push_back(event.point);
  }
  return event;
}

void StreamQueues::reach(QueueId q, EventPoint& point) {
  if (q != StreamChecker::kHost) point.exec = executor_->record(queue(q).stream);
  if (checker_) point.checked = checker_->record(q);
  point.reached = true;
}

// Items up to seq of queue q are with the executor: the events recorded there exist now.
void StreamQueues::handed(QueueId q, std::uint64_t seq) {
  Queue& w = queue(q);
  w.handed = seq;
  bool reached = false;
  while (!w.points.empty() && w.points.front()->position <= seq) {
    reach(q, *w.points.front());
    w.points.pop_front();
    reached = true;
  }
  // A release takes its place in the checker's order where its event does: work handed over after this point
  // touches memory that went back to its pool.
  for (Release& r : releases_) {
    if (!reached || r.buffer < 0 || !r.event.point->reached) continue;
    check_release(r);
    r.buffer = -1;
  }
}

bool StreamQueues::happened(const StreamEvent& event) {
  if (event.queue < 0) return true;
  return event.point->reached && executor_->query(event.point->exec);
}

void StreamQueues::wait(QueueId q, const StreamEvent& event) {
  executor_->rethrow();
  if (event.queue < 0 || event.queue == q) return;
  if (q == StreamChecker::kHost) {
    synchronize(event);
    return;
  }
  if (executor_->synchronous() && queue(q).role == QueueRole::compute) {
    // Compute runs when enqueued: the host waits here, and the wait reaches the executor at once.
    const Stopwatch waited;
    const double begin = span_sink_ ? monotonic_seconds() : 0;
    block_until_reached(event);
    host_waited_s_ += waited.seconds();
    if (span_sink_) span_sink_("host", "wait for " + queue(event.queue).name, begin, monotonic_seconds());
  }
  auto item = std::make_shared<Item>();
  item->kind = Kind::wait;
  item->name = "wait for '" + queue(event.queue).name + "'";
  item->awaited = event;
  push(q, std::move(item));
}

void StreamQueues::synchronize(const StreamEvent& event) {
  executor_->rethrow();
  if (event.queue < 0) return;
  const Stopwatch waited;
  const double begin = span_sink_ ? monotonic_seconds() : 0;
  block_until_reached(event);
  executor_->synchronize(event.point->exec);
  executor_->rethrow();
  if (checker_) checker_->synchronize(event.point->checked);
  advance();  // releases that waited for it
  host_waited_s_ += waited.seconds();
  if (span_sink_) span_sink_("host", "wait for " + queue(event.queue).name, begin, monotonic_seconds());
}

void StreamQueues::host_read(BufferId b, const std::string& what) {
  if (checker_) checker_->host_read(b, what);
}

void StreamQueues::check_release(const Release& r) {
  if (!checker_ || r.buffer < 0) return;
  checker_->release(r.buffer, r.event.queue < 0 ? CheckerEvent{} : r.event.point->checked, r.what);
}

void StreamQueues::release(BufferId b, const StreamEvent& event, const std::string& what, std::function<void()> free) {
  Release r{event, b, what, std::move(free)};
  // Checked now where the event's order is known already, so that a later access is named as one after the release.
  if (event.queue < 0 || event.point->reached) {
    check_release(r);
    r.buffer = -1;
  }
  if (happened(event)) {
    if (r.free) r.free();
    return;
  }
  releases_.push_back(std::move(r));
}

void StreamQueues::progress() {
  executor_->rethrow();
  advance();
}

void StreamQueues::drain() {
  for (std::size_t q = 1; q < queues_.size(); ++q) synchronize(record(static_cast<QueueId>(q)));
  advance();
  if (!releases_.empty()) throw_internal("stream queues: a release waits for an event after every queue drained");
}

// Hands queue q's first held item to the executor if it can go now (a collective: issues it, or sees it complete).
bool StreamQueues::hand_over(QueueId q, Item& item) {
  Queue& w = queue(q);
  switch (item.kind) {
    case Kind::work:
      if (checker_) checker_->operation(q, item.host, item.name, item.accesses);
      if (span_sink_) {
        executor_->enqueue_timed(w.stream, std::move(item.work),
                                 [sink = span_sink_, queue_name = w.name, name = item.name](double begin, double end) {
                                   sink(queue_name, name, begin, end);
                                 });
      } else {
        executor_->enqueue(w.stream, std::move(item.work));
      }
      return true;
    case Kind::wait: {
      const EventPoint& awaited = *item.awaited.point;
      if (!awaited.reached) return false;
      executor_->wait(w.stream, awaited.exec, [&] {
        if (checker_) checker_->wait(q, awaited.checked);
      });
      return true;
    }
    case Kind::collective: {
      if (item.state == CollectiveState::queued) {
        for (const auto& [g, place] : item.turns) {
          if (group_started_[g] != place) return false;
        }
        if (!item.before_recorded) {
          item.before = executor_->record(w.stream);
          item.before_recorded = true;
        }
        if (!executor_->query(item.before)) return false;
        if (checker_) checker_->operation(q, item.host, item.name, item.accesses);
        item.issued_at = monotonic_seconds();
        item.handle = item.start();
        item.state = CollectiveState::started;
        for (const auto& [g, place] : item.turns) ++group_started_[g];
      }
      if (!item.handle.done()) return false;
      const double completed = monotonic_seconds();
      if (collective_sink_) collective_sink_(item.issued_at, completed);
      if (span_sink_) span_sink_(w.name, item.name, item.issued_at, completed);
      return true;
    }
  }
  return false;
}

bool StreamQueues::advance() {
  if (advancing_) return false;
  const Flag busy(advancing_);
  bool any = false;
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t qi = 1; qi < queues_.size(); ++qi) {
      Queue& w = *queues_[qi];
      while (!w.held.empty()) {
        const std::shared_ptr<Item> item = w.held.front();
        const bool was_queued = item->kind == Kind::collective && item->state == CollectiveState::queued;
        if (!hand_over(static_cast<QueueId>(qi), *item)) {
          // Issued, not complete: another group's turn may have come.
          changed = changed || (was_queued && item->state == CollectiveState::started);
          break;
        }
        w.held.pop_front();
        handed(static_cast<QueueId>(qi), item->seq);
        changed = true;
      }
    }
    for (std::size_t i = 0; i < releases_.size();) {
      if (!happened(releases_[i].event)) {
        ++i;
        continue;
      }
      Release r = std::move(releases_[i]);
      releases_.erase(releases_.begin() + static_cast<std::ptrdiff_t>(i));
      check_release(r);
      if (r.free) r.free();
      changed = true;
    }
    any = any || changed;
  }
  return any;
}

void StreamQueues::run_traced(QueueId q, const std::string& name, const std::function<void()>& work) {
  if (!span_sink_) {
    work();
    return;
  }
  const double begin = monotonic_seconds();
  work();
  span_sink_(queue(q).name, name, begin, monotonic_seconds());
}

// The host progresses until the queue's work up to the event has been handed to the executor.
void StreamQueues::block_until_reached(const StreamEvent& event) {
  for (;;) {
    executor_->rethrow();
    advance();
    if (event.point->reached) return;
    if (!block_on_something(event.queue)) {
      throw_internal("stream queues: queue '" + queue(event.queue).name + "' waits for work that nothing will run");
    }
  }
}

// Blocks on what holds queue q's first item back, following waits and group turns. False if nothing does.
bool StreamQueues::block_on_something(QueueId q) {
  QueueId at = q;
  for (std::size_t hops = 0; hops <= 2 * queues_.size() + 2; ++hops) {
    Queue& w = queue(at);
    if (w.held.empty()) return false;
    const std::shared_ptr<Item> item = w.held.front();
    if (item->kind == Kind::wait) {
      at = item->awaited.queue;
      continue;
    }
    if (item->kind == Kind::work) return true;  // it can go: the next advance hands it over
    if (item->state == CollectiveState::started) {
      item->handle.wait();
      return true;
    }
    bool turn = true;
    for (const auto& [g, place] : item->turns) turn = turn && group_started_[g] == place;
    if (turn) {
      if (item->before_recorded) executor_->synchronize(item->before);
      return true;
    }
    // Not its group's turn yet: follow the collective whose turn it is.
    QueueId next = -1;
    for (const auto& [g, place] : item->turns) {
      if (group_started_[g] == place) continue;
      for (std::size_t o = 1; o < queues_.size() && next < 0; ++o) {
        for (const auto& other : queues_[o]->held) {
          if (other->kind != Kind::collective) continue;
          for (const auto& [og, oplace] : other->turns) {
            if (og == g && oplace == group_started_[g]) next = static_cast<QueueId>(o);
          }
        }
      }
      break;
    }
    if (next < 0) return false;
    at = next;
  }
  return false;
}

}  // namespace hsdp::stream
