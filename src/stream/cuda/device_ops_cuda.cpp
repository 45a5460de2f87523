#include <cstdint>
#include <string>

#include "element_kernels.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/stream/cuda/device_ops.hpp"
#include "hsdp/quant/message.hpp"

namespace hsdp::stream::cuda {
namespace {

namespace dc = hsdp::device::cuda;

// Device memory from the stream-ordered allocator, zeroed and freed on the allocation stream current then (a queue's
// inside its work; outside work the allocation stream, synchronized, so that any stream may use it next).
class CudaMemory final : public DeviceMemory {
 public:
  CudaMemory(std::size_t bytes, MemCategory category, MemoryAccountant& memory, const CudaDeviceOps& ops)
      : bytes_(bytes), category_(category), memory_(memory), ops_(ops) {
    if (bytes == 0) return;
    const cudaStream_t stream = ops.allocation_stream();
    dc::check(cudaMallocAsync(&data_, bytes, stream), "cudaMallocAsync");
    dc::check(cudaMemsetAsync(data_, 0, bytes, stream), "cudaMemsetAsync");
    if (!ops.in_work()) dc::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (allocation)");
    memory_.allocate(category_, bytes_);
  }
  ~CudaMemory() override {
    if (data_ == nullptr) return;
    cudaFreeAsync(data_, ops_.allocation_stream());
    memory_.release(category_, bytes_);
  }
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;
  void* data() override { return data_; }
  std::size_t bytes() const override { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_;
  MemCategory category_;
  MemoryAccountant& memory_;
  const CudaDeviceOps& ops_;
};

// The packed values and the scales of a ZeRO++ message (zeropp.hpp's layout) at `message`, device memory.
struct MessageParts {
  std::uint8_t* packed;
  float* scales;
};
MessageParts parts_of(const std::uint8_t* message, std::size_t count, quant::QuantSpec spec) {
  const quant::QuantizedSpan s = quant::message_span(const_cast<std::uint8_t*>(message), count, spec);
  return {s.packed.data(), s.scales.data()};
}

}  // namespace

CudaDeviceOps::CudaDeviceOps(MemoryAccountant& memory, cudaStream_t stream)
    : memory_(memory), default_stream_(stream), stream_(stream), scratch_(optim::cuda::kSumOfSquaresScratch + 1) {
  quant_status_.reset(stream_);
  // The pool keeps freed memory for the next allocation instead of returning it at each synchronize.
  int device = 0;
  cudaMemPool_t pool = nullptr;
  dc::check(cudaGetDevice(&device), "cudaGetDevice");
  dc::check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
  std::uint64_t keep = UINT64_MAX;
  dc::check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
            "cudaMemPoolSetAttribute (release threshold)");
}

std::unique_ptr<DeviceMemory> CudaDeviceOps::allocate(std::size_t bytes, MemCategory category) {
  return std::make_unique<CudaMemory>(bytes, category, memory_, *this);
}

void CudaDeviceOps::convert(const void* in, DType from, void* out, DType to, std::size_t count) {
  convert_elements(in, from, out, to, count, stream_);
}

void CudaDeviceOps::round_to(float* values, std::size_t count, DType to) {
  round_elements(values, count, to, stream_);
}

void CudaDeviceOps::fill_zero(void* data, std::size_t bytes) {
  if (bytes > 0) dc::check(cudaMemsetAsync(data, 0, bytes, stream_), "cudaMemsetAsync (fill_zero)");
}

void CudaDeviceOps::accumulate(float* sum, const float* x, std::size_t count, float scale) {
  accumulate_elements(sum, x, DType::f32, count, scale, stream_);
}

void CudaDeviceOps::accumulate_from(float* sum, const void* x, DType t, std::size_t count, float scale) {
  accumulate_elements(sum, x, t, count, scale, stream_);
}

void CudaDeviceOps::quantize(const float* values, std::size_t count, quant::QuantSpec spec, std::uint8_t* message) {
  const MessageParts m = parts_of(message, count, spec);
  quantized_count_ = count;
  quantized_unchecked_ = true;
  quant::cuda::quantize(values, DType::f32, count, spec, m.packed, m.scales, quant_status_, stream_);
}

void CudaDeviceOps::dequantize(const std::uint8_t* message, std::size_t count, quant::QuantSpec spec, float* out) {
  const MessageParts m = parts_of(message, count, spec);
  quant::cuda::dequantize(m.packed, m.scales, count, spec, out, DType::f32, stream_);
}

// The CPU's order: out = 0 + m_0 + m_1 + ..., each term q * scale in fp32.
void CudaDeviceOps::reduce_dequantize(std::span<const std::uint8_t* const> messages, std::size_t count,
                                      quant::QuantSpec spec, float* out) {
  fill_zero(out, count * sizeof(float));
  for (const std::uint8_t* message : messages) {
    const MessageParts m = parts_of(message, count, spec);
    quant::cuda::dequantize_accumulate(m.packed, m.scales, count, spec, out, stream_);
  }
}

void CudaDeviceOps::reduce_requantize(std::span<const std::uint8_t* const> messages, std::size_t count,
                                      quant::QuantSpec spec, std::uint8_t* out) {
  const std::unique_ptr<DeviceMemory> sum = allocate(count * sizeof(float), MemCategory::comm_buffers);
  auto* values = static_cast<float*>(sum->data());
  reduce_dequantize(messages, count, spec, values);
  quantize(values, count, spec, out);
}  // the sum goes back to the pool on this stream, after the quantize that reads it

const optim::cuda::DeviceDecaySegments& CudaDeviceOps::segments_of(float* params,
                                                                   std::span<const optim::DecaySegment> segments,
                                                                   std::size_t count) {
  std::unique_ptr<optim::cuda::DeviceDecaySegments>& slot = segments_[{params, count}];
  if (!slot) slot = std::make_unique<optim::cuda::DeviceDecaySegments>(segments, count);
  return *slot;
}

void CudaDeviceOps::adamw(const optim::AdamWConfig& config, const optim::AdamWStep& step, float* params, float* grads,
                          float* m, float* v, std::size_t count, std::span<const optim::DecaySegment> segments,
                          bool zero_grads, bf16_t* param_copy) {
  if (count == 0) return;
  optim::cuda::adamw_update(optim::cuda::adamw_values(config, step), segments_of(params, segments, count), params,
                            grads, m, v, param_copy, stream_);
  if (zero_grads) fill_zero(grads, count * sizeof(float));
}

void CudaDeviceOps::add_scalar(double* sum, const double* x) {
  hsdp::stream::cuda::add_scalar(sum, x, stream_);
}

void CudaDeviceOps::squared_sum(const float* values, std::size_t count, double* sum) {
  if (count == 0) return;
  double* partial = scratch_.data() + optim::cuda::kSumOfSquaresScratch;
  optim::cuda::sum_of_squares(partial, values, count, scratch_.data(), stream_);
  hsdp::stream::cuda::add_scalar(sum, partial, stream_);
}

void CudaDeviceOps::flag_nonfinite(const float* values, std::size_t count, double* flag) {
  const std::unique_ptr<DeviceMemory> found = allocate(sizeof(int), MemCategory::comm_buffers);
  find_nonfinite(values, count, static_cast<int*>(found->data()), stream_);
  flag_if_found(flag, static_cast<const int*>(found->data()), stream_);
}

void CudaDeviceOps::zero_if_nonfinite(float* values, std::size_t count, double* flag) {
  const std::unique_ptr<DeviceMemory> found = allocate(sizeof(int), MemCategory::comm_buffers);
  auto* f = static_cast<int*>(found->data());
  find_nonfinite(values, count, f, stream_);
  zero_if_found(values, count, f, stream_);
  flag_if_found(flag, f, stream_);
}

void CudaDeviceOps::copy_to_host(void* host, const void* device, std::size_t bytes) {
  if (bytes == 0) return;
  dc::check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync D2H");
  dc::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (copy_to_host)");
}

void CudaDeviceOps::copy_from_host(void* device, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  dc::check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync H2D");
  dc::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (copy_from_host)");
}

// Reads the device only when a quantize ran since the last read: a step without ZeRO++ makes one read, its scalars'.
void CudaDeviceOps::raise_deferred_errors() {
  if (!quantized_unchecked_) return;
  quantized_unchecked_ = false;
  quant_status_.throw_if_non_finite(quantized_count_, stream_);
}

}  // namespace hsdp::stream::cuda
