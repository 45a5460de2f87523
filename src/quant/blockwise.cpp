#include "hsdp/quant/blockwise.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <type_traits>

#include "block_kernels.hpp"
#include "hsdp/core/error.hpp"

namespace hsdp::quant {

using detail::for_each_block;
using detail::kNoBlock;

std::string_view to_string(Bits bits) {
  return bits == Bits::int8 ? "int8" : "int4";
}

Bits parse_bits(std::string_view text, std::string_view what) {
  if (text == "int8" || text == "8") return Bits::int8;
  if (text == "int4" || text == "4") return Bits::int4;
  throw_config(std::string(what) + ": unknown quantization '" + std::string(text) + "' (expected int8 or int4)");
}

void validate(const QuantSpec& spec) {
  if (spec.bits != Bits::int8 && spec.bits != Bits::int4) {
    throw_config("quantization bits must be int8 or int4, got " + std::to_string(static_cast<int>(spec.bits)));
  }
  if (spec.block == 0 || spec.block % 2 != 0) {
    throw_config("quantization block must be a positive even number of elements, got " + std::to_string(spec.block));
  }
}

namespace {

const QuantSpec& validated(const QuantSpec& spec) {
  validate(spec);
  return spec;
}

}  // namespace

QuantizedBuffer::QuantizedBuffer(std::size_t count, QuantSpec spec)
    : packed_(packed_bytes(count, validated(spec).bits)),
      scales_(scale_count(count, spec.block)),
      count_(count),
      spec_(spec) {}

QuantizedBuffer::QuantizedBuffer(std::size_t count, QuantSpec spec, MemoryAccountant& accountant, MemCategory category)
    : packed_(packed_bytes(count, validated(spec).bits), accountant, category),
      scales_(scale_count(count, spec.block), accountant, category),
      count_(count),
      spec_(spec) {}

namespace {

bool is_finite(float v) {
  return (std::bit_cast<std::uint32_t>(v) & 0x7fffffffu) < detail::kInfBits;
}
bool is_finite(bf16_t v) {
  return (v.bits & 0x7fffu) < 0x7f80u;
}
bool is_finite(f16_t v) {
  return (v.bits & 0x7fffu) < 0x7c00u;
}

// bf16 and f16: the largest |x| bit pattern, as for fp32 in detail::abs_max_bits.
template <typename T>
std::uint16_t abs_max_bits16(std::span<const T> x) {
  std::uint16_t m = 0;
#pragma omp simd reduction(max : m)
  for (std::size_t i = 0; i < x.size(); ++i) m = std::max<std::uint16_t>(m, x[i].bits & 0x7fffu);
  return m;
}

bool all_finite_impl(std::span<const float> x) {
  return detail::abs_max_bits(x.data(), x.size()) < detail::kInfBits;
}
bool all_finite_impl(std::span<const bf16_t> x) {
  return abs_max_bits16(x) < 0x7f80u;
}
bool all_finite_impl(std::span<const f16_t> x) {
  return abs_max_bits16(x) < 0x7c00u;
}

template <typename T>
std::size_t first_non_finite(std::span<const T> x, std::size_t from) {
  std::size_t i = from;
  while (i < x.size() && is_finite(x[i])) ++i;
  return i;
}

template <typename T>
void quantize_impl(std::span<const T> x, QuantizedSpan out) {
  detail::check_layout(out, x.size(), "quantize");
  const Bits bits = out.spec.bits;
  constexpr bool kConvert = !std::is_same_v<T, float>;
  const std::size_t bad =
      for_each_block(x.size(), out.spec.block, kConvert ? out.spec.block : 0,
                     [&](std::size_t b, std::size_t begin, std::size_t len, [[maybe_unused]] float* scratch) {
                       const float* values = nullptr;
                       if constexpr (kConvert) {
#pragma omp simd
                         for (std::size_t i = 0; i < len; ++i) scratch[i] = detail::to_float(x[begin + i]);
                         values = scratch;
                       } else {
                         values = x.data() + begin;
                       }
                       return detail::quantize_block(
                           values, len, bits, out.packed.data() + detail::packed_offset(begin, bits), out.scales[b]);
                     });
  if (bad != kNoBlock) detail::throw_non_finite("quantize", first_non_finite(x, bad * out.spec.block), x.size());
}

template <typename T>
void dequantize_impl(QuantizedView in, std::span<T> out) {
  detail::check_layout(in, out.size(), "dequantize");
  const Bits bits = in.spec.bits;
  constexpr bool kConvert = !std::is_same_v<T, float>;
  for_each_block(out.size(), in.spec.block, kConvert ? in.spec.block : 0,
                 [&](std::size_t b, std::size_t begin, std::size_t len, [[maybe_unused]] float* scratch) {
                   const std::uint8_t* packed = in.packed.data() + detail::packed_offset(begin, bits);
                   if constexpr (kConvert) {
                     detail::dequantize_values(packed, len, bits, in.scales[b], scratch);
#pragma omp simd
                     for (std::size_t i = 0; i < len; ++i) detail::from_float(scratch[i], out[begin + i]);
                   } else {
                     detail::dequantize_values(packed, len, bits, in.scales[b], out.data() + begin);
                   }
                   return true;
                 });
}

}  // namespace

bool all_finite(std::span<const float> x) {
  return all_finite_impl(x);
}
bool all_finite(std::span<const bf16_t> x) {
  return all_finite_impl(x);
}
bool all_finite(std::span<const f16_t> x) {
  return all_finite_impl(x);
}

void quantize(std::span<const float> x, QuantizedSpan out) {
  quantize_impl(x, out);
}
void quantize(std::span<const bf16_t> x, QuantizedSpan out) {
  quantize_impl(x, out);
}
void quantize(std::span<const f16_t> x, QuantizedSpan out) {
  quantize_impl(x, out);
}

void dequantize(QuantizedView in, std::span<float> out) {
  dequantize_impl(in, out);
}
void dequantize(QuantizedView in, std::span<bf16_t> out) {
  dequantize_impl(in, out);
}
void dequantize(QuantizedView in, std::span<f16_t> out) {
  dequantize_impl(in, out);
}

namespace {

// p viewed as n elements of T (T const when p is), after checking its alignment.
template <typename T, typename Void>
auto typed_span(Void* p, std::size_t n, std::string_view operation) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(T) != 0) {
    throw_internal(std::string(operation) + ": buffer not aligned for its element type");
  }
  using Element = std::conditional_t<std::is_const_v<Void>, const T, T>;
  return std::span<Element>(static_cast<Element*>(p), n);
}

[[noreturn]] void throw_dtype(std::string_view operation, DType dtype) {
  throw_internal(std::string(operation) + ": element type " + std::string(hsdp::to_string(dtype)) +
                 " is not f32, bf16 or f16");
}

}  // namespace

void quantize(const void* x, DType dtype, QuantizedSpan out) {
  switch (dtype) {
    case DType::f32:
      return quantize(typed_span<float>(x, out.count, "quantize"), out);
    case DType::bf16:
      return quantize(typed_span<bf16_t>(x, out.count, "quantize"), out);
    case DType::f16:
      return quantize(typed_span<f16_t>(x, out.count, "quantize"), out);
    default:
      throw_dtype("quantize", dtype);
  }
}

void dequantize(QuantizedView in, void* out, DType dtype) {
  switch (dtype) {
    case DType::f32:
      return dequantize(in, typed_span<float>(out, in.count, "dequantize"));
    case DType::bf16:
      return dequantize(in, typed_span<bf16_t>(out, in.count, "dequantize"));
    case DType::f16:
      return dequantize(in, typed_span<f16_t>(out, in.count, "dequantize"));
    default:
      throw_dtype("dequantize", dtype);
  }
}

}  // namespace hsdp::quant
