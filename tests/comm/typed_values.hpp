#pragma once
// Deterministic per-rank inputs for the collective tests, and conversions between the element types and double.
//
// Why the comparisons can be exact: floating inputs are k + q/4 with integer |k| <= 8 and q in 0..3, so every
// partial sum over up to 4 ranks is a multiple of 1/4 below 36 in magnitude (at most 8 significant bits), and so
// is exactly representable in bf16, f16, f32 and f64, whatever order MPI adds in. avg divides by a group size
// that is a power of two (1, 2 or 4 here), which is exact too. int8 inputs are |k| <= 8: sums cannot overflow.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hsdp/comm/communicator.hpp"
#include "hsdp/core/dtype.hpp"

namespace hsdp::comm::testing {

template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, bf16_t>) return float_to_bf16(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, f16_t>) return float_to_f16(static_cast<float>(v));
  else return static_cast<T>(v);
}

template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, bf16_t>) return bf16_to_float(v);
  else if constexpr (std::is_same_v<T, f16_t>) return f16_to_float(v);
  else return static_cast<double>(v);
}

// Element i of rank `rank`'s input; `salt` varies it between tests.
template <typename T>
T input_value(int rank, std::size_t i, int salt = 0) {
  const std::size_t mix = static_cast<std::size_t>(rank) * 7 + i * 3 + static_cast<std::size_t>(salt);
  if constexpr (std::is_same_v<T, std::uint8_t>) {
    return static_cast<std::uint8_t>((static_cast<std::size_t>(rank) * 31 + i * 7 + static_cast<std::size_t>(salt)) &
                                     0xffu);
  } else {
    const double k = static_cast<double>(mix % 17) - 8.0;
    if constexpr (std::is_same_v<T, std::int8_t>) return static_cast<std::int8_t>(k);
    else return from_double<T>(k + 0.25 * static_cast<double>((i + static_cast<std::size_t>(rank)) % 4));
  }
}

// Calls f(std::type_identity<T>{}) for every element type in the list.
template <typename... Ts, typename F>
void for_each_type(F&& f) {
  (f(std::type_identity<Ts>{}), ...);
}

template <typename F>
void for_each_dtype(F&& f) {
  for_each_type<float, double, bf16_t, f16_t, std::int8_t, std::uint8_t>(f);
}

template <typename T>
constexpr bool kReducible = !std::is_same_v<T, std::uint8_t>;
template <typename T>
constexpr bool kAveragable = dtype_of<T>() == DType::f32 || dtype_of<T>() == DType::f64 ||
                             dtype_of<T>() == DType::bf16 || dtype_of<T>() == DType::f16;

}  // namespace hsdp::comm::testing
