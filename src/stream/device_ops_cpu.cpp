// The sharding engine's DeviceOps on the CPU (device_ops.hpp): host memory and the kernels of core, quant and optim.
#include <algorithm>
#include <cstring>
#include <vector>

#include "hsdp/core/buffer.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/optim/grad_clip.hpp"
#include "hsdp/optim/loss_scaler.hpp"
#include "hsdp/quant/fused.hpp"
#include "hsdp/stream/device_ops.hpp"
#include "hsdp/quant/message.hpp"

namespace hsdp::stream {
namespace {

class HostMemory final : public DeviceMemory {
 public:
  HostMemory(std::size_t bytes, MemoryAccountant& memory, MemCategory category) : storage_(bytes, memory, category) {}
  void* data() override { return storage_.data(); }
  std::size_t bytes() const override { return storage_.size_bytes(); }

 private:
  Buffer<std::byte> storage_;
};

std::vector<quant::QuantizedView> views(std::span<const std::uint8_t* const> messages, std::size_t count,
                                        quant::QuantSpec spec) {
  std::vector<quant::QuantizedView> out;
  out.reserve(messages.size());
  for (const std::uint8_t* m : messages) out.push_back(quant::message_view(m, count, spec));
  return out;
}

class CpuDeviceOps final : public DeviceOps {
 public:
  CpuDeviceOps(MemoryAccountant& memory, bool host_visible) : memory_(memory), host_visible_(host_visible) {}
  const char* name() const override { return "cpu"; }

  std::unique_ptr<DeviceMemory> allocate(std::size_t bytes, MemCategory category) override {
    return std::make_unique<HostMemory>(bytes, memory_, category);
  }
  void convert(const void* in, DType from, void* out, DType to, std::size_t count) override {
    if (from == to) {
      std::memmove(out, in, count * size_of(from));
    } else if (from == DType::f32) {
      convert_from_f32(std::span<const float>(static_cast<const float*>(in), count), out, to);
    } else if (to == DType::f32) {
      convert_to_f32(in, from, std::span<float>(static_cast<float*>(out), count));
    } else {
      throw_internal(std::string("device convert: ") + std::string(to_string(from)) + " -> " +
                     std::string(to_string(to)) + " goes through fp32");
    }
  }
  void round_to(float* values, std::size_t count, DType to) override {
    hsdp::round_to(std::span<float>(values, count), to);
  }
  void fill_zero(void* data, std::size_t bytes) override { std::memset(data, 0, bytes); }
  void accumulate(float* sum, const float* x, std::size_t count, float scale) override {
    if (scale == 1.0f) {
      for (std::size_t i = 0; i < count; ++i) sum[i] += x[i];
    } else {
      for (std::size_t i = 0; i < count; ++i) sum[i] += x[i] * scale;
    }
  }
  void quantize(const float* values, std::size_t count, quant::QuantSpec spec, std::uint8_t* message) override {
    quant::pack_message(std::span<const float>(values, count), spec, message);
  }
  void dequantize(const std::uint8_t* message, std::size_t count, quant::QuantSpec spec, float* out) override {
    quant::dequantize(quant::message_view(message, count, spec), std::span<float>(out, count));
  }
  void reduce_dequantize(std::span<const std::uint8_t* const> messages, std::size_t count, quant::QuantSpec spec,
                         float* out) override {
    quant::reduce_dequantize(views(messages, count, spec), std::span<float>(out, count));
  }
  void reduce_requantize(std::span<const std::uint8_t* const> messages, std::size_t count, quant::QuantSpec spec,
                         std::uint8_t* out) override {
    quant::reduce_requantize(views(messages, count, spec), quant::message_span(out, count, spec));
  }
  void adamw(const optim::AdamWConfig& config, const optim::AdamWStep& step, float* params, float* grads, float* m,
             float* v, std::size_t count, std::span<const optim::DecaySegment> segments, bool zero_grads,
             bf16_t* param_copy) override {
    const std::span<float> p(params, count), g(grads, count), m1(m, count), m2(v, count);
    if (zero_grads) {
      optim::adamw_update_zeroing_grads(config, step, p, g, m1, m2, segments);
    } else {
      optim::adamw_update(config, step, p, g, m1, m2, segments);
    }
    if (param_copy != nullptr) convert_from_f32(p, param_copy, DType::bf16);
  }
  void add_scalar(double* sum, const double* x) override { *sum += *x; }
  void squared_sum(const float* values, std::size_t count, double* sum) override {
    *sum += optim::local_squared_sum(std::span<const float>(values, count));
  }
  void flag_nonfinite(const float* values, std::size_t count, double* flag) override {
    if (optim::has_inf_or_nan(std::span<const float>(values, count))) *flag = 1.0;
  }
  void zero_if_nonfinite(float* values, std::size_t count, double* flag) override {
    if (!optim::has_inf_or_nan(std::span<const float>(values, count))) return;
    std::fill_n(values, count, 0.0f);
    *flag = 1.0;
  }
  void accumulate_from(float* sum, const void* x, DType t, std::size_t count, float scale) override {
    if (t == DType::f32) {
      accumulate(sum, static_cast<const float*>(x), count, scale);
      return;
    }
    constexpr std::size_t kChunk = 4096;  // converted on the stack, a chunk at a time
    float chunk[kChunk];
    const std::size_t bytes = size_of(t);
    for (std::size_t begin = 0; begin < count; begin += kChunk) {
      const std::size_t n = std::min(kChunk, count - begin);
      convert_to_f32(static_cast<const std::byte*>(x) + begin * bytes, t, std::span<float>(chunk, n));
      accumulate(sum + begin, chunk, n, scale);
    }
  }
  void copy_to_host(void* host, const void* device, std::size_t bytes) override { std::memcpy(host, device, bytes); }
  void copy_from_host(void* device, const void* host, std::size_t bytes) override { std::memcpy(device, host, bytes); }
  void* host_address(void* device) override { return host_visible_ ? device : nullptr; }

 private:
  MemoryAccountant& memory_;
  bool host_visible_;
};

}  // namespace

std::unique_ptr<DeviceOps> make_cpu_device_ops(MemoryAccountant& memory, bool host_visible) {
  return std::make_unique<CpuDeviceOps>(memory, host_visible);
}

}  // namespace hsdp::stream
