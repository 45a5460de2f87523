#pragma once
// The per-block kernels shared by blockwise.cpp and fused.cpp, and the OpenMP driver over blocks.
// Internal to hsdp_quant: not installed with the public headers.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>

#include "hsdp/core/buffer.hpp"
#include "hsdp/core/dtype.hpp"
#include "hsdp/quant/blockwise.hpp"

namespace hsdp::quant::detail {

// |x| bit patterns at or above this are Inf or NaN.
inline constexpr std::uint32_t kInfBits = 0x7f800000u;
inline constexpr std::size_t kNoBlock = std::numeric_limits<std::size_t>::max();
// Below this many elements a call stays on the calling thread (a parallel region costs microseconds).
inline constexpr std::size_t kParallelMinElements = std::size_t{1} << 15;

inline float to_float(float v) {
  return v;
}
inline float to_float(bf16_t v) {
  return bf16_to_float(v);
}
inline float to_float(f16_t v) {
  return f16_to_float(v);
}
inline void from_float(float v, float& out) {
  out = v;
}
inline void from_float(float v, bf16_t& out) {
  out = float_to_bf16(v);
}
inline void from_float(float v, f16_t& out) {
  out = float_to_f16(v);
}

// The bit pattern of max|x[i]|: below kInfBits exactly when every element is finite (as integers, the
// bit patterns of non-negative floats order like their values, and NaN/Inf patterns lie above all finite ones).
std::uint32_t abs_max_bits(const float* x, std::size_t n);

// The byte where block b's packed values start.
inline std::size_t packed_offset(std::size_t begin, Bits bits) {
  return bits == Bits::int8 ? begin : begin / 2;
}

// Quantizes len finite values with `scale` (from block_scale) into packed bytes; `clamp` when some
// |x| / scale may exceed qmax.
void quantize_values(const float* x, std::size_t len, Bits bits, float scale, bool clamp, std::uint8_t* packed);
// Computes the block's scale and quantizes it; false (and nothing written) if it holds a NaN or Inf.
bool quantize_block(const float* x, std::size_t len, Bits bits, std::uint8_t* packed, float& scale);
// out[i] = q[i] * scale.
void dequantize_values(const std::uint8_t* packed, std::size_t len, Bits bits, float scale, float* out);
// acc[i] = acc[i] + q[i] * scale (the product is exact, so this is the fp32 sum of the dequantized values).
void accumulate_values(const std::uint8_t* packed, std::size_t len, Bits bits, float scale, float* acc);

// Throws the internal Error for a non-finite value at `index` of `count` elements.
[[noreturn]] void throw_non_finite(std::string_view operation, std::size_t index, std::size_t count);
// Throws an internal Error unless `q` describes `count` elements with spans of the right sizes.
void check_layout(const QuantizedView& q, std::size_t count, std::string_view operation);

// Calls body(b, begin, len, scratch) -> bool for every block b of [0, n), on OpenMP threads when the work
// is large enough, and returns the first block for which body returned false (kNoBlock if none).
// scratch points to `scratch_floats` floats private to the calling thread (nullptr when 0). The body must
// not throw; whatever can throw (the scratch allocation) happens before the parallel region.
template <typename Body>
std::size_t for_each_block(std::size_t n, std::size_t block, std::size_t scratch_floats, Body&& body) {
  const std::size_t blocks = scale_count(n, block);
  const bool parallel = blocks > 1 && n >= kParallelMinElements && omp_get_max_threads() > 1 && !omp_in_parallel();
  const std::size_t threads = parallel ? static_cast<std::size_t>(omp_get_max_threads()) : 1;
  Buffer<float> scratch(scratch_floats * threads);
  std::size_t first_bad = kNoBlock;
#pragma omp parallel for schedule(static) reduction(min : first_bad) if (parallel)
  for (std::size_t b = 0; b < blocks; ++b) {
    float* mine =
        scratch_floats ? scratch.data() + scratch_floats * static_cast<std::size_t>(omp_get_thread_num()) : nullptr;
    const std::size_t begin = b * block;
    if (!body(b, begin, std::min(block, n - begin), mine)) first_bad = std::min(first_bad, b);
  }
  return first_bad;
}

}  // namespace hsdp::quant::detail
