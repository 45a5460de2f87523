// Fused softmax + cross-entropy on the GPU (see layers.hpp): one block per row of logits, three passes
// (max, sum of exponentials, write) over a row that stays in L2.
#include "hsdp/device/cuda/layers.hpp"
#include "kernel_util.cuh"

namespace hsdp::device::cuda {
namespace {

using detail::load;
using detail::store;

constexpr int kThreads = 512;

enum class Output { probs, dlogits };

// out may alias logits: every thread writes only the columns it read, and the target logit is read before
// the first write (the block reductions in between synchronize).
template <Output kOut, typename T>
__global__ void softmax_xent_kernel(T* out, float* losses, const T* logits, const std::int32_t* targets,
                                    float dloss_per_row, int V, int Vp) {
  const std::size_t row_offset = static_cast<std::size_t>(blockIdx.x) * Vp;
  const T* row = logits + row_offset;
  const int target = targets[blockIdx.x];
  const float target_logit = load(row + target);
  float local_max = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) local_max = fmaxf(local_max, load(row + i));
  const float m = detail::block_max(local_max);
  float local_sum = 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) local_sum += expf(load(row + i) - m);
  const float sum = detail::block_sum(local_sum);
  const float inv_sum = 1.0f / sum;
  T* o = out + row_offset;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float p = expf(load(row + i) - m) * inv_sum;
    if constexpr (kOut == Output::probs) {
      store(o + i, p);
    } else {
      float d = p * dloss_per_row;
      if (i == target) d -= dloss_per_row;
      store(o + i, d);
    }
  }
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(sum) - (target_logit - m);
}

template <typename T>
__global__ void softmax_xent_backward_kernel(T* dlogits, const T* probs, const std::int32_t* targets,
                                             float dloss_per_row, int V, int Vp) {
  const std::size_t row_offset = static_cast<std::size_t>(blockIdx.x) * Vp;
  const int target = targets[blockIdx.x];
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    float d = load(probs + row_offset + i) * dloss_per_row;
    if (i == target) d -= dloss_per_row;
    store(dlogits + row_offset + i, d);
  }
}

}  // namespace

template <typename T>
void softmax_xent_forward(T* probs, float* losses, const T* logits, const std::int32_t* targets, int N, int V, int Vp,
                          cudaStream_t stream) {
  if (N == 0) return;
  softmax_xent_kernel<Output::probs><<<N, kThreads, 0, stream>>>(probs, losses, logits, targets, 0.0f, V, Vp);
  check_launch("softmax_xent_kernel");
}

template <typename T>
void softmax_xent_backward(T* dlogits, const T* probs, const std::int32_t* targets, float dloss_per_row, int N, int V,
                           int Vp, cudaStream_t stream) {
  if (N == 0) return;
  softmax_xent_backward_kernel<<<N, kThreads, 0, stream>>>(dlogits, probs, targets, dloss_per_row, V, Vp);
  check_launch("softmax_xent_backward_kernel");
}

template <typename T>
void softmax_xent_forward_backward(T* dlogits, float* losses, const T* logits, const std::int32_t* targets,
                                   float dloss_per_row, int N, int V, int Vp, cudaStream_t stream) {
  if (N == 0) return;
  softmax_xent_kernel<Output::dlogits>
      <<<N, kThreads, 0, stream>>>(dlogits, losses, logits, targets, dloss_per_row, V, Vp);
  check_launch("softmax_xent_kernel");
}

#define HSDP_INSTANTIATE_SOFTMAX_XENT(T)                                                                          \
  template void softmax_xent_forward<T>(T*, float*, const T*, const std::int32_t*, int, int, int, cudaStream_t);  \
  template void softmax_xent_backward<T>(T*, const T*, const std::int32_t*, float, int, int, int, cudaStream_t);  \
  template void softmax_xent_forward_backward<T>(T*, float*, const T*, const std::int32_t*, float, int, int, int, \
                                                 cudaStream_t);

HSDP_INSTANTIATE_SOFTMAX_XENT(float)
HSDP_INSTANTIATE_SOFTMAX_XENT(bf16_t)
#undef HSDP_INSTANTIATE_SOFTMAX_XENT

}  // namespace hsdp::device::cuda
