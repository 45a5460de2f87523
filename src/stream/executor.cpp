// The CPU's executors (executor.hpp): inline, and worker threads with CUDA's rules.
#include "hsdp/stream/executor.hpp"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "hsdp/core/error.hpp"
#include "hsdp/core/timer.hpp"

namespace hsdp::stream {
void Executor::enqueue_timed(int stream, std::function<void()> work, Span span) {
  enqueue(stream, [work = std::move(work), span = std::move(span)] {
    const double begin = monotonic_seconds();
    work();
    span(begin, monotonic_seconds());
  });
}

namespace {

class InlineExecutor final : public Executor {
 public:
  std::string_view name() const override { return "inline"; }
  bool synchronous() const override { return true; }
  int make_stream(const std::string&, bool) override { return streams_++; }
  void enqueue(int, std::function<void()> work) override { work(); }
  void enqueue_host_function(int, std::function<void()> function) override { function(); }
  ExecEvent record(int stream) override { return ExecEvent{stream, 0, nullptr}; }
  void wait(int, const ExecEvent&, const std::function<void()>& ordered) override { ordered(); }
  bool query(const ExecEvent&) override { return true; }
  void synchronize(const ExecEvent&) override {}

 private:
  int streams_ = 0;
};

// A stream is a worker thread running its items in order; an event is a position in a stream's order, complete
// once the worker has run that many items; a wait is an item that holds the worker until its event is complete;
// a host function is an item like work (CUDA runs it on a thread of its own, in stream order, blocking the stream).
class ThreadsExecutor final : public Executor {
 public:
  ThreadsExecutor(std::uint64_t seed, double max_delay_us) : seed_(seed), max_delay_us_(max_delay_us) {}
  ~ThreadsExecutor() override {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    for (auto& s : streams_) {
      if (s->thread.joinable()) s->thread.join();
    }
  }
  ThreadsExecutor(const ThreadsExecutor&) = delete;
  ThreadsExecutor& operator=(const ThreadsExecutor&) = delete;

  std::string_view name() const override { return "threads"; }
  bool synchronous() const override { return false; }

  int make_stream(const std::string&, bool) override {
    auto s = std::make_unique<Stream>();
    Stream& added = *s;
    int id = 0;
    {
      const std::lock_guard lock(mutex_);
      id = static_cast<int>(streams_.size());
      streams_.push_back(std::move(s));
    }
    added.thread = std::thread([this, id] { run(id); });
    return id;
  }

  void enqueue(int stream, std::function<void()> work) override { push(stream, Item{std::move(work), -1, 0}); }
  void enqueue_host_function(int stream, std::function<void()> function) override {
    push(stream, Item{std::move(function), -1, 0});
  }

  ExecEvent record(int stream) override {
    const std::lock_guard lock(mutex_);
    return ExecEvent{stream, at(stream).enqueued, nullptr};
  }

  void wait(int stream, const ExecEvent& event, const std::function<void()>& ordered) override {
    if (event.stream >= 0 && event.stream != stream) push(stream, Item{{}, event.stream, event.position});
    ordered();
  }

  bool query(const ExecEvent& event) override {
    if (event.stream < 0) return true;
    const std::lock_guard lock(mutex_);
    return at(event.stream).done >= event.position;
  }

  void synchronize(const ExecEvent& event) override {
    if (event.stream < 0) return;
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return failure_ || at(event.stream).done >= event.position; });
    if (failure_) std::rethrow_exception(failure_);
  }

  void rethrow() override {
    std::exception_ptr failure;
    {
      const std::lock_guard lock(mutex_);
      failure = failure_;
    }
    if (failure) std::rethrow_exception(failure);
  }

 private:
  struct Item {
    std::function<void()> work;  // empty: a wait
    int wait_stream = -1;
    std::uint64_t wait_position = 0;
  };
  struct Stream {
    std::deque<Item> items;
    std::uint64_t enqueued = 0;
    std::uint64_t done = 0;
    std::thread thread;
  };

  Stream& at(int stream) {
    if (stream < 0 || static_cast<std::size_t>(stream) >= streams_.size()) {
      throw_internal("threads executor: no stream " + std::to_string(stream));
    }
    return *streams_[static_cast<std::size_t>(stream)];
  }

  void push(int stream, Item item) {
    {
      const std::lock_guard lock(mutex_);
      Stream& s = at(stream);
      s.items.push_back(std::move(item));
      ++s.enqueued;
    }
    changed_.notify_all();
  }

  void run(int id) {
    std::mt19937_64 random(seed_ * 1000003u + static_cast<std::uint64_t>(id));
    std::uniform_real_distribution<double> delay_us(0.0, max_delay_us_);
    std::unique_lock lock(mutex_);
    Stream& s = at(id);
    for (;;) {
      changed_.wait(lock, [&] { return stopping_ || !s.items.empty(); });
      if (s.items.empty()) return;  // stopping, nothing left
      Item item = std::move(s.items.front());
      s.items.pop_front();
      if (!item.work) {
        changed_.wait(lock, [&] { return stopping_ || at(item.wait_stream).done >= item.wait_position; });
        if (stopping_) return;
      } else {
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(delay_us(random)));
        try {
          item.work();
        } catch (...) {
          const std::lock_guard failed(mutex_);
          if (!failure_) failure_ = std::current_exception();
        }
        lock.lock();
      }
      ++s.done;
      changed_.notify_all();
    }
  }

  std::uint64_t seed_;
  double max_delay_us_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  std::exception_ptr failure_;
};

}  // namespace

std::unique_ptr<Executor> make_inline_executor() {
  return std::make_unique<InlineExecutor>();
}

std::unique_ptr<Executor> make_threads_executor(std::uint64_t seed, double max_delay_us) {
  return std::make_unique<ThreadsExecutor>(seed, max_delay_us);
}

}  // namespace hsdp::stream
