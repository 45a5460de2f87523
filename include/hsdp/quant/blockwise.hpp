#pragma once
// Block-wise symmetric quantization to int8 or int4 (ZeRO++ qwZ weights, qgZ gradients).
//
// A tensor of n elements is cut into blocks of `block` elements (the last block may be partial); each
// block gets one fp32 scale and n values q in [-qmax, qmax] (qmax = 127 for int8, 7 for int4):
//   scale = max|x| / qmax, rounded UP to the nearest fp32 whose significand has at most 17 (int8) or
//           21 (int4) significant bits; 0 for an all-zero block.
//   q     = round-to-nearest-even(x / scale), clamped to [-qmax, qmax]  (q = 0 when scale = 0)
//   x'    = q * scale                                                    (dequantize)
// Rounding the scale up (by at most 2^-16 relative) buys three guarantees, for every finite input from
// denormals (1e-45) to FLT_MAX: q * scale is exact in fp32 (so x' does not depend on FMA contraction or
// on the order of dequantize and add), |x| <= qmax * scale (the clamp never bites), and
// |x' - x| <= scale / 2 for every element. (When rounding up would make qmax * scale overflow, i.e.
// max|x| within 2^-16 of FLT_MAX, the scale is rounded down instead; the bound still holds.)
//
// Packed layout, n elements:  int8: n bytes, two's complement.  int4: ceil(n/2) bytes, two signed
// values per byte, element 2j in the low nibble, 2j+1 in the high nibble (two's complement); an odd n
// leaves the last high nibble 0.  Scales: ceil(n/block) fp32.
// `block` must be positive and even, so every block starts on a byte boundary.
//
// Non-finite input: quantize throws an internal hsdp::Error "non-finite value at element i" (the first
// one) and leaves the output unspecified; it never produces garbage silently. Callers that quantize fp16
// gradients call all_finite() first and agree across ranks (the loss scaler's overflow check) so that
// every rank skips the step together instead of one rank throwing.
//
// Work runs on OpenMP threads over whole blocks; each output byte and scale is written by one thread with
// a fixed order of operations, so results are bit-identical for any thread count.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "hsdp/core/buffer.hpp"
#include "hsdp/core/dtype.hpp"
#include "hsdp/core/memory.hpp"

namespace hsdp::quant {

enum class Bits { int4 = 4, int8 = 8 };

inline constexpr std::size_t kDefaultBlock = 2048;

struct QuantSpec {
  Bits bits = Bits::int8;
  std::size_t block = kDefaultBlock;  // elements per fp32 scale: positive and even
};

constexpr int qmax(Bits bits) {
  return bits == Bits::int8 ? 127 : 7;
}
// Bytes of packed values for n elements: n (int8) or ceil(n/2) (int4).
constexpr std::size_t packed_bytes(std::size_t n, Bits bits) {
  return bits == Bits::int8 ? n : (n + 1) / 2;
}
// Scales for n elements: ceil(n/block).
constexpr std::size_t scale_count(std::size_t n, std::size_t block) {
  return (n + block - 1) / block;
}
// Everything one quantized tensor occupies: packed values plus fp32 scales.
constexpr std::size_t quantized_bytes(std::size_t n, QuantSpec spec) {
  return packed_bytes(n, spec.bits) + sizeof(float) * scale_count(n, spec.block);
}

std::string_view to_string(Bits bits);
// Parses "int8" / "int4" (also "8" / "4"); throws a config Error naming `what` on anything else.
Bits parse_bits(std::string_view text, std::string_view what);
// Throws a config Error unless `spec.block` is positive and even.
void validate(const QuantSpec& spec);

// A read-only view of one quantized tensor of `count` elements.
struct QuantizedView {
  std::span<const std::uint8_t> packed;
  std::span<const float> scales;
  std::size_t count = 0;
  QuantSpec spec;
};

// A writable view of one quantized tensor of `count` elements.
struct QuantizedSpan {
  std::span<std::uint8_t> packed;
  std::span<float> scales;
  std::size_t count = 0;
  QuantSpec spec;

  operator QuantizedView() const { return {packed, scales, count, spec}; }
};

// Owned storage for one quantized tensor, optionally charged to a MemoryAccountant category.
class QuantizedBuffer {
 public:
  QuantizedBuffer() = default;
  QuantizedBuffer(std::size_t count, QuantSpec spec);
  QuantizedBuffer(std::size_t count, QuantSpec spec, MemoryAccountant& accountant, MemCategory category);

  QuantizedSpan span() { return {packed_.span(), scales_.span(), count_, spec_}; }
  QuantizedView view() const { return {packed_.span(), scales_.span(), count_, spec_}; }
  operator QuantizedSpan() { return span(); }
  operator QuantizedView() const { return view(); }

  std::size_t count() const { return count_; }
  const QuantSpec& spec() const { return spec_; }
  std::span<std::uint8_t> packed() { return packed_.span(); }
  std::span<const std::uint8_t> packed() const { return packed_.span(); }
  std::span<float> scales() { return scales_.span(); }
  std::span<const float> scales() const { return scales_.span(); }
  std::size_t size_bytes() const { return packed_.size_bytes() + scales_.size_bytes(); }

 private:
  Buffer<std::uint8_t> packed_;
  Buffer<float> scales_;
  std::size_t count_ = 0;
  QuantSpec spec_;
};

// The scale of a block whose largest magnitude is `amax` (finite, >= 0), as defined above.
float block_scale(float amax, Bits bits);

// True when no element is NaN or +-Inf.
bool all_finite(std::span<const float> x);
bool all_finite(std::span<const bf16_t> x);
bool all_finite(std::span<const f16_t> x);

// Quantizes x into out (out.count == x.size(), spans sized by packed_bytes and scale_count).
// Throws an internal Error "non-finite value at element i" on NaN or Inf.
void quantize(std::span<const float> x, QuantizedSpan out);
void quantize(std::span<const bf16_t> x, QuantizedSpan out);
void quantize(std::span<const f16_t> x, QuantizedSpan out);

// out[i] = q[i] * scale of its block (exact in fp32; rounded to nearest even for bf16 and fp16).
void dequantize(QuantizedView in, std::span<float> out);
void dequantize(QuantizedView in, std::span<bf16_t> out);
void dequantize(QuantizedView in, std::span<f16_t> out);

// The same for flat buffers whose element type is a run-time setting: out.count (in.count) elements of
// `dtype` (f32, bf16 or f16; anything else is an internal Error) at x (out), aligned for that type.
void quantize(const void* x, DType dtype, QuantizedSpan out);
void dequantize(QuantizedView in, void* out, DType dtype);

}  // namespace hsdp::quant
