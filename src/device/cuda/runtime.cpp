#include "hsdp/device/cuda/runtime.hpp"

#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp::device::cuda {

void check(cudaError_t status, std::string_view what) {
  if (status == cudaSuccess) return;
  throw_internal(std::string(what) + ": " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
}

void check_launch(std::string_view kernel) {
  check(cudaGetLastError(), std::string("launch of ") + std::string(kernel));
}

int visible_device_count(std::string* reason) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // reset the runtime's last error so a later check does not report this one
    if (reason != nullptr) *reason = cudaGetErrorString(status);
    return 0;
  }
  if (count == 0 && reason != nullptr) *reason = "cudaGetDeviceCount reported 0 devices";
  return count;
}

DeviceInfo current_device_info() {
  DeviceInfo info;
  check(cudaGetDevice(&info.index), "cudaGetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, info.index), "cudaGetDeviceProperties");
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.total_memory = prop.totalGlobalMem;
  info.shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
  return info;
}

// ---- Stream ----

Stream::Stream() {
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
}

Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    Stream old(std::move(*this));
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const {
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

// ---- Event ----

Event::Event(Timing timing) {
  const unsigned flags = timing == Timing::on ? cudaEventDefault : cudaEventDisableTiming;
  check(cudaEventCreateWithFlags(&event_, flags), "cudaEventCreateWithFlags");
}

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    Event old(std::move(*this));
    event_ = std::exchange(o.event_, nullptr);
  }
  return *this;
}

void Event::record(cudaStream_t stream) {
  check(cudaEventRecord(event_, stream), "cudaEventRecord");
}

void Event::make_wait(cudaStream_t stream) const {
  check(cudaStreamWaitEvent(stream, event_, 0), "cudaStreamWaitEvent");
}

bool Event::query() const {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) return false;
  check(status, "cudaEventQuery");
  return true;
}

void Event::synchronize() const {
  check(cudaEventSynchronize(event_), "cudaEventSynchronize");
}

float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, start.event_, event_), "cudaEventElapsedTime");
  return ms;
}

}  // namespace hsdp::device::cuda
