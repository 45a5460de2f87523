#pragma once
// Private helpers of the model kernels (not installed).
#include <algorithm>
#include <cstdint>

#include "hsdp/device/parallel.hpp"

namespace hsdp::model::detail {

// Columns per piece when a reduction over rows is split by columns: each column is summed over all rows
// by one thread, in row order, whatever the thread count.
inline constexpr std::int64_t kColumnPiece = 64;

// body(c0, c1) for fixed pieces of the columns [0, cols); rows * (c1 - c0) is the work of a piece.
template <typename Body>
void for_column_pieces(std::int64_t cols, std::int64_t rows, Body&& body) {
  const std::int64_t pieces = (cols + kColumnPiece - 1) / kColumnPiece;
  device::parallel_for(
      pieces,
      [&](std::int64_t p) {
        const std::int64_t c0 = p * kColumnPiece;
        body(c0, std::min(cols, c0 + kColumnPiece));
      },
      rows * kColumnPiece);
}

}  // namespace hsdp::model::detail
