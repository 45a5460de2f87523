// CudaStaging: HostStaging on one GPU (nccl.hpp).
#include <mutex>
#include <string>
#include <vector>

#include "hsdp/comm/nccl.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/device/cuda/runtime.hpp"

namespace hsdp::comm {

namespace cuda = hsdp::device::cuda;

// Events for the copies: created when none is free, kept for reuse (a step creates none after its first).
struct CudaStaging::Events {
  std::mutex mutex;
  std::vector<cuda::Event> free;

  cuda::Event take() {
    const std::lock_guard lock(mutex);
    if (free.empty()) return cuda::Event();
    cuda::Event event = std::move(free.back());
    free.pop_back();
    return event;
  }
  void give_back(cuda::Event event) {
    const std::lock_guard lock(mutex);
    free.push_back(std::move(event));
  }
};

namespace {

// The work recorded on a stream up to an event (a copy and what came before it).
class RecordedCopy final : public StagedCopy {
 public:
  RecordedCopy(cuda::Event event, std::shared_ptr<CudaStaging::Events> events)
      : event_(std::move(event)), events_(std::move(events)) {}
  ~RecordedCopy() override { events_->give_back(std::move(event_)); }
  RecordedCopy(const RecordedCopy&) = delete;
  RecordedCopy& operator=(const RecordedCopy&) = delete;
  bool done() override { return event_.query(); }
  void wait() override { event_.synchronize(); }

 private:
  cuda::Event event_;
  std::shared_ptr<CudaStaging::Events> events_;
};

}  // namespace

CudaStaging::CudaStaging(cudaStream_t stream) : stream_(stream), events_(std::make_shared<Events>()) {}

CudaStaging::CudaStaging(std::shared_ptr<device::cuda::Stream> stream)
    : owned_(std::move(stream)), stream_(owned_->get()), events_(std::make_shared<Events>()) {}

CudaStaging::~CudaStaging() = default;

HostBlock CudaStaging::allocate(std::size_t bytes) {
  void* memory = nullptr;
  cuda::check(cudaMallocHost(&memory, bytes), "cudaMallocHost (" + std::to_string(bytes) + " bytes of MPI staging)");
  return HostBlock(static_cast<std::byte*>(memory), [](std::byte* p) { cudaFreeHost(p); });
}

std::unique_ptr<StagedCopy> CudaStaging::recorded() {
  cuda::Event event = events_->take();
  event.record(stream_);
  return std::make_unique<RecordedCopy>(std::move(event), events_);
}

std::unique_ptr<StagedCopy> CudaStaging::to_host(const void* device, void* host, std::size_t bytes) {
  cuda::check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_),
              "cudaMemcpyAsync (MPI staging, device to host)");
  return recorded();
}

std::unique_ptr<StagedCopy> CudaStaging::to_device(const void* host, void* device, std::size_t bytes) {
  cuda::check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_),
              "cudaMemcpyAsync (MPI staging, host to device)");
  return recorded();
}

std::unique_ptr<StagedCopy> CudaStaging::fence() {
  return recorded();
}

}  // namespace hsdp::comm
