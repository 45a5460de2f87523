#pragma once
// The sharding engine's DeviceOps (hsdp/stream/device_ops.hpp) on one GPU: device memory from CUDA's stream-ordered
// allocator (cudaMallocAsync, zeroed, charged to the accountant while it lives) and every element call as kernels
// enqueued on the current stream, the stream of the queue the call was issued from (use_stream; the engine's queues
// become CUDA streams). Nothing waits for the GPU but copy_to_host and copy_from_host (the host's data must be there
// when they return) and raise_deferred_errors.
//
// Memory allocated inside a queue's work is that stream's (allocated, zeroed and freed in its order). Memory the host
// allocates outside any work (use_stream(nullptr): the executor unbinds after each work) may be used next by any
// stream, so it is allocated and zeroed on a stream of its own and ready when allocate returns; it goes back on that
// stream too (the engine frees such memory only after its last use has been seen complete). The pool keeps what it
// has (no release at each synchronize): a step allocates from memory the pool already holds.
//
// Results are the CPU DeviceOps' bit for bit, except AdamW (the CUDA AdamW's fp32 arithmetic, within 1e-6 of the
// CPU's: hsdp/optim/cuda/adamw.hpp) and squared_sum (double sums in another order). quantize cannot throw on the GPU:
// a non-finite value is recorded and raise_deferred_errors throws the CPU's error.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <memory>
#include <utility>

#include "hsdp/device/cuda/runtime.hpp"
#include "hsdp/optim/cuda/adamw.hpp"
#include "hsdp/quant/cuda/blockwise.hpp"
#include "hsdp/stream/device_ops.hpp"

namespace hsdp::stream::cuda {

class CudaDeviceOps final : public DeviceOps {
 public:
  CudaDeviceOps(MemoryAccountant& memory, cudaStream_t stream);
  const char* name() const override { return "cuda"; }
  // Where the calls that follow are enqueued: a queue's stream while its work runs; nullptr after it (the host's
  // calls go to the stream given at construction again, its allocations to the allocation stream).
  void use_stream(cudaStream_t stream) {
    in_work_ = stream != nullptr;
    stream_ = in_work_ ? stream : default_stream_;
  }
  cudaStream_t stream() const { return stream_; }
  // Where memory is allocated, zeroed and freed now (see above).
  cudaStream_t allocation_stream() const { return in_work_ ? stream_ : allocation_stream_.get(); }
  bool in_work() const { return in_work_; }

  std::unique_ptr<DeviceMemory> allocate(std::size_t bytes, MemCategory category) override;
  void convert(const void* in, DType from, void* out, DType to, std::size_t count) override;
  void round_to(float* values, std::size_t count, DType to) override;
  void fill_zero(void* data, std::size_t bytes) override;
  void accumulate(float* sum, const float* x, std::size_t count, float scale) override;
  void quantize(const float* values, std::size_t count, quant::QuantSpec spec, std::uint8_t* message) override;
  void dequantize(const std::uint8_t* message, std::size_t count, quant::QuantSpec spec, float* out) override;
  void reduce_dequantize(std::span<const std::uint8_t* const> messages, std::size_t count, quant::QuantSpec spec,
                         float* out) override;
  void reduce_requantize(std::span<const std::uint8_t* const> messages, std::size_t count, quant::QuantSpec spec,
                         std::uint8_t* out) override;
  void adamw(const optim::AdamWConfig& config, const optim::AdamWStep& step, float* params, float* grads, float* m,
             float* v, std::size_t count, std::span<const optim::DecaySegment> segments, bool zero_grads,
             bf16_t* param_copy) override;
  void add_scalar(double* sum, const double* x) override;
  void squared_sum(const float* values, std::size_t count, double* sum) override;
  void flag_nonfinite(const float* values, std::size_t count, double* flag) override;
  void zero_if_nonfinite(float* values, std::size_t count, double* flag) override;
  void accumulate_from(float* sum, const void* x, DType t, std::size_t count, float scale) override;
  void copy_to_host(void* host, const void* device, std::size_t bytes) override;
  void copy_from_host(void* device, const void* host, std::size_t bytes) override;
  void raise_deferred_errors() override;
  void* host_address(void*) override { return nullptr; }

 private:
  const optim::cuda::DeviceDecaySegments& segments_of(float* params, std::span<const optim::DecaySegment> segments,
                                                      std::size_t count);

  MemoryAccountant& memory_;
  cudaStream_t default_stream_;
  cudaStream_t stream_;
  bool in_work_ = false;
  device::cuda::Stream allocation_stream_;  // the host's allocations and frees outside work
  quant::cuda::QuantStatus quant_status_;
  std::size_t quantized_count_ = 0;             // the last quantize's element count, for the error's text
  bool quantized_unchecked_ = false;            // a quantize ran since raise_deferred_errors last read the status
  device::cuda::DeviceBuffer<double> scratch_;  // squared_sum's partial sums and its result
  // AdamW's decay segments on the device, per shard (keyed by the shard's parameters; they never change).
  std::map<std::pair<const float*, std::size_t>, std::unique_ptr<optim::cuda::DeviceDecaySegments>> segments_;
};

}  // namespace hsdp::stream::cuda
