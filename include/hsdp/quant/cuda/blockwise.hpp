#pragma once
// Block-wise int8/int4 quantization on the GPU, bit-exact to hsdp::quant's CPU definition
// (include/hsdp/quant/blockwise.hpp: read it for the scale rounding, the round-to-nearest-even of x / scale,
// and the packed layout). Same inputs give the same packed bytes and scales, byte for byte; dequantize gives the
// same floats (q * scale is exact) and the same bf16/fp16 roundings.
//
// One CUDA block per quantization block. The layout is the CPU's QuantSpec (bits, block), the sizes the CPU's
// packed_bytes and scale_count; a spec whose bits are not int8/int4 or whose block is not positive and even is an
// internal Error naming it.
//
// Non-finite input: the GPU cannot throw, so quantize records the index of the first NaN/Inf in a QuantStatus
// (device memory) and leaves that block's output unspecified, as the CPU does. QuantStatus::throw_if_non_finite
// waits for the stream and throws the CPU's error; call it at the end of a step, or use all_finite first.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "hsdp/core/dtype.hpp"
#include "hsdp/device/cuda/runtime.hpp"
#include "hsdp/quant/blockwise.hpp"

namespace hsdp::quant::cuda {

// The first non-finite element seen by quantize since the last reset.
class QuantStatus {
 public:
  QuantStatus();
  // Forgets what was recorded (on `stream`, before the quantize calls it should watch).
  void reset(cudaStream_t stream);
  // Waits for `stream`, then throws the internal Error "quantize: non-finite value at element i of <count> ..."
  // if a quantize on it saw one.
  void throw_if_non_finite(std::size_t count, cudaStream_t stream);
  unsigned long long* device_slot() { return first_bad_.data(); }

 private:
  device::cuda::DeviceBuffer<unsigned long long> first_bad_;
  device::cuda::PinnedBuffer<unsigned long long> host_;
};

// packed: packed_bytes(count, spec.bits) bytes; scales: scale_count(count, spec.block) floats; x: count elements
// of dtype (f32, bf16 or f16). All device memory.
void quantize(const void* x, DType dtype, std::size_t count, const QuantSpec& spec, std::uint8_t* packed, float* scales,
              QuantStatus& status, cudaStream_t stream);
// out: count elements of dtype (f32, bf16 or f16) = q * scale of its block.
void dequantize(const std::uint8_t* packed, const float* scales, std::size_t count, const QuantSpec& spec, void* out,
                DType dtype, cudaStream_t stream);
// acc[i] = acc[i] + q[i] * scale (fp32): the building block of a dequantize-reduce, as the CPU's fused kernels.
void dequantize_accumulate(const std::uint8_t* packed, const float* scales, std::size_t count, const QuantSpec& spec,
                           float* acc, cudaStream_t stream);

}  // namespace hsdp::quant::cuda
