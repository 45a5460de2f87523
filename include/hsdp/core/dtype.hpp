#pragma once
// Element types hsdp stores and moves. bf16 and f16 are storage/communication types on the CPU:
// arithmetic upcasts to f32. u8 carries packed int4 (two values per byte) and is a transport type only.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace hsdp {

enum class DType { f32, f64, bf16, f16, i8, u8 };

constexpr std::size_t size_of(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f32: return 4;
    case DType::bf16:
    case DType::f16: return 2;
    case DType::i8:
    case DType::u8: return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}

std::string_view to_string(DType t);
// Parses "f32", "fp32", "bf16", ... ; throws a config Error naming `what` on anything else.
DType parse_dtype(std::string_view text, std::string_view what);

// bf16: the top 16 bits of an IEEE float, rounded to nearest even; NaN stays NaN.
struct bf16_t {
  std::uint16_t bits;
};
// f16: IEEE 754 binary16, round to nearest even, overflow to infinity.
struct f16_t {
  std::uint16_t bits;
};

inline float bf16_to_float(bf16_t v) {
  std::uint32_t u = static_cast<std::uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline bf16_t float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t{static_cast<std::uint16_t>((u >> 16) | 0x40u)};
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return bf16_t{static_cast<std::uint16_t>((u + rounding) >> 16)};
}

inline float f16_to_float(f16_t v) {
  // Through _Float16 where the compiler has it (g++ 12 on x86-64 does), exact by construction.
  _Float16 h;
  std::memcpy(&h, &v.bits, sizeof h);
  return static_cast<float>(h);
}

inline f16_t float_to_f16(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  f16_t out;
  std::memcpy(&out.bits, &h, sizeof out.bits);
  return out;
}

}  // namespace hsdp

#include <span>

namespace hsdp {

// Converts fp32 values to `to` (f32, bf16 or f16) into `out` (values.size() elements of that type).
void convert_from_f32(std::span<const float> values, void* out, DType to);
// Converts values.size() elements of type `from` (f32, bf16 or f16) at `in` to fp32.
void convert_to_f32(const void* in, DType from, std::span<float> values);
// Rounds fp32 values in place to the nearest value representable in `to` (bf16, f16; f32 unchanged).
void round_to(std::span<float> values, DType to);

}  // namespace hsdp
