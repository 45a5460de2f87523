#include "block_kernels.hpp"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp::quant {

namespace {

// Significand bits a scale may have so that q * scale is exact in fp32 for every |q| <= qmax:
// 24 - 7 for int8 (|q| <= 127 < 2^7), 24 - 3 for int4 (|q| <= 7 < 2^3).
int scale_significand_bits(Bits bits) {
  return bits == Bits::int8 ? 17 : 21;
}

// Low bits of the fp32 pattern u (positive, finite) below its `keep` most significant significand bits.
// Normal numbers have 24 significand bits (hidden bit included); a denormal's significand is u itself.
int dropped_bits(std::uint32_t u, int keep) {
  if ((u >> 23) != 0) return 24 - keep;
  return std::max(0, static_cast<int>(std::bit_width(u)) - keep);
}

std::uint32_t round_up_significand(std::uint32_t u, int keep) {
  const std::uint32_t mask = (std::uint32_t{1} << dropped_bits(u, keep)) - 1;
  return (u + mask) & ~mask;  // a carry out of the significand correctly bumps the exponent
}

std::uint32_t next_up_significand(std::uint32_t u, int keep) {
  return u + (std::uint32_t{1} << dropped_bits(u, keep));
}

double times_qmax(std::uint32_t u, int qm) {
  return static_cast<double>(std::bit_cast<float>(u)) * qm;
}

}  // namespace

float block_scale(float amax, Bits bits) {
  if (!(amax > 0.0f)) return 0.0f;
  const int qm = qmax(bits);
  const int keep = scale_significand_bits(bits);
  const double target = static_cast<double>(amax) / qm;
  // float(target) underflows to 0 only for amax below 2^-149 * qmax / 2: the smallest denormal then serves.
  std::uint32_t u = std::max<std::uint32_t>(1, std::bit_cast<std::uint32_t>(static_cast<float>(target)));
  u = round_up_significand(u, keep);
  // qmax * scale is exact in double (<= 31 significant bits): make sure no |x| / scale exceeds qmax.
  while (times_qmax(u, qm) < static_cast<double>(amax)) u = next_up_significand(u, keep);
  if (times_qmax(u, qm) > static_cast<double>(FLT_MAX)) {
    // amax is within 2^-16 of FLT_MAX: round down instead, so q * scale stays finite. Then
    // amax / scale <= qmax * (1 + 2^-16) < qmax + 1/2 and the clamp keeps |x' - x| <= scale / 2.
    const int drop = dropped_bits(u, keep);
    u &= ~((std::uint32_t{1} << drop) - 1);
    while (times_qmax(u, qm) > static_cast<double>(FLT_MAX)) u -= std::uint32_t{1} << drop;
  }
  return std::bit_cast<float>(u);
}

namespace detail {

namespace {

// Quantization without a division per element. With inv = 1 / scale in double, x * inv is within 2^-45
// of x / scale (|x / scale| <= ~128), while x / scale is either exactly a half integer or at least 2^-25
// away from one (x and scale are floats and scale has <= 21 significand bits). Adding kSnap rounds to a
// multiple of 2^-30, which restores exact ties and keeps near-ties on their side; adding kRound then
// rounds that to the nearest even integer. So the result is round-to-nearest-even of the exact quotient.
// Both are the add-a-large-constant trick (default rounding mode; never -ffast-math here): the sum's
// bit pattern ends in the integer kSnap + q, and as kSnap and kRound are multiples of 256, its low byte is
// q in two's complement (its low nibble q in int4).
constexpr double kSnap = 0x1.8p22;   // r + kSnap lies in [2^22, 2^23): a multiple of 2^-30
constexpr double kRound = 0x1.8p52;  // s + kRound lies in [2^52, 2^53): an integer, in the low mantissa bits

// The low byte of q = round-to-nearest-even(x / scale), valid while |x / scale| <= 2^21.
inline std::uint8_t quantized_byte(float x, double inv) {
  const double r = static_cast<double>(x) * inv;
  return static_cast<std::uint8_t>(std::bit_cast<std::uint64_t>((r + kSnap) + kRound));
}

// q clamped to [-qm, qm]: for the rare block whose scale was rounded down (max|x| near FLT_MAX).
inline std::uint8_t clamped_byte(float x, double inv, double qm) {
  const double r = static_cast<double>(x) * inv;
  const double q = ((r + kSnap) + kRound) - kRound - kSnap;
  return static_cast<std::uint8_t>(static_cast<std::int32_t>(std::min(std::max(q, -qm), qm)));
}

inline std::int32_t signed_low_nibble(std::uint8_t b) {
  return static_cast<std::int8_t>(static_cast<std::uint8_t>(b << 4)) >> 4;
}
inline std::int32_t signed_high_nibble(std::uint8_t b) {
  return static_cast<std::int8_t>(b) >> 4;
}

}  // namespace

std::uint32_t abs_max_bits(const float* x, std::size_t n) {
  std::uint32_t m = 0;
#pragma omp simd reduction(max : m)
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::bit_cast<std::uint32_t>(x[i]) & 0x7fffffffu);
  return m;
}

void quantize_values(const float* x, std::size_t len, Bits bits, float scale, bool clamp, std::uint8_t* packed) {
  const double inv = scale > 0.0f ? 1.0 / static_cast<double>(scale) : 0.0;
  const double qm = qmax(bits);
  const std::size_t pairs = len / 2;
  if (clamp) {
    if (bits == Bits::int8) {
      for (std::size_t i = 0; i < len; ++i) packed[i] = clamped_byte(x[i], inv, qm);
      return;
    }
    for (std::size_t j = 0; j < pairs; ++j) {
      packed[j] = static_cast<std::uint8_t>((clamped_byte(x[2 * j], inv, qm) & 0xf) |
                                            (clamped_byte(x[2 * j + 1], inv, qm) << 4));
    }
    if (len % 2 != 0) packed[pairs] = clamped_byte(x[len - 1], inv, qm) & 0xf;
    return;
  }
  if (bits == Bits::int8) {
#pragma omp simd
    for (std::size_t i = 0; i < len; ++i) packed[i] = quantized_byte(x[i], inv);
    return;
  }
#pragma omp simd
  for (std::size_t j = 0; j < pairs; ++j) {
    packed[j] =
        static_cast<std::uint8_t>((quantized_byte(x[2 * j], inv) & 0xf) | (quantized_byte(x[2 * j + 1], inv) << 4));
  }
  if (len % 2 != 0) packed[pairs] = quantized_byte(x[len - 1], inv) & 0xf;
}

bool quantize_block(const float* x, std::size_t len, Bits bits, std::uint8_t* packed, float& scale) {
  const std::uint32_t amax_bits = abs_max_bits(x, len);
  if (amax_bits >= kInfBits) return false;
  const float amax = std::bit_cast<float>(amax_bits);
  scale = block_scale(amax, bits);
  // qmax * scale >= max|x| unless the scale was rounded down near FLT_MAX (see block_scale).
  const bool clamp = static_cast<double>(qmax(bits)) * scale < static_cast<double>(amax);
  quantize_values(x, len, bits, scale, clamp, packed);
  return true;
}

void dequantize_values(const std::uint8_t* packed, std::size_t len, Bits bits, float scale, float* out) {
  if (bits == Bits::int8) {
#pragma omp simd
    for (std::size_t i = 0; i < len; ++i) out[i] = static_cast<float>(static_cast<std::int8_t>(packed[i])) * scale;
    return;
  }
  const std::size_t pairs = len / 2;
#pragma omp simd
  for (std::size_t j = 0; j < pairs; ++j) {
    out[2 * j] = static_cast<float>(signed_low_nibble(packed[j])) * scale;
    out[2 * j + 1] = static_cast<float>(signed_high_nibble(packed[j])) * scale;
  }
  if (len % 2 != 0) out[len - 1] = static_cast<float>(signed_low_nibble(packed[pairs])) * scale;
}

void accumulate_values(const std::uint8_t* packed, std::size_t len, Bits bits, float scale, float* acc) {
  if (bits == Bits::int8) {
#pragma omp simd
    for (std::size_t i = 0; i < len; ++i) acc[i] += static_cast<float>(static_cast<std::int8_t>(packed[i])) * scale;
    return;
  }
  const std::size_t pairs = len / 2;
#pragma omp simd
  for (std::size_t j = 0; j < pairs; ++j) {
    acc[2 * j] += static_cast<float>(signed_low_nibble(packed[j])) * scale;
    acc[2 * j + 1] += static_cast<float>(signed_high_nibble(packed[j])) * scale;
  }
  if (len % 2 != 0) acc[len - 1] += static_cast<float>(signed_low_nibble(packed[pairs])) * scale;
}

void throw_non_finite(std::string_view operation, std::size_t index, std::size_t count) {
  throw_internal(std::string(operation) + ": non-finite value at element " + std::to_string(index) + " of " +
                 std::to_string(count) + " (check all_finite before quantizing)");
}

void check_layout(const QuantizedView& q, std::size_t count, std::string_view operation) {
  validate(q.spec);
  if (q.count != count || q.packed.size() != packed_bytes(count, q.spec.bits) ||
      q.scales.size() != scale_count(count, q.spec.block)) {
    throw_internal(std::string(operation) + ": quantized tensor of " + std::to_string(q.count) + " elements (" +
                   std::to_string(q.packed.size()) + " bytes, " + std::to_string(q.scales.size()) +
                   " scales) does not fit " + std::to_string(count) + " elements of " +
                   std::string(to_string(q.spec.bits)) + " in blocks of " + std::to_string(q.spec.block) +
                   " (expected " + std::to_string(packed_bytes(count, q.spec.bits)) + " bytes, " +
                   std::to_string(scale_count(count, q.spec.block)) + " scales)");
  }
}

}  // namespace detail

}  // namespace hsdp::quant
