#include "hsdp/stream/queues.hpp"

#include <chrono>
#include <random>

#include "hsdp/core/error.hpp"
#include "hsdp/core/timer.hpp"

namespace hsdp::stream {

namespace {

// Sets a flag for the lifetime of a scope (advance_locked is not reentrant: a callback it runs may call back in).
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

StreamQueues::StreamQueues(StreamOptions options) : options_(options) {
  if (options_.check) checker_ = std::make_unique<StreamChecker>();
  workers_.push_back(std::make_unique<Worker>());
  workers_.front()->name = "host";
  workers_.front()->role = QueueRole::compute;
}

StreamQueues::~StreamQueues() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
  }
}

QueueId StreamQueues::make_queue(std::string name, QueueRole role) {
  const QueueId id = checker_ ? checker_->add_queue(name) : static_cast<QueueId>(workers_.size());
  if (static_cast<std::size_t>(id) != workers_.size()) throw_internal("stream queues: queue ids out of step");
  auto w = std::make_unique<Worker>();
  w->name = std::move(name);
  w->role = role;
  Worker& added = *w;
  {
    const std::lock_guard lock(mutex_);  // the workers read the list in their wait conditions
    workers_.push_back(std::move(w));
  }
  if (options_.threads) added.thread = std::thread([this, id] { run_worker(id); });
  return id;
}

BufferId StreamQueues::track(std::string name) {
  return checker_ ? checker_->add_buffer(std::move(name)) : -1;
}

void StreamQueues::rethrow() {
  std::exception_ptr failure;
  {
    const std::lock_guard lock(mutex_);
    failure = failure_;
  }
  if (failure) std::rethrow_exception(failure);
}

void StreamQueues::check(QueueId q, const std::string& name, const std::vector<BufferAccess>& accesses) {
  if (q < 0 || static_cast<std::size_t>(q) >= workers_.size()) {
    throw_internal("stream queues: no queue " + std::to_string(q));
  }
  if (checker_) checker_->operation(q, name, accesses);
}

bool StreamQueues::done(QueueId q, std::uint64_t seq) {
  return worker(q).done >= seq;
}

void StreamQueues::enqueue(QueueId q, std::string name, const std::vector<BufferAccess>& accesses,
                           std::function<void()> work) {
  rethrow();
  check(q, name, accesses);
  Worker& w = worker(q);
  if (q == StreamChecker::kHost || (!options_.threads && w.role == QueueRole::compute)) {
    run_traced(q, name, work);
    const std::lock_guard lock(mutex_);
    w.done = ++w.enqueued;
    return;
  }
  auto item = std::make_shared<Item>();
  item->kind = Kind::work;
  item->name = std::move(name);
  item->work = std::move(work);
  push(q, std::move(item));
}

void StreamQueues::collective(QueueId q, std::string name, std::vector<const void*> groups,
                              const std::vector<BufferAccess>& accesses, std::function<comm::CommHandle()> start) {
  rethrow();
  if (q == StreamChecker::kHost || worker(q).role != QueueRole::comm) {
    throw_internal("stream queues: collective '" + name + "' on a queue that is not a comm queue");
  }
  check(q, name, accesses);
  auto item = std::make_shared<Item>();
  item->kind = Kind::collective;
  item->name = std::move(name);
  item->start = std::move(start);
  {
    const std::lock_guard lock(mutex_);
    for (const void* g : groups) item->turns.emplace_back(g, group_enqueued_[g]++);
  }
  push(q, std::move(item));
}

void StreamQueues::push(QueueId q, std::shared_ptr<Item> item) {
  std::unique_lock lock(mutex_);
  item->seq = ++worker(q).enqueued;
  worker(q).items.push_back(std::move(item));
  if (options_.threads) {
    changed_.notify_all();
  }
  advance_locked(lock);
}

StreamEvent StreamQueues::record(QueueId q) {
  StreamEvent event;
  if (checker_) {
    event = checker_->record(q);
  } else {
    event.queue = q;
  }
  const std::lock_guard lock(mutex_);
  event.position = worker(q).enqueued;
  return event;
}

bool StreamQueues::happened(const StreamEvent& event) {
  if (event.queue < 0) return true;
  const std::lock_guard lock(mutex_);
  return done(event.queue, event.position);
}

void StreamQueues::wait(QueueId q, const StreamEvent& event) {
  rethrow();
  if (checker_) checker_->wait(q, event);
  if (event.queue < 0 || event.queue == q) return;
  if (q == StreamChecker::kHost || (!options_.threads && worker(q).role == QueueRole::compute)) {
    block_until(event.queue, event.position);
    return;
  }
  std::unique_lock lock(mutex_);
  if (done(event.queue, event.position) && worker(q).items.empty()) return;
  auto item = std::make_shared<Item>();
  item->kind = Kind::wait;
  item->wait_queue = event.queue;
  item->wait_seq = event.position;
  item->name = "wait for '" + worker(event.queue).name + "'";
  item->seq = ++worker(q).enqueued;
  worker(q).items.push_back(std::move(item));
  if (options_.threads) changed_.notify_all();
}

void StreamQueues::synchronize(const StreamEvent& event) {
  wait(StreamChecker::kHost, event);
}

void StreamQueues::host_read(BufferId b, const std::string& what) {
  if (checker_) checker_->host_read(b, what);
}

void StreamQueues::release(BufferId b, const StreamEvent& event, const std::string& what, std::function<void()> free) {
  if (checker_ && b >= 0) checker_->release(b, event, what);
  if (!free) return;
  if (happened(event)) {
    free();
    return;
  }
  const std::lock_guard lock(mutex_);
  releases_.push_back(Release{event.queue, event.position, std::move(free)});
}

void StreamQueues::progress() {
  rethrow();
  std::unique_lock lock(mutex_);
  advance_locked(lock);
}

void StreamQueues::drain() {
  for (std::size_t q = 1; q < workers_.size(); ++q) {
    std::uint64_t last = 0;
    {
      const std::lock_guard lock(mutex_);
      last = workers_[q]->enqueued;
    }
    block_until(static_cast<QueueId>(q), last);
  }
  std::unique_lock lock(mutex_);
  advance_locked(lock);
  if (!releases_.empty()) throw_internal("stream queues: a release waits for an event after every queue drained");
}

// The host's part: inline, it runs every queue's work that can run; with threads, the workers run the work and the
// host only issues and completes collectives. Then the releases whose events happened.
bool StreamQueues::advance_locked(std::unique_lock<std::mutex>& lock) {
  if (advancing_) return false;
  const Flag busy(advancing_);
  bool any = false;
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t qi = 1; qi < workers_.size(); ++qi) {
      Worker& w = *workers_[qi];
      while (!w.items.empty()) {
        const std::shared_ptr<Item> item = w.items.front();
        if (item->kind == Kind::work) {
          if (options_.threads) break;
          w.items.pop_front();
          lock.unlock();
          run_traced(static_cast<QueueId>(qi), item->name, item->work);
          lock.lock();
          w.done = item->seq;
          changed = true;
          continue;
        }
        if (item->kind == Kind::wait) {
          if (options_.threads || !done(item->wait_queue, item->wait_seq)) break;
          w.items.pop_front();
          w.done = item->seq;
          changed = true;
          continue;
        }
        if (item->state == CollectiveState::queued && !options_.threads) item->state = CollectiveState::ready;
        if (item->state == CollectiveState::ready) {
          bool turn = true;
          for (const auto& [g, place] : item->turns) turn = turn && group_started_[g] == place;
          if (!turn) break;
          item->issued_at = monotonic_seconds();
          lock.unlock();
          comm::CommHandle handle = item->start();
          lock.lock();
          item->handle = std::move(handle);
          item->state = CollectiveState::started;
          for (const auto& [g, place] : item->turns) ++group_started_[g];
          changed = true;
        }
        if (item->state != CollectiveState::started) break;
        lock.unlock();
        const bool finished = item->handle.done();
        lock.lock();
        if (!finished) break;
        const double completed = monotonic_seconds();
        if (collective_sink_) collective_sink_(item->issued_at, completed);
        if (span_sink_) span_sink_(w.name, item->name, item->issued_at, completed);
        item->state = CollectiveState::completed;
        changed = true;
        if (options_.threads) {  // the worker moves on
          changed_.notify_all();
          break;
        }
        w.items.pop_front();
        w.done = item->seq;
      }
    }
    for (std::size_t i = 0; i < releases_.size();) {
      if (!done(releases_[i].queue, releases_[i].seq)) {
        ++i;
        continue;
      }
      std::function<void()> free = std::move(releases_[i].free);
      releases_.erase(releases_.begin() + static_cast<std::ptrdiff_t>(i));
      lock.unlock();
      free();
      lock.lock();
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
  span_sink_(worker(q).name, name, begin, monotonic_seconds());
}

void StreamQueues::block_until(QueueId q, std::uint64_t seq) {
  const Stopwatch waited;
  const double begin = span_sink_ ? monotonic_seconds() : 0;
  std::unique_lock lock(mutex_);
  for (;;) {
    if (failure_) {
      const std::exception_ptr failure = failure_;
      lock.unlock();
      std::rethrow_exception(failure);
    }
    advance_locked(lock);
    if (done(q, seq)) break;
    if (options_.threads) {
      changed_.wait_for(lock, std::chrono::microseconds(50));
      continue;
    }
    if (!block_on_something(q, lock)) {
      throw_internal("stream queues: queue '" + worker(q).name + "' waits for work that nothing will run");
    }
  }
  host_waited_s_ += waited.seconds();
  if (span_sink_) span_sink_("host", "wait for " + worker(q).name, begin, monotonic_seconds());
}

// Inline: blocks on the collective queue q's head waits for, following waits and group turns. False if there is none.
bool StreamQueues::block_on_something(QueueId q, std::unique_lock<std::mutex>& lock) {
  QueueId at = q;
  for (std::size_t hops = 0; hops <= 2 * workers_.size() + 2; ++hops) {
    Worker& w = worker(at);
    if (w.items.empty()) return false;
    const std::shared_ptr<Item> item = w.items.front();
    if (item->kind == Kind::wait) {
      at = item->wait_queue;
      continue;
    }
    if (item->kind == Kind::work) return true;  // runnable: the next advance runs it
    if (item->state == CollectiveState::started) {
      lock.unlock();
      item->handle.wait();
      lock.lock();
      return true;
    }
    // Not its group's turn yet: follow the collective whose turn it is.
    QueueId next = -1;
    for (const auto& [g, place] : item->turns) {
      if (group_started_[g] == place) continue;
      for (std::size_t o = 1; o < workers_.size() && next < 0; ++o) {
        for (const auto& other : workers_[o]->items) {
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

void StreamQueues::run_worker(QueueId q) {
  std::mt19937_64 random(options_.seed * 1000003u + static_cast<std::uint64_t>(q));
  std::uniform_real_distribution<double> delay_us(0.0, options_.max_delay_us);
  std::unique_lock lock(mutex_);
  Worker& w = worker(q);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !w.items.empty(); });
    if (w.items.empty()) return;  // stopping, nothing left
    const std::shared_ptr<Item> item = w.items.front();
    if (item->kind == Kind::wait) {
      changed_.wait(lock, [&] { return stopping_ || done(item->wait_queue, item->wait_seq); });
      if (stopping_) return;
      w.items.pop_front();
      w.done = item->seq;
      changed_.notify_all();
      continue;
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(delay_us(random)));
    lock.lock();
    if (item->kind == Kind::collective) {
      item->state = CollectiveState::ready;  // the host issues it (progress, synchronize)
      changed_.notify_all();
      changed_.wait(lock, [&] { return stopping_ || item->state == CollectiveState::completed; });
      if (stopping_) return;
      w.items.pop_front();
    } else {
      w.items.pop_front();
      lock.unlock();
      try {
        run_traced(q, item->name, item->work);
      } catch (...) {
        const std::lock_guard failed(mutex_);
        if (!failure_) failure_ = std::current_exception();
      }
      lock.lock();
    }
    w.done = item->seq;
    changed_.notify_all();
  }
}

}  // namespace hsdp::stream
