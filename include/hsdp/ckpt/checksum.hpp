#pragma once
// The checksum of a checkpoint tensor ("hsdp-sum64"): over the elements x_i of the dataset in row-major order,
//
//     checksum = sum_i splitmix64(i * 0x9E3779B97F4A7C15 + bits(x_i))   (mod 2^64)
//
// where bits(x) is the IEEE-754 bit pattern of the fp32 value and splitmix64 is SplitMix64's output function (a
// bijection of 64-bit words). It composes over ranges: each rank sums the terms of the elements it holds, and a
// sum of the partial sums (MPI_UINT64_T, MPI_SUM, exact and order independent) gives the whole tensor's checksum,
// whatever the sharding. For a fixed index the term is a bijection of the value, so any change of a single
// element always changes the checksum; moved or multiple changes escape it with probability ~2^-64.
#include <cstddef>
#include <cstdint>
#include <span>

namespace hsdp::ckpt {

inline constexpr const char* kChecksumAlgorithm =
    "hsdp-sum64: sum over elements i (row-major) of splitmix64(i * 0x9E3779B97F4A7C15 + fp32_bits(x_i)) mod 2^64";

// The sum of the terms of values[k] at dataset index first_index + k.
std::uint64_t checksum_range(std::span<const float> values, std::uint64_t first_index);

}  // namespace hsdp::ckpt
