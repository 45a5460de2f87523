#pragma once
// Device helpers for the CUDA kernels of every layer (model, quant and optim kernels; include it from .cu files
// only): element loads and stores for float, bf16 and fp16 storage (compute is always fp32), bf16 rounding as the
// CPU does it, warp and block reductions, launch sizing.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "hsdp/core/dtype.hpp"
#include "hsdp/device/cuda/runtime.hpp"

namespace hsdp::device::cuda::detail {

inline constexpr int kWarp = 32;
inline constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float load(const float* p) {
  return *p;
}
__device__ __forceinline__ float load(const bf16_t* p) {
  return __uint_as_float(static_cast<unsigned>(p->bits) << 16);
}
__device__ __forceinline__ float load(const f16_t* p) {
  return __half2float(__ushort_as_half(p->bits));
}

// bf16 rounding exactly as hsdp::float_to_bf16 on the CPU: round to nearest even, NaN stays (quiet) NaN.
__device__ __forceinline__ bf16_t to_bf16(float f) {
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t{static_cast<std::uint16_t>((u >> 16) | 0x40u)};
  return bf16_t{static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

__device__ __forceinline__ void store(float* p, float v) {
  *p = v;
}
__device__ __forceinline__ void store(bf16_t* p, float v) {
  *p = to_bf16(v);
}
__device__ __forceinline__ void store(f16_t* p, float v) {
  p->bits = __half_as_ushort(__float2half_rn(v));
}

// A gradient's store: added to what p holds (add), or written over it (Grad::write), as 0 + v so that a write has
// the bits of an add onto zeros.
template <typename T>
__device__ __forceinline__ void store_grad(T* p, float v, bool add) {
  store(p, (add ? load(p) : 0.0f) + v);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Sum (or max) over the block, returned to every thread. blockDim.x must be a multiple of 32; every thread of
// the block must call it (it synchronizes).
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float partial[kWarp];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = kMax ? warp_max(v) : warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < warps ? partial[lane] : (kMax ? -INFINITY : 0.0f);
    w = kMax ? warp_max(w) : warp_sum(w);
    if (lane == 0) partial[0] = w;
  }
  __syncthreads();
  const float result = partial[0];
  __syncthreads();  // partial may be reused by the next call
  return result;
}
__device__ __forceinline__ float block_sum(float v) {
  return block_reduce<false>(v);
}
__device__ __forceinline__ float block_max(float v) {
  return block_reduce<true>(v);
}

// P consecutive elements moved as one load or store (P * sizeof(T) bytes, at most 16): kernels over rows or long
// vectors read 16 bytes per thread and instruction where sizes and addresses allow (kPackOf<T>), else one element.
template <typename T, int P>
struct alignas(sizeof(T) * P) Pack {
  T v[P];
};
template <typename T>
inline constexpr int kPackOf = static_cast<int>(16 / sizeof(T));
template <int P, typename T>
__device__ __forceinline__ Pack<T, P> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, P>*>(p);
}
template <int P, typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, P>& x) {
  *reinterpret_cast<Pack<T, P>*>(p) = x;
}
// Whether every pointer is 16-byte aligned (then n % kPackOf<T> == 0 makes the packed kernels apply).
template <typename... Ptrs>
inline bool aligned16(const Ptrs*... ptrs) {
  return ((reinterpret_cast<std::uintptr_t>(ptrs) % 16 == 0) && ...);
}

// Blocks for a grid-stride loop over n elements: enough to fill the GPU, never more than needed.
inline unsigned grid_for(std::size_t n, int threads) {
  const std::size_t blocks = (n + static_cast<std::size_t>(threads) - 1) / static_cast<std::size_t>(threads);
  return static_cast<unsigned>(std::clamp<std::size_t>(blocks, 1, 65535u * 16u));
}

}  // namespace hsdp::device::cuda::detail
