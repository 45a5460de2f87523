#pragma once
// The CUDA executor (hsdp/stream/executor.hpp) on one GPU: each stream a cudaStream_t (the compute stream is the one
// given, the model's; the others are created non-blocking), an event per record (cudaEventRecord, timing off; the
// events come from a pool and go back to it when the last ExecEvent holding one is gone, so a step creates none), waits
// by cudaStreamWaitEvent, host functions by cudaLaunchHostFunc. enqueue binds the stream (`bind`: CudaDeviceOps::
// use_stream and whatever else launches work, so that its kernels go to that stream), runs the work on the host at
// once (it launches, the GPU runs it in the stream's order) and unbinds (bind(nullptr): what the host calls between
// works is no queue's, so CudaDeviceOps makes the memory it allocates ready for every stream). Errors of the CUDA calls throw at the call; a host
// function's exception is kept and thrown by rethrow(). enqueue_timed records a timing event on the stream before and
// after the work; rethrow and synchronize report the spans whose events have completed, in seconds on the host's
// monotonic clock: the GPU's time since an origin event (recorded and waited for at construction) plus the host's
// time at that wait.
#include <cuda_runtime_api.h>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "hsdp/device/cuda/runtime.hpp"
#include "hsdp/stream/executor.hpp"

namespace hsdp::stream::cuda {

class CudaExecutor final : public Executor {
 public:
  CudaExecutor(cudaStream_t compute, std::function<void(cudaStream_t)> bind);
  ~CudaExecutor() override;
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  std::string_view name() const override { return "cuda"; }
  bool synchronous() const override { return false; }
  int make_stream(const std::string& name, bool compute) override;
  void enqueue(int stream, std::function<void()> work) override;
  void enqueue_timed(int stream, std::function<void()> work, Span span) override;
  void enqueue_host_function(int stream, std::function<void()> function) override;
  ExecEvent record(int stream) override;
  void wait(int stream, const ExecEvent& event, const std::function<void()>& ordered) override;
  bool query(const ExecEvent& event) override;
  void synchronize(const ExecEvent& event) override;
  void rethrow() override;

  cudaStream_t stream(int id) const;

  // A host function's state: the function, and where its exception goes.
  struct HostCall;

 private:
  cudaStream_t compute_;
  bool compute_taken_ = false;
  std::function<void(cudaStream_t)> bind_;
  std::vector<cudaStream_t> streams_;
  std::vector<device::cuda::Stream> owned_;
  std::shared_ptr<std::mutex> failure_mutex_;
  std::shared_ptr<std::exception_ptr> failure_;
  // Events no ExecEvent holds any more, for record() to use again; shared with the deleters of the ones handed out
  // (which may outlive the executor, and run on whichever thread drops the last reference).
  struct EventPool {
    std::mutex mutex;
    std::vector<std::unique_ptr<device::cuda::Event>> free;
  };
  std::shared_ptr<EventPool> events_ = std::make_shared<EventPool>();

  // Timed work whose end event the host has not seen complete yet.
  struct Timed {
    device::cuda::Event begin{device::cuda::Event::Timing::on}, end{device::cuda::Event::Timing::on};
    Span span;
  };
  void report_spans();
  std::unique_ptr<device::cuda::Event> origin_;  // the GPU clock's zero, made at the first timed enqueue
  double origin_host_ = 0;                       // monotonic_seconds() when origin_ was seen complete
  std::vector<std::unique_ptr<Timed>> timed_;
};

}  // namespace hsdp::stream::cuda
