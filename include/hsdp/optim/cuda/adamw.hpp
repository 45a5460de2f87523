#pragma once
// AdamW on a rank's shard in device memory: the math and the decay-segment semantics of
// hsdp::optim::adamw_update (include/hsdp/optim/adamw.hpp), elementwise on the GPU:
//   g = grad_scale * grad;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   p = p - lr (m / bias1 / (sqrt(v / bias2) + eps) + wd p),  wd = weight_decay on decay segments, 0 elsewhere.
// The step's numbers arrive as one plain struct a kernel takes by value (AdamWValues): the bias corrections are
// computed on the host exactly as the CPU does (adamw_bias_correction).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "hsdp/core/dtype.hpp"
#include "hsdp/device/cuda/runtime.hpp"
#include "hsdp/optim/adamw.hpp"

namespace hsdp::optim::cuda {

// The decay segments of one shard (optim::DecaySegment), validated and copied to the device once (they do not
// change between steps).
class DeviceDecaySegments {
 public:
  // Throws an internal Error unless the segments tile [0, total) in order.
  DeviceDecaySegments(std::span<const DecaySegment> segments, std::size_t total);
  std::size_t total() const { return total_; }
  int count() const { return static_cast<int>(offsets_.size()); }
  const std::size_t* offsets() const { return offsets_.data(); }  // device: first element of each segment
  const std::uint8_t* decays() const { return decays_.data(); }   // device: 1 where the segment decays

 private:
  device::cuda::DeviceBuffer<std::size_t> offsets_;
  device::cuda::DeviceBuffer<std::uint8_t> decays_;
  std::size_t total_ = 0;
};

struct AdamWValues {
  float lr = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  float grad_scale = 1.0f;
  float bias_correction1 = 1.0f;  // 1 - beta1^t
  float bias_correction2 = 1.0f;  // 1 - beta2^t
};

// 1 - beta^t, computed as optim::adamw_update does (in double, rounded to float once). t >= 1.
float adamw_bias_correction(float beta, std::int64_t t);
// The values of one step: the CPU's AdamWConfig and AdamWStep, with the bias corrections of step.t.
AdamWValues adamw_values(const AdamWConfig& config, const AdamWStep& step);

// Updates params, m and v (segments.total() elements each, device memory) in place on `stream`. When
// param_copy is not null it also receives the updated params rounded to bf16 (the compute copy), in the same pass.
void adamw_update(const AdamWValues& values, const DeviceDecaySegments& segments, float* params, const float* grads,
                  float* m, float* v, bf16_t* param_copy, cudaStream_t stream);

// The sum of x[i]^2 over n fp32 values (a squared gradient norm), accumulated in double in a fixed order, so a
// run repeats bit for bit; written to *out (device memory) on `stream`. scratch: kSumOfSquaresScratch doubles.
inline constexpr std::size_t kSumOfSquaresScratch = 1024;
void sum_of_squares(double* out, const float* x, std::size_t n, double* scratch, cudaStream_t stream);

}  // namespace hsdp::optim::cuda
