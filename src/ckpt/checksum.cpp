#include "hsdp/ckpt/checksum.hpp"

#include <bit>

namespace hsdp::ckpt {
namespace {

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;

constexpr std::uint64_t splitmix64(std::uint64_t z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z;
}

}  // namespace

std::uint64_t checksum_range(std::span<const float> values, std::uint64_t first_index) {
  std::uint64_t sum = 0;
  std::uint64_t base = first_index * kGolden;
  // Written so that the compiler vectorizes it (no loop-carried dependency but the sum).
  const std::size_t n = values.size();
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint64_t bits = std::bit_cast<std::uint32_t>(values[k]);
    sum += splitmix64(base + bits);
    base += kGolden;
  }
  return sum;
}

}  // namespace hsdp::ckpt
