#pragma once
// DeviceOps: what the sharding engine needs of the processor it trains on (device.type: the CPU or one GPU): its
// memory and the element work of the engine's schedule. (Not to be confused with the device layer, hsdp/device/:
// the libraries a DeviceOps and the model call, BLAS and OpenMP on the CPU, the CUDA runtime and cuBLASLt.) The
// engine (engine.cpp) decides WHAT is gathered, reduced, freed and updated, and WHEN; a DeviceOps does it on its
// memory:
//   allocate          memory charged to the accountant while it lives (no allocation in the device's own
//                     allocator inside a step on a GPU: a stream-ordered pool or arena)
//   convert, round    dtype conversion (fp32 <-> bf16/fp16, round to nearest even) and rounding in place
//   accumulate        sum += scale * x (a reduced gradient into the fp32 gradient shard)
//   quantize, ...     ZeRO++ messages (zeropp.hpp's layout): quantize, dequantize, fused reduce-dequantize and
//                     reduce-requantize
//   adamw             AdamW on a shard, with its decay segments
//   squared_sum, flag_nonfinite   the norm's partial sum and the fp16 overflow check of a shard, into device scalars
//   copy_to_host       the one read of the step's scalars (and checkpoints' staging)
//   host_address       device memory the host may read and write in place (the CPU's), else checkpoints stage
// Pointers passed to a DeviceOps are its memory (host memory for the CPU); the engine never dereferences them: it
// hands them to the DeviceOps, to communicators (which take device memory: NCCL, CUDA-aware MPI) and to the model's
// kernels, and reaches the shard state from the host only through copies or host_address.
//
// Ordering: every call is issued inside work the engine enqueued on a queue (hsdp/stream/queues.hpp); the engine orders
// the queues with events. A GPU device runs each call on the stream of the queue it was issued from
// (docs/architecture.md, "Stream order and the stream checker").
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "hsdp/core/dtype.hpp"
#include "hsdp/core/memory.hpp"
#include "hsdp/optim/adamw.hpp"
#include "hsdp/quant/blockwise.hpp"

namespace hsdp::stream {

// A block of device memory, charged to its accountant category until destroyed.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual void* data() = 0;
  virtual std::size_t bytes() const = 0;
};

// An owned array of `count` elements in device memory (zeroed when allocated); empty when default-constructed.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(std::unique_ptr<DeviceMemory> memory, std::size_t count) : memory_(std::move(memory)), count_(count) {}
  T* data() { return memory_ ? static_cast<T*>(memory_->data()) : nullptr; }
  const T* data() const { return memory_ ? static_cast<const T*>(memory_->data()) : nullptr; }
  std::size_t size() const { return count_; }
  bool empty() const { return !memory_; }
  void reset() {
    memory_.reset();
    count_ = 0;
  }

 private:
  std::unique_ptr<DeviceMemory> memory_;
  std::size_t count_ = 0;
};

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual const char* name() const = 0;

  // `bytes` of zeroed memory charged to `category` while the block lives.
  virtual std::unique_ptr<DeviceMemory> allocate(std::size_t bytes, MemCategory category) = 0;
  template <typename T>
  DeviceArray<T> array(std::size_t count, MemCategory category) {
    return DeviceArray<T>(allocate(count * sizeof(T), category), count);
  }
  // `count` elements of dtype `t` (raw storage for a collective's message).
  DeviceArray<std::byte> typed(std::size_t count, DType t, MemCategory category) {
    return DeviceArray<std::byte>(allocate(count * size_of(t), category), count * size_of(t));
  }

  // out[i] = in[i] converted from `from` to `to` (f32, bf16, f16; the same dtype copies).
  virtual void convert(const void* in, DType from, void* out, DType to, std::size_t count) = 0;
  // values rounded in place to the nearest value of `to` (f32: unchanged).
  virtual void round_to(float* values, std::size_t count, DType to) = 0;
  virtual void fill_zero(void* data, std::size_t bytes) = 0;
  // sum[i] += scale * x[i], in fp32.
  virtual void accumulate(float* sum, const float* x, std::size_t count, float scale) = 0;

  // ZeRO++ messages (zeropp.hpp: packed values, then fp32 block scales) of `count` elements.
  virtual void quantize(const float* values, std::size_t count, quant::QuantSpec spec, std::uint8_t* message) = 0;
  virtual void dequantize(const std::uint8_t* message, std::size_t count, quant::QuantSpec spec, float* out) = 0;
  // out = the fp32 sum of the messages, in order (quant/fused.hpp).
  virtual void reduce_dequantize(std::span<const std::uint8_t* const> messages, std::size_t count,
                                 quant::QuantSpec spec, float* out) = 0;
  // message out = the quantized fp32 sum of the messages, in order.
  virtual void reduce_requantize(std::span<const std::uint8_t* const> messages, std::size_t count,
                                 quant::QuantSpec spec, std::uint8_t* out) = 0;

  // zero_grads: the gradients are set to zero in the same pass (the next step accumulates into them). param_copy,
  // when not null: count bf16 values that receive the updated params rounded to bf16 (convert's rounding), in the
  // same pass (a bf16 compute copy kept beside unsharded masters).
  virtual void adamw(const optim::AdamWConfig& config, const optim::AdamWStep& step, float* params, float* grads,
                     float* m, float* v, std::size_t count, std::span<const optim::DecaySegment> segments,
                     bool zero_grads, bf16_t* param_copy) = 0;
  // Scalars stay in device memory until the host copies them (once a step: loss, norm, overflow flag).
  // *sum += *x (one double each: a micro-batch's loss added to the step's).
  virtual void add_scalar(double* sum, const double* x) = 0;
  // *sum += the sum of squares of the values, in double (the global norm's partial sum).
  virtual void squared_sum(const float* values, std::size_t count, double* sum) = 0;
  // *flag = 1 if any value is inf or nan (else unchanged).
  virtual void flag_nonfinite(const float* values, std::size_t count, double* flag) = 0;
  // If any value is inf or nan: every value set to 0 and *flag = 1 (a non-finite gradient before qgZ quantizes).
  virtual void zero_if_nonfinite(float* values, std::size_t count, double* flag) = 0;
  // sum[i] += scale * x[i] with x of dtype t (f32, bf16, f16), in fp32: convert and accumulate in one pass.
  virtual void accumulate_from(float* sum, const void* x, DType t, std::size_t count, float scale) = 0;
  virtual void copy_to_host(void* host, const void* device, std::size_t bytes) = 0;
  virtual void copy_from_host(void* device, const void* host, std::size_t bytes) = 0;
  // Errors a device finds while the host goes on (a GPU's quantize meeting a non-finite value cannot throw): thrown
  // here, as the CPU would have thrown them at the call. The engine calls it with each read of a step scalar.
  virtual void raise_deferred_errors() {}
  // The host address of device memory when the host can read and write it in place (the CPU device: the memory
  // itself), else null (a GPU's memory: checkpoints stage through a host copy).
  virtual void* host_address(void* device) = 0;
};

// The CPU: host memory (64-byte aligned), the OpenMP-parallel kernels of core, quant and optim. host_visible =
// false makes host_address answer null as a GPU's does, so tests prove the staged checkpoint path on the CPU.
std::unique_ptr<DeviceOps> make_cpu_device_ops(MemoryAccountant& memory, bool host_visible = true);

}  // namespace hsdp::stream
