// The CUDA executor (hsdp/stream/cuda/executor.hpp) with CudaDeviceOps on three streams, checked by the stream
// checker: the DeviceOps pipeline of tests/stream gives the inline CPU run's gradients bit for bit (every scale a
// power of two: each element's arithmetic is the same on both devices) and its norm to 1e-12 relative (a double sum
// in another order); and an executor that loses the compute stream's first wait for the gather stream is caught
// naming the buffer.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "../stream/device_pipeline.hpp"
#include "../stream/dropping_executor.hpp"
#include "gpu_test_util.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/stream/cuda/device_ops.hpp"
#include "hsdp/stream/cuda/executor.hpp"

namespace hsdp::stream {
namespace {

class ExecutorGpu : public gpu_testing::GpuTest {};

std::unique_ptr<Executor> cuda_executor(cuda::CudaDeviceOps& dev) {
  return std::make_unique<cuda::CudaExecutor>(dev.stream(), [&dev](cudaStream_t s) { dev.use_stream(s); });
}

TEST_F(ExecutorGpu, TheDevicePipelineOnThreeStreams_MatchesTheInlineCpuRun) {
  MemoryAccountant cpu_memory, gpu_memory;
  const auto cpu = make_cpu_device_ops(cpu_memory);
  StreamQueues inline_queues;
  const testing::PipelineResult reference = testing::run_device_pipeline(*cpu, inline_queues);
  cuda::CudaDeviceOps gpu(gpu_memory, stream());
  StreamQueues queues({.check = true}, cuda_executor(gpu));
  const testing::PipelineResult run = testing::run_device_pipeline(gpu, queues);
  EXPECT_EQ(run.grads, reference.grads);
  EXPECT_NEAR(run.norm, reference.norm, 1e-12 * std::abs(reference.norm));
}

TEST_F(ExecutorGpu, AnExecutorThatLosesAWait_IsCaughtNamingTheBuffer) {
  MemoryAccountant gpu_memory;
  cuda::CudaDeviceOps gpu(gpu_memory, stream());
  StreamQueues queues({.check = true}, std::make_unique<testing::DroppingExecutor>(cuda_executor(gpu), "compute",
                                                                                   "gather", 1));
  std::string report;
  try {
    testing::run_device_pipeline(gpu, queues);
  } catch (const Error& e) {
    report = e.what();
  }
  EXPECT_NE(report.find("buffer 'gathered 0': a read by 'forward unit 0' on queue 'compute' is not ordered after "
                        "'gather unit 0' on queue 'gather'"),
            std::string::npos)
      << report;
}

}  // namespace
}  // namespace hsdp::stream
