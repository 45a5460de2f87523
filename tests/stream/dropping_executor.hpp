#pragma once
// An executor that loses one wait: it forwards everything to the executor it wraps except the n-th wait (counted from
// 1) of the stream named `waiter` for an event of the stream named `awaited`, which it neither puts in place nor
// reports as ordered (nth = 0: none). The stream checker
// must catch the work that then reads or writes memory without the order the wait gave it, naming the buffer.
#include <memory>
#include <string>
#include <vector>

#include "hsdp/stream/executor.hpp"

namespace hsdp::stream::testing {

class DroppingExecutor final : public Executor {
 public:
  DroppingExecutor(std::unique_ptr<Executor> inner, std::string waiter, std::string awaited, int nth)
      : inner_(std::move(inner)), waiter_name_(std::move(waiter)), awaited_name_(std::move(awaited)), nth_(nth) {}

  std::string_view name() const override { return "dropping one wait"; }
  bool synchronous() const override { return inner_->synchronous(); }
  int make_stream(const std::string& name, bool compute) override {
    const int id = inner_->make_stream(name, compute);
    if (name == waiter_name_) waiter_ = id;
    if (name == awaited_name_) awaited_ = id;
    return id;
  }
  void enqueue(int stream, std::function<void()> work) override { inner_->enqueue(stream, std::move(work)); }
  void enqueue_host_function(int stream, std::function<void()> function) override {
    inner_->enqueue_host_function(stream, std::move(function));
  }
  ExecEvent record(int stream) override { return inner_->record(stream); }
  void wait(int stream, const ExecEvent& event, const std::function<void()>& ordered) override {
    if (stream == waiter_ && event.stream == awaited_ && ++waits_ == nth_) return;
    inner_->wait(stream, event, ordered);
  }
  bool query(const ExecEvent& event) override { return inner_->query(event); }
  void synchronize(const ExecEvent& event) override { inner_->synchronize(event); }
  void rethrow() override { inner_->rethrow(); }

 private:
  std::unique_ptr<Executor> inner_;
  std::string waiter_name_, awaited_name_;
  int nth_;
  int waiter_ = -1, awaited_ = -1;
  int waits_ = 0;
};

}  // namespace hsdp::stream::testing
