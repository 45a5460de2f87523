// Fused softmax + cross-entropy on the GPU (see layers.hpp): one block per row of logits, two passes over a row
// that stays in L2 (online maximum and sum of exponentials, then the write).
#include "hsdp/device/cuda/kernel_util.cuh"
#include "hsdp/model/cuda/layers.hpp"

namespace hsdp::model::cuda {
namespace {

namespace detail = hsdp::device::cuda::detail;
using detail::load;
using detail::store;
using device::cuda::check_launch;

constexpr int kThreads = 512;

enum class Output { probs, dlogits };

// Running maximum and sum of exp(x - maximum), merged as the online softmax does.
struct MaxSum {
  float m = -INFINITY;
  float s = 0.0f;
  __device__ void add(float x) {
    if (x > m) {
      s = s * expf(m - x) + 1.0f;
      m = x;
    } else {
      s += expf(x - m);
    }
  }
};

// One block per row, two passes over it: the maximum and the sum of exponentials together (online), then the
// write. The first floor(V / P) * P columns go in packs of P (16-byte loads and stores), the rest one by one.
// out may alias logits: every thread writes only the columns it read, and the target logit is read before the
// first write (the block reductions in between synchronize).
template <Output kOut, int P, typename T>
__global__ void softmax_xent_kernel(T* out, float* losses, const T* logits, const std::int32_t* targets,
                                    float dloss_per_row, int V, int Vp) {
  const std::size_t row_offset = static_cast<std::size_t>(blockIdx.x) * Vp;
  const T* row = logits + row_offset;
  const int target = targets[blockIdx.x];
  const float target_logit = load(row + target);
  const int packed = V / P * P;
  MaxSum local;
  for (int i = threadIdx.x * P; i < packed; i += blockDim.x * P) {
    const auto xs = detail::load_pack<P>(row + i);
    for (int k = 0; k < P; ++k) local.add(load(&xs.v[k]));
  }
  for (int i = packed + threadIdx.x; i < V; i += blockDim.x) local.add(load(row + i));
  const float m = detail::block_max(local.m);
  const float sum = detail::block_sum(local.m == -INFINITY ? 0.0f : local.s * expf(local.m - m));
  const float inv_sum = 1.0f / sum;
  T* o = out + row_offset;
  const auto value = [&](int i, float x) {
    const float p = expf(x - m) * inv_sum;
    if constexpr (kOut == Output::probs) {
      return p;
    } else {
      float d = p * dloss_per_row;
      if (i == target) d -= dloss_per_row;
      return d;
    }
  };
  for (int i = threadIdx.x * P; i < packed; i += blockDim.x * P) {
    const auto xs = detail::load_pack<P>(row + i);
    detail::Pack<T, P> ys;
    for (int k = 0; k < P; ++k) store(&ys.v[k], value(i + k, load(&xs.v[k])));
    detail::store_pack(o + i, ys);
  }
  for (int i = packed + threadIdx.x; i < V; i += blockDim.x) store(o + i, value(i, load(row + i)));
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(sum) - (target_logit - m);
}

// P = kPackOf<T> when rows start 16-byte aligned (Vp a multiple of the pack and aligned pointers), else 1.
template <Output kOut, typename T>
void launch_softmax_xent(T* out, float* losses, const T* logits, const std::int32_t* targets, float dloss_per_row,
                         int N, int V, int Vp, cudaStream_t stream) {
  constexpr int P = detail::kPackOf<T>;
  if (Vp % P == 0 && detail::aligned16(out, logits)) {
    softmax_xent_kernel<kOut, P><<<N, kThreads, 0, stream>>>(out, losses, logits, targets, dloss_per_row, V, Vp);
  } else {
    softmax_xent_kernel<kOut, 1><<<N, kThreads, 0, stream>>>(out, losses, logits, targets, dloss_per_row, V, Vp);
  }
  check_launch("softmax_xent_kernel");
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
  launch_softmax_xent<Output::probs>(probs, losses, logits, targets, 0.0f, N, V, Vp, stream);
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
  launch_softmax_xent<Output::dlogits>(dlogits, losses, logits, targets, dloss_per_row, N, V, Vp, stream);
}

namespace {

constexpr int kMeanThreads = 256;

// One block: each thread sums a strided slice in double, then a tree over the threads; the order is fixed.
__global__ void mean_loss_kernel(double* loss, const float* losses, int N) {
  __shared__ double partial[kMeanThreads];
  double sum = 0.0;
  for (int i = static_cast<int>(threadIdx.x); i < N; i += kMeanThreads) sum += static_cast<double>(losses[i]);
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = kMeanThreads / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = N > 0 ? partial[0] / static_cast<double>(N) : 0.0;
}

}  // namespace

void mean_loss(double* loss, const float* losses, int N, cudaStream_t stream) {
  mean_loss_kernel<<<1, kMeanThreads, 0, stream>>>(loss, losses, N);
  check_launch("mean_loss_kernel");
}

#define HSDP_INSTANTIATE_SOFTMAX_XENT(T)                                                                          \
  template void softmax_xent_forward<T>(T*, float*, const T*, const std::int32_t*, int, int, int, cudaStream_t);  \
  template void softmax_xent_backward<T>(T*, const T*, const std::int32_t*, float, int, int, int, cudaStream_t);  \
  template void softmax_xent_forward_backward<T>(T*, float*, const T*, const std::int32_t*, float, int, int, int, \
                                                 cudaStream_t);

HSDP_INSTANTIATE_SOFTMAX_XENT(float)
HSDP_INSTANTIATE_SOFTMAX_XENT(bf16_t)
#undef HSDP_INSTANTIATE_SOFTMAX_XENT

}  // namespace hsdp::model::cuda
