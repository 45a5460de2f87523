#include <string>

#include "hsdp/core/error.hpp"
#include "hsdp/core/timer.hpp"
#include "hsdp/stream/cuda/executor.hpp"

namespace hsdp::stream::cuda {

namespace dc = hsdp::device::cuda;

struct CudaExecutor::HostCall {
  std::function<void()> function;
  std::shared_ptr<std::mutex> failure_mutex;
  std::shared_ptr<std::exception_ptr> failure;
};

namespace {

// cudaLaunchHostFunc's callback: runs on a driver thread in the stream's order; it may not call CUDA, nor throw.
void CUDART_CB run_host_call(void* data) {
  const std::unique_ptr<CudaExecutor::HostCall> call(static_cast<CudaExecutor::HostCall*>(data));
  try {
    call->function();
  } catch (...) {
    const std::lock_guard lock(*call->failure_mutex);
    if (!*call->failure) *call->failure = std::current_exception();
  }
}

const dc::Event& event_of(const ExecEvent& event) {
  return *static_cast<const dc::Event*>(event.native.get());
}

}  // namespace

CudaExecutor::CudaExecutor(cudaStream_t compute, std::function<void(cudaStream_t)> bind)
    : compute_(compute),
      bind_(std::move(bind)),
      failure_mutex_(std::make_shared<std::mutex>()),
      failure_(std::make_shared<std::exception_ptr>()) {}

CudaExecutor::~CudaExecutor() {
  // Host functions still in flight hold their own state; the streams this executor made end after their work.
  for (cudaStream_t s : streams_) cudaStreamSynchronize(s);
}

int CudaExecutor::make_stream(const std::string&, bool compute) {
  if (compute && !compute_taken_) {
    compute_taken_ = true;
    streams_.push_back(compute_);
  } else {
    owned_.emplace_back();
    streams_.push_back(owned_.back().get());
  }
  return static_cast<int>(streams_.size() - 1);
}

cudaStream_t CudaExecutor::stream(int id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= streams_.size()) {
    throw_internal("cuda executor: no stream " + std::to_string(id));
  }
  return streams_[static_cast<std::size_t>(id)];
}

void CudaExecutor::enqueue(int id, std::function<void()> work) {
  if (!bind_) {
    work();
    return;
  }
  // Unbound after the work (also when it throws): the host's own calls are no queue's work.
  struct Unbind {
    const std::function<void(cudaStream_t)>& bind;
    ~Unbind() { bind(nullptr); }
  };
  bind_(stream(id));
  const Unbind unbind{bind_};
  work();
}

void CudaExecutor::enqueue_timed(int id, std::function<void()> work, Span span) {
  if (!origin_) {
    origin_ = std::make_unique<dc::Event>(dc::Event::Timing::on);
    origin_->record(stream(id));
    origin_->synchronize();
    origin_host_ = monotonic_seconds();
  }
  auto timed = std::make_unique<Timed>();
  timed->span = std::move(span);
  timed->begin.record(stream(id));
  enqueue(id, std::move(work));
  timed->end.record(stream(id));
  timed_.push_back(std::move(timed));
}

// The spans whose work has completed, on the host's clock; the others stay for a later call.
void CudaExecutor::report_spans() {
  std::size_t kept = 0;
  for (std::unique_ptr<Timed>& t : timed_) {
    if (!t->end.query()) {
      timed_[kept++] = std::move(t);
      continue;
    }
    t->span(origin_host_ + 1e-3 * t->begin.elapsed_ms_since(*origin_),
            origin_host_ + 1e-3 * t->end.elapsed_ms_since(*origin_));
  }
  timed_.resize(kept);
}

void CudaExecutor::enqueue_host_function(int id, std::function<void()> function) {
  auto call = std::make_unique<HostCall>(HostCall{std::move(function), failure_mutex_, failure_});
  dc::check(cudaLaunchHostFunc(stream(id), run_host_call, call.get()), "cudaLaunchHostFunc");
  static_cast<void>(call.release());  // run_host_call owns it now
}

// Recording again an event a cudaStreamWaitEvent already read is safe: the wait took the work recorded at its call.
ExecEvent CudaExecutor::record(int id) {
  std::unique_ptr<dc::Event> event;
  {
    const std::lock_guard lock(events_->mutex);
    if (!events_->free.empty()) {
      event = std::move(events_->free.back());
      events_->free.pop_back();
    }
  }
  if (!event) event = std::make_unique<dc::Event>();
  event->record(stream(id));
  std::shared_ptr<dc::Event> held(event.release(), [pool = events_](dc::Event* e) {
    const std::lock_guard lock(pool->mutex);
    pool->free.emplace_back(e);
  });
  return ExecEvent{id, 0, std::move(held)};
}

void CudaExecutor::wait(int id, const ExecEvent& event, const std::function<void()>& ordered) {
  if (event.native && event.stream != id) event_of(event).make_wait(stream(id));
  ordered();
}

bool CudaExecutor::query(const ExecEvent& event) {
  return !event.native || event_of(event).query();
}

void CudaExecutor::synchronize(const ExecEvent& event) {
  if (event.native) event_of(event).synchronize();
  rethrow();
}

void CudaExecutor::rethrow() {
  if (!timed_.empty()) report_spans();
  std::exception_ptr failure;
  {
    const std::lock_guard lock(*failure_mutex_);
    failure = *failure_;
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace hsdp::stream::cuda
