#pragma once
// The element kernels of CudaDeviceOps (private to src/stream/cuda), each the CPU DeviceOps' loop on the GPU with the
// same fp32 arithmetic (no contraction of a multiply and an add into one FMA, as the CPU build does not contract).
#include <cuda_runtime_api.h>

#include <cstddef>

#include "hsdp/core/dtype.hpp"

namespace hsdp::stream::cuda {

// out[i] = in[i] from one of f32, bf16, f16 to another (through fp32; the same dtype copies).
void convert_elements(const void* in, DType from, void* out, DType to, std::size_t count, cudaStream_t stream);
// values[i] rounded to the nearest value of `to` (f32: unchanged).
void round_elements(float* values, std::size_t count, DType to, cudaStream_t stream);
// sum[i] += scale * x[i], x of dtype t (f32, bf16, f16), in fp32 (scale 1: the plain sum).
void accumulate_elements(float* sum, const void* x, DType t, std::size_t count, float scale, cudaStream_t stream);
// *found = 1 if any value is inf or nan (else unchanged).
void find_nonfinite(const float* values, std::size_t count, int* found, cudaStream_t stream);
// If *found: every value = 0.
void zero_if_found(float* values, std::size_t count, const int* found, cudaStream_t stream);
// If *found: *flag = 1.
void flag_if_found(double* flag, const int* found, cudaStream_t stream);
// *sum += *x.
void add_scalar(double* sum, const double* x, cudaStream_t stream);

}  // namespace hsdp::stream::cuda
