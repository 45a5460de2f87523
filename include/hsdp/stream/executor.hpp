#pragma once
// Executor: what runs the work of the stream queues (queues.hpp), with CUDA's stream semantics.
//
//   make_stream            a stream; its work runs in the order it was enqueued. `compute`: the stream the model
//                          runs on (the CUDA executor's is the model's own stream).
//   enqueue                work in stream order. What runs when is the executor's: the inline executor calls it at
//                          once on the host (the synchronous CPU engine); the threads executor on the stream's own
//                          worker thread, after the work enqueued before it and a random delay; the CUDA executor at
//                          once on the host with the stream bound (DeviceOps::use_stream, the model's stream), so that
//                          the kernels it launches run in the stream's order.
//   enqueue_host_function  a function that runs when the stream reaches it (cudaLaunchHostFunc): after the stream's
//                          earlier work has completed and before its later work starts, off the host thread where
//                          the executor has threads; it must not enqueue or wait.
//   record                 an event covering the work enqueued to the stream so far (cudaEventRecord)
//   wait                   the stream's later work waits for the event, without a host wait (cudaStreamWaitEvent);
//                          `ordered` is called before wait returns, once the executor has put the wait in place (the
//                          stream checker learns the order from it, so an executor that loses a wait is caught)
//   query, synchronize     whether the event's work has completed; the host blocks until it has
//   enqueue_timed          enqueue, and `span(begin, end)` (monotonic_seconds()) once the work has run: the inline
//                          and threads executors time it where it runs (span is called there, on a worker thread
//                          for threads); the CUDA executor records timing events around the work on the stream and
//                          calls span from a later rethrow or synchronize on the host, on the GPU's clock mapped to
//                          the host's (log.trace's GPU timeline)
// Work that fails off the host thread is kept, and rethrow() (which the queues call at each host call) throws it.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace hsdp::stream {

struct ExecEvent {
  int stream = -1;               // -1: the empty event, complete
  std::uint64_t position = 0;    // work items enqueued to the stream before it (inline, threads)
  std::shared_ptr<void> native;  // the executor's own handle (CUDA: the event)
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string_view name() const = 0;
  // True when enqueue runs the work before it returns and every event is complete when recorded (the inline
  // executor): a compute queue's waits then block the host, as the synchronous engine always did.
  virtual bool synchronous() const = 0;

  virtual int make_stream(const std::string& name, bool compute) = 0;
  virtual void enqueue(int stream, std::function<void()> work) = 0;
  using Span = std::function<void(double begin, double end)>;
  virtual void enqueue_timed(int stream, std::function<void()> work, Span span);
  virtual void enqueue_host_function(int stream, std::function<void()> function) = 0;
  virtual ExecEvent record(int stream) = 0;
  virtual void wait(int stream, const ExecEvent& event, const std::function<void()>& ordered) = 0;
  virtual bool query(const ExecEvent& event) = 0;
  virtual void synchronize(const ExecEvent& event) = 0;
  virtual void rethrow() {}
};

// The host runs everything when it is enqueued.
std::unique_ptr<Executor> make_inline_executor();

// Every stream on a worker thread of its own, each item after a random delay uniform in [0, max_delay_us) drawn from
// a generator seeded by (seed, stream), so a seed replays the same delays: CUDA's rules, with the timing a GPU's
// streams could have.
std::unique_ptr<Executor> make_threads_executor(std::uint64_t seed, double max_delay_us);

}  // namespace hsdp::stream
