#pragma once
// DeviceOps that counts the host's copies out of device memory: it forwards every call to the DeviceOps it wraps and
// counts copy_to_host (from any thread). A test of how often the engine reads the device: its step scalars once a
// step (Engine::step_scalars), nothing else where the host reaches the device's memory in place.
#include <atomic>
#include <memory>
#include <span>

#include "hsdp/stream/device_ops.hpp"

namespace hsdp::stream::testing {

class CountingDeviceOps final : public DeviceOps {
 public:
  explicit CountingDeviceOps(std::unique_ptr<DeviceOps> inner) : inner_(std::move(inner)) {}
  // copy_to_host calls so far, shared so that a test keeps it after the engine that owns this DeviceOps went.
  std::shared_ptr<const std::atomic<int>> reads() const { return reads_; }

  const char* name() const override { return inner_->name(); }
  std::unique_ptr<DeviceMemory> allocate(std::size_t bytes, MemCategory category) override {
    return inner_->allocate(bytes, category);
  }
  void convert(const void* in, DType from, void* out, DType to, std::size_t count) override {
    inner_->convert(in, from, out, to, count);
  }
  void round_to(float* values, std::size_t count, DType to) override { inner_->round_to(values, count, to); }
  void fill_zero(void* data, std::size_t bytes) override { inner_->fill_zero(data, bytes); }
  void accumulate(float* sum, const float* x, std::size_t count, float scale) override {
    inner_->accumulate(sum, x, count, scale);
  }
  void quantize(const float* values, std::size_t count, quant::QuantSpec spec, std::uint8_t* message) override {
    inner_->quantize(values, count, spec, message);
  }
  void dequantize(const std::uint8_t* message, std::size_t count, quant::QuantSpec spec, float* out) override {
    inner_->dequantize(message, count, spec, out);
  }
  void reduce_dequantize(std::span<const std::uint8_t* const> messages, std::size_t count, quant::QuantSpec spec,
                         float* out) override {
    inner_->reduce_dequantize(messages, count, spec, out);
  }
  void reduce_requantize(std::span<const std::uint8_t* const> messages, std::size_t count, quant::QuantSpec spec,
                         std::uint8_t* out) override {
    inner_->reduce_requantize(messages, count, spec, out);
  }
  void adamw(const optim::AdamWConfig& config, const optim::AdamWStep& step, float* params, float* grads, float* m,
             float* v, std::size_t count, std::span<const optim::DecaySegment> segments, bool zero_grads,
             bf16_t* param_copy) override {
    inner_->adamw(config, step, params, grads, m, v, count, segments, zero_grads, param_copy);
  }
  void add_scalar(double* sum, const double* x) override { inner_->add_scalar(sum, x); }
  void squared_sum(const float* values, std::size_t count, double* sum) override {
    inner_->squared_sum(values, count, sum);
  }
  void flag_nonfinite(const float* values, std::size_t count, double* flag) override {
    inner_->flag_nonfinite(values, count, flag);
  }
  void zero_if_nonfinite(float* values, std::size_t count, double* flag) override {
    inner_->zero_if_nonfinite(values, count, flag);
  }
  void accumulate_from(float* sum, const void* x, DType t, std::size_t count, float scale) override {
    inner_->accumulate_from(sum, x, t, count, scale);
  }
  void copy_to_host(void* host, const void* device, std::size_t bytes) override {
    ++*reads_;
    inner_->copy_to_host(host, device, bytes);
  }
  void copy_from_host(void* device, const void* host, std::size_t bytes) override {
    inner_->copy_from_host(device, host, bytes);
  }
  void raise_deferred_errors() override { inner_->raise_deferred_errors(); }
  void* host_address(void* device) override { return inner_->host_address(device); }

 private:
  std::unique_ptr<DeviceOps> inner_;
  std::shared_ptr<std::atomic<int>> reads_ = std::make_shared<std::atomic<int>>(0);
};

}  // namespace hsdp::stream::testing
