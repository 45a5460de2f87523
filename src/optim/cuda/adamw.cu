// AdamW on the GPU (see adamw.hpp): one thread per element, its decay segment found by binary search over the
// segments' first offsets (a few hundred at most, cached).
#include <cmath>
#include <string>
#include <vector>

#include "hsdp/core/error.hpp"
#include "hsdp/device/cuda/kernel_util.cuh"
#include "hsdp/optim/cuda/adamw.hpp"

namespace hsdp::optim::cuda {
namespace {

namespace dc = hsdp::device::cuda;

constexpr int kThreads = 256;

__global__ void adamw_kernel(AdamWValues values, const std::size_t* segment_offsets, const std::uint8_t* segment_decays,
                             int segments, float* params, const float* grads, float* m1, float* m2, bf16_t* param_copy,
                             std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    int lo = 0;  // the last segment whose offset is <= i
    int hi = segments - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (segment_offsets[mid] <= i)
        lo = mid;
      else
        hi = mid - 1;
    }
    const float decay = segment_decays[lo] != 0 ? values.weight_decay : 0.0f;
    const float grad = values.grad_scale * grads[i];
    const float mi = values.beta1 * m1[i] + (1.0f - values.beta1) * grad;
    const float vi = values.beta2 * m2[i] + (1.0f - values.beta2) * grad * grad;
    m1[i] = mi;
    m2[i] = vi;
    const float m_hat = mi / values.bias_correction1;
    const float v_hat = vi / values.bias_correction2;
    const float p = params[i] - values.lr * (m_hat / (sqrtf(v_hat) + values.eps) + decay * params[i]);
    params[i] = p;
    if (param_copy != nullptr) param_copy[i] = dc::detail::to_bf16(p);
  }
}

}  // namespace

DeviceDecaySegments::DeviceDecaySegments(std::span<const DecaySegment> segments, std::size_t total) : total_(total) {
  std::vector<std::size_t> offsets;
  std::vector<std::uint8_t> decays;
  std::size_t next = 0;
  for (const DecaySegment& segment : segments) {
    if (segment.offset != next) {
      throw_internal("adamw (cuda): decay segment at offset " + std::to_string(segment.offset) + " should start at " +
                     std::to_string(next) + " (segments must tile the shard in order)");
    }
    if (segment.count == 0) continue;
    offsets.push_back(segment.offset);
    decays.push_back(segment.decay ? 1 : 0);
    next += segment.count;
  }
  if (next != total) {
    throw_internal("adamw (cuda): decay segments cover " + std::to_string(next) + " of " + std::to_string(total) +
                   " elements");
  }
  offsets_ = dc::DeviceBuffer<std::size_t>(offsets.size());
  decays_ = dc::DeviceBuffer<std::uint8_t>(decays.size());
  if (!offsets.empty()) {
    dc::check(cudaMemcpy(offsets_.data(), offsets.data(), offsets.size() * sizeof(std::size_t), cudaMemcpyHostToDevice),
              "cudaMemcpy (decay segments)");
    dc::check(cudaMemcpy(decays_.data(), decays.data(), decays.size(), cudaMemcpyHostToDevice),
              "cudaMemcpy (decay segments)");
  }
}

float adamw_bias_correction(float beta, std::int64_t t) {
  if (t < 1) throw_internal("adamw (cuda): step t must be >= 1, got " + std::to_string(t));
  return static_cast<float>(1.0 - std::pow(static_cast<double>(beta), static_cast<double>(t)));
}

AdamWValues adamw_values(const AdamWConfig& config, const AdamWStep& step) {
  AdamWValues values;
  values.lr = step.lr;
  values.beta1 = config.beta1;
  values.beta2 = config.beta2;
  values.eps = config.eps;
  values.weight_decay = config.weight_decay;
  values.grad_scale = step.grad_scale;
  values.bias_correction1 = adamw_bias_correction(config.beta1, step.t);
  values.bias_correction2 = adamw_bias_correction(config.beta2, step.t);
  return values;
}

void adamw_update(const AdamWValues& values, const DeviceDecaySegments& segments, float* params, const float* grads,
                  float* m, float* v, bf16_t* param_copy, cudaStream_t stream) {
  const std::size_t n = segments.total();
  if (n == 0) return;
  adamw_kernel<<<dc::detail::grid_for(n, kThreads), kThreads, 0, stream>>>(
      values, segments.offsets(), segments.decays(), segments.count(), params, grads, m, v, param_copy, n);
  dc::check_launch("adamw_kernel");
}

namespace {

// Pass 1: block b sums x[i]^2 for i = b * kThreads + t + k * stride over its threads (a fixed tree in shared memory).
__global__ void sum_of_squares_partial(const float* x, std::size_t n, double* partial) {
  __shared__ double shared[kThreads];
  double acc = 0.0;
  for (std::size_t i = blockIdx.x * std::size_t{kThreads} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * kThreads) {
    const double v = x[i];
    acc += v * v;
  }
  shared[threadIdx.x] = acc;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = shared[0];
}

// Pass 2: one block sums the partials, again by a fixed tree.
__global__ void sum_of_squares_final(const double* partial, int count, double* out) {
  __shared__ double shared[kSumOfSquaresScratch];
  for (int i = static_cast<int>(threadIdx.x); i < static_cast<int>(kSumOfSquaresScratch); i += blockDim.x)
    shared[i] = i < count ? partial[i] : 0.0;
  __syncthreads();
  for (int half = static_cast<int>(kSumOfSquaresScratch) / 2; half > 0; half /= 2) {
    for (int i = static_cast<int>(threadIdx.x); i < half; i += blockDim.x) shared[i] += shared[i + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = shared[0];
}

}  // namespace

void sum_of_squares(double* out, const float* x, std::size_t n, double* scratch, cudaStream_t stream) {
  const int blocks = static_cast<int>(kSumOfSquaresScratch);
  sum_of_squares_partial<<<blocks, kThreads, 0, stream>>>(x, n, scratch);
  dc::check_launch("sum_of_squares_partial");
  sum_of_squares_final<<<1, kThreads, 0, stream>>>(scratch, blocks, out);
  dc::check_launch("sum_of_squares_final");
}

}  // namespace hsdp::optim::cuda
