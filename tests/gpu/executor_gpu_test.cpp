// The CUDA executor (hsdp/stream/cuda/executor.hpp) with CudaDeviceOps on three streams, checked by the stream
// checker: the DeviceOps pipeline of tests/stream gives the inline CPU run's gradients bit for bit (every scale a
// power of two: each element's arithmetic is the same on both devices) and its norm to 1e-12 relative (a double sum
// in another order); and an executor that loses the compute stream's first wait for the gather stream is caught
// naming the buffer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../stream/device_pipeline.hpp"
#include "../stream/dropping_executor.hpp"
#include "gpu_test_util.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/timer.hpp"
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
  StreamQueues queues({.check = true},
                      std::make_unique<testing::DroppingExecutor>(cuda_executor(gpu), "compute", "gather", 1));
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

// log.trace on the GPU: each queue's work reported as a span on the host's clock from the CUDA events around it, once
// it completed: one span per item, in the queue's order without overlap, inside the host's window of the run.
TEST_F(ExecutorGpu, TimedWork_IsReportedAsSpansOnTheHostsClock_InStreamOrder) {
  MemoryAccountant gpu_memory;
  cuda::CudaDeviceOps gpu(gpu_memory, stream());
  StreamQueues queues({}, cuda_executor(gpu));
  struct Span {
    std::string queue, name;
    double begin, end;
  };
  std::vector<Span> spans;
  queues.on_span([&spans](const std::string& queue, const std::string& name, double begin, double end) {
    spans.push_back({queue, name, begin, end});
  });
  const QueueId compute = queues.make_queue("compute", QueueRole::compute), other = queues.make_queue("other");
  constexpr std::size_t kCount = std::size_t{1} << 24;
  const auto a = gpu.allocate(kCount * sizeof(float), MemCategory::comm_buffers);
  const auto b = gpu.allocate(kCount * sizeof(float), MemCategory::comm_buffers);
  const auto c = gpu.allocate(kCount * sizeof(float), MemCategory::comm_buffers);
  auto* x = static_cast<float*>(a->data());
  auto* y = static_cast<float*>(b->data());
  const double host_begin = monotonic_seconds();
  for (int i = 0; i < 4; ++i) {
    queues.enqueue(compute, "accumulate " + std::to_string(i), {}, [&] { gpu.accumulate(x, y, kCount, 0.5f); });
    queues.enqueue(other, "zero " + std::to_string(i), {}, [&] { gpu.fill_zero(c->data(), c->bytes()); });
  }
  queues.synchronize(queues.record(compute));
  queues.synchronize(queues.record(other));
  queues.drain();
  const double host_end = monotonic_seconds();
  // Besides the host's own spans (its waits in synchronize and drain), the eight works, in each queue's order.
  ASSERT_EQ(std::count_if(spans.begin(), spans.end(), [](const Span& s) { return s.queue != "host"; }), 8);
  for (const char* q : {"compute", "other"}) {
    double last_end = host_begin - 1e-3;  // the origin's mapping: within a millisecond
    int seen = 0;
    for (const Span& s : spans) {
      if (s.queue != q) continue;
      EXPECT_LE(s.begin, s.end) << s.name;
      EXPECT_GE(s.begin, last_end - 1e-6) << s.name << " starts before the queue's previous item ended";
      EXPECT_LE(s.end, host_end + 1e-3) << s.name;
      last_end = s.end;
      ++seen;
    }
    EXPECT_EQ(seen, 4) << q;
  }
}

}  // namespace
}  // namespace hsdp::stream
