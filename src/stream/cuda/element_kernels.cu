#include "element_kernels.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/device/cuda/kernel_util.cuh"

namespace hsdp::stream::cuda {
namespace {

namespace detail = hsdp::device::cuda::detail;
using device::cuda::check_launch;

constexpr int kThreads = 256;

template <typename From, typename To>
__global__ void convert_kernel(const From* in, To* out, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    detail::store(out + i, detail::load(in + i));
}

template <typename T>
__global__ void round_kernel(float* values, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    T rounded;
    detail::store(&rounded, values[i]);
    values[i] = detail::load(&rounded);
  }
}

template <typename T>
__global__ void accumulate_kernel(float* sum, const T* x, std::size_t n, float scale) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float xi = detail::load(x + i);
    sum[i] = scale == 1.0f ? __fadd_rn(sum[i], xi) : __fadd_rn(sum[i], __fmul_rn(xi, scale));
  }
}

__global__ void find_nonfinite_kernel(const float* values, std::size_t n, int* found) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    if (!isfinite(values[i])) *found = 1;  // every writer writes 1: no race on the value
  }
}

__global__ void zero_if_found_kernel(float* values, std::size_t n, const int* found) {
  if (*found == 0) return;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    values[i] = 0.0f;
}

__global__ void flag_if_found_kernel(double* flag, const int* found) {
  if (*found != 0) *flag = 1.0;
}

__global__ void add_scalar_kernel(double* sum, const double* x) {
  *sum += *x;
}

unsigned blocks(std::size_t n) {
  return detail::grid_for(n, kThreads);
}

template <typename From>
void convert_from(const From* in, void* out, DType to, std::size_t n, cudaStream_t stream) {
  switch (to) {
    case DType::f32:
      convert_kernel<<<blocks(n), kThreads, 0, stream>>>(in, static_cast<float*>(out), n);
      break;
    case DType::bf16:
      convert_kernel<<<blocks(n), kThreads, 0, stream>>>(in, static_cast<bf16_t*>(out), n);
      break;
    case DType::f16:
      convert_kernel<<<blocks(n), kThreads, 0, stream>>>(in, static_cast<f16_t*>(out), n);
      break;
    default:
      throw_internal(std::string("cuda convert: no conversion to ") + std::string(to_string(to)));
  }
  check_launch("convert_kernel");
}

}  // namespace

void convert_elements(const void* in, DType from, void* out, DType to, std::size_t count, cudaStream_t stream) {
  if (count == 0) return;
  if (from == to) {
    device::cuda::check(cudaMemcpyAsync(out, in, count * size_of(from), cudaMemcpyDeviceToDevice, stream),
                        "cudaMemcpyAsync (convert, same dtype)");
    return;
  }
  if (from != DType::f32 && to != DType::f32) {
    throw_internal(std::string("device convert: ") + std::string(to_string(from)) + " -> " +
                   std::string(to_string(to)) + " goes through fp32");
  }
  switch (from) {
    case DType::f32:
      convert_from(static_cast<const float*>(in), out, to, count, stream);
      break;
    case DType::bf16:
      convert_from(static_cast<const bf16_t*>(in), out, to, count, stream);
      break;
    case DType::f16:
      convert_from(static_cast<const f16_t*>(in), out, to, count, stream);
      break;
    default:
      throw_internal(std::string("cuda convert: no conversion from ") + std::string(to_string(from)));
  }
}

void round_elements(float* values, std::size_t count, DType to, cudaStream_t stream) {
  if (count == 0 || to == DType::f32) return;
  if (to == DType::bf16) {
    round_kernel<bf16_t><<<blocks(count), kThreads, 0, stream>>>(values, count);
  } else if (to == DType::f16) {
    round_kernel<f16_t><<<blocks(count), kThreads, 0, stream>>>(values, count);
  } else {
    throw_internal(std::string("cuda round_to: ") + std::string(to_string(to)) + " is not a float dtype");
  }
  check_launch("round_kernel");
}

void accumulate_elements(float* sum, const void* x, DType t, std::size_t count, float scale, cudaStream_t stream) {
  if (count == 0) return;
  switch (t) {
    case DType::f32:
      accumulate_kernel<<<blocks(count), kThreads, 0, stream>>>(sum, static_cast<const float*>(x), count, scale);
      break;
    case DType::bf16:
      accumulate_kernel<<<blocks(count), kThreads, 0, stream>>>(sum, static_cast<const bf16_t*>(x), count, scale);
      break;
    case DType::f16:
      accumulate_kernel<<<blocks(count), kThreads, 0, stream>>>(sum, static_cast<const f16_t*>(x), count, scale);
      break;
    default:
      throw_internal(std::string("cuda accumulate: ") + std::string(to_string(t)) + " is not a float dtype");
  }
  check_launch("accumulate_kernel");
}

void find_nonfinite(const float* values, std::size_t count, int* found, cudaStream_t stream) {
  if (count == 0) return;
  find_nonfinite_kernel<<<blocks(count), kThreads, 0, stream>>>(values, count, found);
  check_launch("find_nonfinite_kernel");
}

void zero_if_found(float* values, std::size_t count, const int* found, cudaStream_t stream) {
  if (count == 0) return;
  zero_if_found_kernel<<<blocks(count), kThreads, 0, stream>>>(values, count, found);
  check_launch("zero_if_found_kernel");
}

void flag_if_found(double* flag, const int* found, cudaStream_t stream) {
  flag_if_found_kernel<<<1, 1, 0, stream>>>(flag, found);
  check_launch("flag_if_found_kernel");
}

void add_scalar(double* sum, const double* x, cudaStream_t stream) {
  add_scalar_kernel<<<1, 1, 0, stream>>>(sum, x);
  check_launch("add_scalar_kernel");
}

}  // namespace hsdp::stream::cuda
