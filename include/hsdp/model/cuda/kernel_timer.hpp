#pragma once
// KernelTimer: where a GPU step's time goes, without Nsight. While a timer is attached, GptCuda marks its stream
// before each group of kernels with the group's kind ("matmul", "attention", "layernorm", ...) and after its last
// kernel of a pass with no kind; the time from one mark to the next on the stream is the kind's. report() waits for
// the marks and returns each kind's milliseconds since the last report, in first-seen order. A pass's end mark keeps
// what lies between passes (the engine's waits for gathers, other streams' work) out of every kind. The events are
// reused from report to report; marking serializes nothing (an event recorded in the stream's order).
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hsdp/device/cuda/runtime.hpp"

namespace hsdp::model::cuda {

class KernelTimer {
 public:
  // kind: a string literal naming the kernels enqueued next on `stream`; nullptr: the end of a pass.
  void mark(const char* kind, cudaStream_t stream);
  std::vector<std::pair<std::string, double>> report();

 private:
  struct Mark {
    const char* kind;
    device::cuda::Event* event;
  };
  std::vector<std::unique_ptr<device::cuda::Event>> events_;  // every event made; [0, marks_.size()) in use
  std::vector<Mark> marks_;
};

}  // namespace hsdp::model::cuda
