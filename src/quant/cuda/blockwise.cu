// Block-wise quantization on the GPU, a line-by-line port of src/quant/block_kernels.cpp (see blockwise.hpp).
// The double-precision steps use the _rn intrinsics so that nvcc cannot fuse them into FMAs: every operation
// is the CPU's, in the CPU's order.
#include <cfloat>
#include <string>

#include "hsdp/core/error.hpp"
#include "hsdp/device/cuda/kernel_util.cuh"
#include "hsdp/quant/cuda/blockwise.hpp"

namespace hsdp::quant::cuda {
namespace {

namespace dc = hsdp::device::cuda;
namespace detail = hsdp::device::cuda::detail;
using detail::load;
using detail::store;

constexpr int kThreads = 256;
constexpr unsigned kInfBits = 0x7f800000u;
constexpr unsigned long long kNone = ~0ull;
constexpr double kSnap = 0x1.8p22;   // see block_kernels.cpp: snaps x / scale to a multiple of 2^-30
constexpr double kRound = 0x1.8p52;  // then rounds that to the nearest even integer in the low mantissa bits

__device__ int qmax_of(int bits) {
  return bits == 8 ? 127 : 7;
}
__device__ int scale_significand_bits(int bits) {
  return bits == 8 ? 17 : 21;
}

__device__ int dropped_bits(unsigned u, int keep) {
  if ((u >> 23) != 0) return 24 - keep;
  return max(0, (32 - __clz(static_cast<int>(u))) - keep);
}
__device__ unsigned round_up_significand(unsigned u, int keep) {
  const unsigned mask = (1u << dropped_bits(u, keep)) - 1u;
  return (u + mask) & ~mask;
}
__device__ unsigned next_up_significand(unsigned u, int keep) {
  return u + (1u << dropped_bits(u, keep));
}
__device__ double times_qmax(unsigned u, int qm) {
  return __dmul_rn(static_cast<double>(__uint_as_float(u)), qm);
}

// hsdp::quant::block_scale.
__device__ float block_scale(float amax, int bits) {
  if (!(amax > 0.0f)) return 0.0f;
  const int qm = qmax_of(bits);
  const int keep = scale_significand_bits(bits);
  const double target = __ddiv_rn(static_cast<double>(amax), static_cast<double>(qm));
  unsigned u = max(1u, __float_as_uint(__double2float_rn(target)));
  u = round_up_significand(u, keep);
  while (times_qmax(u, qm) < static_cast<double>(amax)) u = next_up_significand(u, keep);
  if (times_qmax(u, qm) > static_cast<double>(FLT_MAX)) {
    const int drop = dropped_bits(u, keep);
    u &= ~((1u << drop) - 1u);
    while (times_qmax(u, qm) > static_cast<double>(FLT_MAX)) u -= 1u << drop;
  }
  return __uint_as_float(u);
}

__device__ std::uint8_t quantized_byte(float x, double inv) {
  const double r = __dmul_rn(static_cast<double>(x), inv);
  return static_cast<std::uint8_t>(__double_as_longlong(__dadd_rn(__dadd_rn(r, kSnap), kRound)));
}

__device__ std::uint8_t clamped_byte(float x, double inv, double qm) {
  const double r = __dmul_rn(static_cast<double>(x), inv);
  const double q = __dsub_rn(__dsub_rn(__dadd_rn(__dadd_rn(r, kSnap), kRound), kRound), kSnap);
  return static_cast<std::uint8_t>(static_cast<std::int32_t>(fmin(fmax(q, -qm), qm)));
}

__device__ std::uint8_t value_byte(float x, double inv, double qm, bool clamp) {
  return clamp ? clamped_byte(x, inv, qm) : quantized_byte(x, inv);
}

__device__ unsigned block_max_bits(unsigned v) {
  __shared__ unsigned partial[kThreads / detail::kWarp];
  for (int offset = detail::kWarp / 2; offset > 0; offset /= 2)
    v = max(v, __shfl_xor_sync(detail::kFullMask, v, offset));
  const int lane = threadIdx.x % detail::kWarp;
  const int warp = threadIdx.x / detail::kWarp;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  unsigned m = 0;
  for (int w = 0; w < kThreads / detail::kWarp; ++w) m = max(m, partial[w]);
  return m;
}

// One CUDA block (kThreads threads) per quantization block.
template <typename T>
__global__ void quantize_kernel(const T* x, std::size_t n, std::size_t block, int bits, std::uint8_t* packed,
                                float* scales, unsigned long long* first_bad) {
  __shared__ float shared_scale;
  __shared__ bool shared_clamp;
  const std::size_t b = blockIdx.x;
  const std::size_t begin = b * block;
  const std::size_t len = min(block, n - begin);
  const T* values = x + begin;
  unsigned bits_max = 0;
  for (std::size_t i = threadIdx.x; i < len; i += blockDim.x) {
    bits_max = max(bits_max, __float_as_uint(load(values + i)) & 0x7fffffffu);
  }
  const unsigned amax_bits = block_max_bits(bits_max);
  if (amax_bits >= kInfBits) {
    for (std::size_t i = threadIdx.x; i < len; i += blockDim.x) {
      if ((__float_as_uint(load(values + i)) & 0x7fffffffu) >= kInfBits) {
        atomicMin(first_bad, static_cast<unsigned long long>(begin + i));
      }
    }
    return;
  }
  if (threadIdx.x == 0) {
    const float amax = __uint_as_float(amax_bits);
    const float scale = block_scale(amax, bits);
    shared_scale = scale;
    shared_clamp =
        __dmul_rn(static_cast<double>(qmax_of(bits)), static_cast<double>(scale)) < static_cast<double>(amax);
    scales[b] = scale;
  }
  __syncthreads();
  const float scale = shared_scale;
  const bool clamp = shared_clamp;
  const double inv = scale > 0.0f ? __ddiv_rn(1.0, static_cast<double>(scale)) : 0.0;
  const double qm = qmax_of(bits);
  if (bits == 8) {
    for (std::size_t i = threadIdx.x; i < len; i += blockDim.x) {
      packed[begin + i] = value_byte(load(values + i), inv, qm, clamp);
    }
    return;
  }
  std::uint8_t* out = packed + begin / 2;
  const std::size_t pairs = len / 2;
  for (std::size_t j = threadIdx.x; j < pairs; j += blockDim.x) {
    out[j] = static_cast<std::uint8_t>((value_byte(load(values + 2 * j), inv, qm, clamp) & 0xf) |
                                       (value_byte(load(values + 2 * j + 1), inv, qm, clamp) << 4));
  }
  if (len % 2 != 0 && threadIdx.x == 0) out[pairs] = value_byte(load(values + len - 1), inv, qm, clamp) & 0xf;
}

// q of element i (its byte for int8, its nibble for int4: element 2j low, 2j + 1 high; blocks are even).
__device__ int quantized_value(const std::uint8_t* packed, std::size_t i, int bits) {
  if (bits == 8) return static_cast<std::int8_t>(packed[i]);
  const std::uint8_t byte = packed[i / 2];
  if (i % 2 == 0) return static_cast<std::int8_t>(static_cast<std::uint8_t>(byte << 4)) >> 4;
  return static_cast<std::int8_t>(byte) >> 4;
}

template <typename T>
__global__ void dequantize_kernel(const std::uint8_t* packed, const float* scales, std::size_t n, std::size_t block,
                                  int bits, T* out) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    store(out + i, __fmul_rn(static_cast<float>(quantized_value(packed, i, bits)), scales[i / block]));
  }
}

__global__ void dequantize_accumulate_kernel(const std::uint8_t* packed, const float* scales, std::size_t n,
                                             std::size_t block, int bits, float* acc) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    acc[i] = __fadd_rn(acc[i], __fmul_rn(static_cast<float>(quantized_value(packed, i, bits)), scales[i / block]));
  }
}

// The kernels take the bits as a plain int (8 or 4).
int checked_bits(const QuantSpec& spec, const char* operation) {
  if (spec.bits != Bits::int8 && spec.bits != Bits::int4) {
    throw_internal(std::string(operation) + " (cuda): bits must be 8 or 4, got " +
                   std::to_string(static_cast<int>(spec.bits)));
  }
  if (spec.block == 0 || spec.block % 2 != 0) {
    throw_internal(std::string(operation) + " (cuda): block must be a positive even number of elements, got " +
                   std::to_string(spec.block));
  }
  return static_cast<int>(spec.bits);
}

[[noreturn]] void throw_dtype(const char* operation, DType dtype) {
  throw_internal(std::string(operation) + " (cuda): element type " + std::string(to_string(dtype)) +
                 " is not f32, bf16 or f16");
}

}  // namespace

QuantStatus::QuantStatus() : first_bad_(1), host_(1) {
  host_[0] = kNone;
  dc::check(cudaMemcpy(first_bad_.data(), host_.data(), sizeof(unsigned long long), cudaMemcpyHostToDevice),
            "cudaMemcpy (quant status)");
}

void QuantStatus::reset(cudaStream_t stream) {
  dc::check(cudaMemsetAsync(first_bad_.data(), 0xff, sizeof(unsigned long long), stream), "cudaMemsetAsync");
}

void QuantStatus::throw_if_non_finite(std::size_t count, cudaStream_t stream) {
  dc::copy_to_host(host_.data(), first_bad_.data(), 1, stream);
  dc::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (quant status)");
  if (host_[0] != kNone) {
    throw_internal("quantize: non-finite value at element " + std::to_string(host_[0]) + " of " +
                   std::to_string(count) + " (check all_finite before quantizing)");
  }
}

void quantize(const void* x, DType dtype, std::size_t count, const QuantSpec& spec, std::uint8_t* packed, float* scales,
              QuantStatus& status, cudaStream_t stream) {
  const int bits = checked_bits(spec, "quantize");
  if (count == 0) return;
  const auto blocks = static_cast<unsigned>(scale_count(count, spec.block));
  unsigned long long* slot = status.device_slot();
  switch (dtype) {
    case DType::f32:
      quantize_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(x), count, spec.block, bits, packed,
                                                       scales, slot);
      break;
    case DType::bf16:
      quantize_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const bf16_t*>(x), count, spec.block, bits, packed,
                                                       scales, slot);
      break;
    case DType::f16:
      quantize_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const f16_t*>(x), count, spec.block, bits, packed,
                                                       scales, slot);
      break;
    default:
      throw_dtype("quantize", dtype);
  }
  dc::check_launch("quantize_kernel");
}

void dequantize(const std::uint8_t* packed, const float* scales, std::size_t count, const QuantSpec& spec, void* out,
                DType dtype, cudaStream_t stream) {
  const int bits = checked_bits(spec, "dequantize");
  if (count == 0) return;
  const unsigned grid = detail::grid_for(count, kThreads);
  switch (dtype) {
    case DType::f32:
      dequantize_kernel<<<grid, kThreads, 0, stream>>>(packed, scales, count, spec.block, bits,
                                                       static_cast<float*>(out));
      break;
    case DType::bf16:
      dequantize_kernel<<<grid, kThreads, 0, stream>>>(packed, scales, count, spec.block, bits,
                                                       static_cast<bf16_t*>(out));
      break;
    case DType::f16:
      dequantize_kernel<<<grid, kThreads, 0, stream>>>(packed, scales, count, spec.block, bits,
                                                       static_cast<f16_t*>(out));
      break;
    default:
      throw_dtype("dequantize", dtype);
  }
  dc::check_launch("dequantize_kernel");
}

void dequantize_accumulate(const std::uint8_t* packed, const float* scales, std::size_t count, const QuantSpec& spec,
                           float* acc, cudaStream_t stream) {
  const int bits = checked_bits(spec, "dequantize_accumulate");
  if (count == 0) return;
  dequantize_accumulate_kernel<<<detail::grid_for(count, kThreads), kThreads, 0, stream>>>(packed, scales, count,
                                                                                           spec.block, bits, acc);
  dc::check_launch("dequantize_accumulate_kernel");
}

}  // namespace hsdp::quant::cuda
