#pragma once
// Helpers shared by the quant tests: input patterns, unpacking, an OpenMP thread-count scope.
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <ostream>
#include <vector>

#include "hsdp/quant/blockwise.hpp"

namespace hsdp::quant::test {

// Sets the OpenMP thread count for its lifetime.
class OmpThreads {
 public:
  explicit OmpThreads(int threads) : previous_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~OmpThreads() { omp_set_num_threads(previous_); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int previous_;
};

// Element i's signed value from packed bytes.
inline int unpacked(std::span<const std::uint8_t> packed, Bits bits, std::size_t i) {
  if (bits == Bits::int8) return static_cast<std::int8_t>(packed[i]);
  const std::uint8_t byte = packed[i / 2];
  const int nibble = (i % 2 == 0) ? (byte & 0xf) : (byte >> 4);
  return nibble >= 8 ? nibble - 16 : nibble;
}

// Normal(0, 1) values times `magnitude`.
inline std::vector<float> random_values(std::size_t n, float magnitude, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng) * magnitude;
  return x;
}

// Blocks of different character, one after another, each `block` long except a partial last one:
// random at several magnitudes, constant, all zero (with -0), denormal (1e-40), tiny (1e-30), huge (+-1e30),
// near FLT_MAX, exact half-integer multiples of a power-of-two scale (ties), their neighbours one ulp
// away (near-ties), the smallest denormals, then a partial random block of `tail` elements.
inline std::vector<float> mixed_blocks(std::size_t block, std::size_t tail, Bits bits, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x;
  auto add_block = [&](auto value_of) {
    for (std::size_t i = 0; i < block; ++i) x.push_back(value_of(i));
  };
  for (const float magnitude : {1.0f, 3.0e-3f, 7.5e4f}) add_block([&](std::size_t) { return normal(rng) * magnitude; });
  add_block([](std::size_t) { return 3.7f; });
  add_block([](std::size_t) { return -0.15f; });
  add_block([](std::size_t i) { return i % 3 == 0 ? -0.0f : 0.0f; });
  add_block([&](std::size_t) { return uniform(rng) * 1.0e-40f; });
  add_block([](std::size_t) { return 1.0e-40f; });
  add_block([&](std::size_t) { return uniform(rng) * 1.0e-30f; });
  add_block([&](std::size_t i) { return i == 5 ? 1.0e30f : uniform(rng) * 1.0e30f; });
  add_block([&](std::size_t i) { return i == 7 ? -1.0e30f : uniform(rng) * 1.0e30f; });
  add_block([](std::size_t i) { return i % 2 ? -1.0e30f : 1.0e30f; });
  add_block([&](std::size_t i) { return i == 1 ? std::numeric_limits<float>::max() : uniform(rng) * 3.0e38f; });
  // Ties: max|x| = qmax * 2^-3 gives scale 2^-3 exactly; (k + 1/2) * 2^-3 must round to the even k.
  const int qm = qmax(bits);
  const float tie_scale = 0.125f;
  add_block([&](std::size_t i) {
    if (i == 0) return static_cast<float>(qm) * tie_scale;
    const int k = static_cast<int>(i % static_cast<std::size_t>(qm)) - qm / 2;
    return (static_cast<float>(k) + 0.5f) * tie_scale;
  });
  // Near-ties: one ulp either side of the ties.
  add_block([&](std::size_t i) {
    if (i == 0) return static_cast<float>(qm) * tie_scale;
    const int k = static_cast<int>(i % static_cast<std::size_t>(qm)) - qm / 2;
    const float tie = (static_cast<float>(k) + 0.5f) * tie_scale;
    return std::nextafter(tie, i % 2 ? 1.0e9f : -1.0e9f);
  });
  // Ties again under scales whose inverses are inexact in double (random 15-bit significands, so
  // (k + 1/2) * scale is exact in fp32): x * (1 / scale) misses about 7% of these ties by an ulp.
  for (int t = 0; t < 8; ++t) {
    const float s = std::bit_cast<float>(((static_cast<std::uint32_t>(rng()) & 0x7fffffu) | (120u << 23)) & ~0x1ffu);
    add_block([&](std::size_t i) {
      if (i == 0) return static_cast<float>(qm) * s;
      const int k = static_cast<int>((i * 7 + static_cast<std::size_t>(t)) % static_cast<std::size_t>(2 * qm)) - qm;
      return (static_cast<float>(k) + 0.5f) * s;
    });
  }
  // Near-ties under a scale with a full 17-bit significand: values (k + 1/2 +- 2^-20) * scale.
  add_block([&](std::size_t i) {
    const float s = std::bit_cast<float>(std::bit_cast<std::uint32_t>(0.0123456789f) & ~0x7fu);
    if (i == 0) return static_cast<float>(qm) * s;
    const double k = static_cast<double>(static_cast<int>(i % static_cast<std::size_t>(qm)) - qm / 2);
    return static_cast<float>((k + 0.5 + (i % 2 ? 1.0 : -1.0) * 0x1p-20) * s);
  });
  add_block([](std::size_t i) { return std::bit_cast<float>(static_cast<std::uint32_t>(1 + i % 5)); });
  for (std::size_t i = 0; i < tail; ++i) x.push_back(normal(rng));
  return x;
}

template <typename T>
bool same_bytes(std::span<const T> a, std::span<const T> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

inline bool same_quantized(const QuantizedBuffer& a, const QuantizedBuffer& b) {
  return a.count() == b.count() && same_bytes(a.packed(), b.packed()) && same_bytes(a.scales(), b.scales());
}

}  // namespace hsdp::quant::test

namespace hsdp::quant {
// Readable parameter values in test names (ctest -R selects them): "int8", not "4-byte object <08-00 00-00>".
inline void PrintTo(Bits bits, std::ostream* out) { *out << to_string(bits); }
}  // namespace hsdp::quant
