#pragma once
// RAII over the CUDA runtime: device and pinned host buffers, streams, events, and the error check that turns a
// cudaError_t into an hsdp::Error naming the call. Nothing here synchronizes the device: waiting is explicit
// (Event::synchronize, Stream::synchronize), for the edges of a step and for tests.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace hsdp::device::cuda {

// Throws an internal hsdp::Error "<what>: <CUDA error name>: <text>" unless status is cudaSuccess.
void check(cudaError_t status, std::string_view what);
// The launch error of the last kernel, if any (cudaGetLastError), as check() does.
void check_launch(std::string_view kernel);

// Devices this process can see; 0 when there are none or the driver is unusable, with the reason in *reason
// (cudaGetErrorString of cudaGetDeviceCount's error, or "cudaGetDeviceCount reported 0 devices").
int visible_device_count(std::string* reason = nullptr);

// The current device's name and bf16-relevant properties (for benchmarks and logs).
struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_count = 0;
  int compute_major = 0;
  int compute_minor = 0;
  std::size_t total_memory = 0;
  std::size_t shared_memory_per_block_optin = 0;
};
DeviceInfo current_device_info();

// Where a CudaBuffer's storage lives: device memory (cudaMalloc; never dereference it on the host), or
// page-locked host memory (cudaMallocHost: the staging area of asynchronous copies).
enum class Memory { device, pinned_host };

// Storage for n elements of T in `M` memory; moves, never copies. T is a trivially copyable element type.
template <typename T, Memory M>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  explicit CudaBuffer(std::size_t n) : size_(n) {
    if (n == 0) return;
    void** out = reinterpret_cast<void**>(&data_);
    if constexpr (M == Memory::device) {
      check(cudaMalloc(out, n * sizeof(T)), "cudaMalloc");
    } else {
      check(cudaMallocHost(out, n * sizeof(T)), "cudaMallocHost");
    }
  }
  ~CudaBuffer() {
    if (data_ == nullptr) return;
    if constexpr (M == Memory::device) {
      cudaFree(data_);
    } else {
      cudaFreeHost(data_);
    }
  }
  CudaBuffer(CudaBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  CudaBuffer& operator=(CudaBuffer&& o) noexcept {
    if (this != &o) {
      CudaBuffer old(std::move(*this));
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t size_bytes() const { return size_ * sizeof(T); }
  // A view for passing around (of device memory, for Memory::device).
  std::span<T> span() { return {data_, size_}; }
  std::span<const T> span() const { return {data_, size_}; }
  // Element access: host memory only.
  T& operator[](std::size_t i)
    requires(M == Memory::pinned_host)
  {
    return data_[i];
  }
  const T& operator[](std::size_t i) const
    requires(M == Memory::pinned_host)
  {
    return data_[i];
  }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

template <typename T>
using DeviceBuffer = CudaBuffer<T, Memory::device>;
template <typename T>
using PinnedBuffer = CudaBuffer<T, Memory::pinned_host>;

// A non-blocking stream (it does not synchronize with the legacy default stream).
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  operator cudaStream_t() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

// A CUDA event: recorded on one stream, waited for by another stream (on the GPU) or by the host.
class Event {
 public:
  enum class Timing { off, on };
  explicit Event(Timing timing = Timing::off);
  ~Event();
  Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream);
  // Work issued to `stream` after this call waits for the work recorded before this event (no host wait).
  void make_wait(cudaStream_t stream) const;
  // True when the recorded work has completed; throws if it failed.
  bool query() const;
  void synchronize() const;
  // Milliseconds from `start` to this event (both recorded with Timing::on, this one completed).
  float elapsed_ms_since(const Event& start) const;

 private:
  cudaEvent_t event_ = nullptr;
};

// Asynchronous copies on `stream` (count elements of T).
template <typename T>
void copy_to_device(T* device, const T* host, std::size_t count, cudaStream_t stream) {
  check(cudaMemcpyAsync(device, host, count * sizeof(T), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync H2D");
}
template <typename T>
void copy_to_host(T* host, const T* device, std::size_t count, cudaStream_t stream) {
  check(cudaMemcpyAsync(host, device, count * sizeof(T), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync D2H");
}
template <typename T>
void copy_on_device(T* to, const T* from, std::size_t count, cudaStream_t stream) {
  check(cudaMemcpyAsync(to, from, count * sizeof(T), cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync D2D");
}
template <typename T>
void zero_on_device(T* device, std::size_t count, cudaStream_t stream) {
  check(cudaMemsetAsync(device, 0, count * sizeof(T), stream), "cudaMemsetAsync");
}

// Keeps `stream` busy for `ms` milliseconds (a spinning kernel): tests of ordering and of the watchdog.
void spin_on_stream(cudaStream_t stream, double ms);

}  // namespace hsdp::device::cuda
