// A kernel that keeps a stream busy for a given time (runtime.hpp: spin_on_stream), for tests of event
// ordering and of the NCCL watchdog.
#include "hsdp/device/cuda/runtime.hpp"

namespace hsdp::device::cuda {
namespace {

__global__ void spin_kernel(unsigned long long nanoseconds) {
  unsigned long long start = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  unsigned long long now = start;
  while (now - start < nanoseconds) {
    __nanosleep(10000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  }
}

}  // namespace

void spin_on_stream(cudaStream_t stream, double ms) {
  if (!(ms > 0.0)) return;
  spin_kernel<<<1, 1, 0, stream>>>(static_cast<unsigned long long>(ms * 1e6));
  check_launch("spin_kernel");
}

}  // namespace hsdp::device::cuda
