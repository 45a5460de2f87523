#pragma once
// A training run's model state on one GPU, in GptCuda's flat layout (hsdp/model/cuda/gpt.hpp): fp32 master weights,
// their bf16 compute copy (what GptCuda computes with), fp32 gradients and the AdamW moments, and the AdamW decay
// segments of that layout (matrices and embeddings decay; biases and norms do not). It joins the model (layout,
// initialisation, GptCuda's offsets) and the optimizer (hsdp/optim/cuda/adamw.hpp), hence the train layer.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "hsdp/core/dtype.hpp"
#include "hsdp/device/cuda/runtime.hpp"
#include "hsdp/model/layout.hpp"
#include "hsdp/optim/cuda/adamw.hpp"

namespace hsdp::train::cuda {

class GptParameters {
 public:
  // Master weights initialised on the host as hsdp::model::init does (from `seed`), uploaded, the compute copy
  // made and the moments zeroed on `stream`; returns once that is done.
  GptParameters(const model::ModelLayout& layout, std::uint64_t seed, cudaStream_t stream);

  std::size_t total() const { return total_; }
  float* master() { return master_.data(); }
  const bf16_t* compute() const { return compute_.data(); }
  float* grads() { return grads_.data(); }
  float* exp_avg() { return m_.data(); }
  float* exp_avg_sq() { return v_.data(); }
  std::size_t master_bytes() const { return master_.size_bytes() + compute_.size_bytes(); }
  std::size_t grad_bytes() const { return grads_.size_bytes(); }
  std::size_t optimizer_bytes() const { return m_.size_bytes() + v_.size_bytes(); }

  void zero_grads(cudaStream_t stream);
  // AdamW on every parameter (values' decay applies on the decay segments), rewriting the compute copy in the same
  // pass.
  void adamw_update(const optim::cuda::AdamWValues& values, cudaStream_t stream);
  // After the master weights were overwritten (a checkpoint load): the compute copy follows.
  void refresh_compute_copy(cudaStream_t stream);

 private:
  std::size_t total_;
  device::cuda::DeviceBuffer<float> master_;
  device::cuda::DeviceBuffer<bf16_t> compute_;
  device::cuda::DeviceBuffer<float> grads_, m_, v_;
  optim::cuda::DeviceDecaySegments segments_;
};

}  // namespace hsdp::train::cuda
