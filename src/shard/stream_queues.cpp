#include "hsdp/shard/stream_queues.hpp"

#include <chrono>
#include <random>

#include "hsdp/core/error.hpp"

namespace hsdp::shard {

StreamQueues::StreamQueues(StreamOptions options) : options_(options) {
  if (options_.check) checker_ = std::make_unique<StreamChecker>();
  workers_.push_back(std::make_unique<Worker>());
  workers_.front()->name = "host";
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

QueueId StreamQueues::make_queue(std::string name) {
  const QueueId id = checker_ ? checker_->add_queue(name) : static_cast<QueueId>(workers_.size());
  if (static_cast<std::size_t>(id) != workers_.size()) throw_internal("stream queues: queue ids out of step");
  auto w = std::make_unique<Worker>();
  w->name = std::move(name);
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

void StreamQueues::enqueue(QueueId q, std::string name, std::initializer_list<BufferAccess> accesses,
                           std::function<void()> work) {
  rethrow();
  Worker& w = worker(q);
  const std::uint64_t tick = checker_ ? checker_->operation(q, name, accesses) : w.enqueued + 1;
  if (!options_.threads || q == StreamChecker::kHost) {
    w.enqueued = tick;
    work();
    w.done = tick;
    return;
  }
  {
    const std::lock_guard lock(mutex_);
    w.enqueued = tick;
    w.items.push_back(Item{tick, std::move(work), -1, 0});
  }
  changed_.notify_all();
}

StreamEvent StreamQueues::record(QueueId q) {
  if (checker_) return checker_->record(q);
  StreamEvent event{q, std::vector<std::uint64_t>(static_cast<std::size_t>(q) + 1, 0)};
  event.clock.back() = worker(q).enqueued;
  return event;
}

void StreamQueues::wait(QueueId q, const StreamEvent& event) {
  if (checker_) checker_->wait(q, event);
  if (!options_.threads || event.queue < 0) return;
  const std::uint64_t tick = event.clock.at(static_cast<std::size_t>(event.queue));
  if (q == StreamChecker::kHost) {
    wait_for(event.queue, tick);
    rethrow();
    return;
  }
  {
    const std::lock_guard lock(mutex_);
    worker(q).items.push_back(Item{0, {}, event.queue, tick});
  }
  changed_.notify_all();
}

void StreamQueues::synchronize(const StreamEvent& event) {
  wait(StreamChecker::kHost, event);
}

void StreamQueues::host_read(BufferId b, const std::string& what) {
  if (checker_) checker_->host_read(b, what);
}

void StreamQueues::release(BufferId b, const StreamEvent& event, const std::string& what) {
  if (checker_) checker_->release(b, event, what);
}

void StreamQueues::drain() {
  if (options_.threads) {
    for (std::size_t q = 1; q < workers_.size(); ++q) {
      std::uint64_t last = 0;
      {
        const std::lock_guard lock(mutex_);
        last = workers_[q]->enqueued;
      }
      wait_for(static_cast<QueueId>(q), last);
    }
  }
  rethrow();
}

void StreamQueues::wait_for(QueueId q, std::uint64_t tick) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return worker(q).done >= tick; });
}

void StreamQueues::run_worker(QueueId q) {
  std::mt19937_64 random(options_.seed * 1000003u + static_cast<std::uint64_t>(q));
  std::uniform_real_distribution<double> delay_us(0.0, options_.max_delay_us);
  std::unique_lock lock(mutex_);
  Worker& w = worker(q);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !w.items.empty(); });
    if (w.items.empty()) return;  // stopping, nothing left
    Item item = std::move(w.items.front());
    w.items.pop_front();
    if (item.wait_queue >= 0) {
      changed_.wait(lock, [&] { return worker(item.wait_queue).done >= item.wait_tick; });
      continue;
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(delay_us(random)));
    try {
      item.work();
    } catch (...) {
      const std::lock_guard failed(mutex_);
      if (!failure_) failure_ = std::current_exception();
    }
    lock.lock();
    w.done = item.tick;
    changed_.notify_all();
  }
}

}  // namespace hsdp::shard
