#include "hsdp/optim/grad_clip.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace hsdp::optim {

namespace {
constexpr std::size_t kChunk = std::size_t{1} << 14;
}

double local_squared_sum(std::span<const float> values) {
  const std::size_t n = values.size();
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks, 0.0);
  const float* x = values.data();
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t c = 0; c < static_cast<std::ptrdiff_t>(chunks); ++c) {
    const std::size_t begin = static_cast<std::size_t>(c) * kChunk;
    const std::size_t end = std::min(n, begin + kChunk);
    // Packed: the vector lanes are independent accumulators (a fixed order for a given build, so a run repeats).
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (std::size_t i = begin; i < end; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    partial[static_cast<std::size_t>(c)] = sum;
  }
  double total = 0.0;
  for (const double p : partial) total += p;
  return total;
}

ClipResult clip_coefficient(double global_squared_norm, double max_norm) {
  ClipResult result;
  result.norm = std::sqrt(global_squared_norm);
  result.finite = std::isfinite(result.norm);
  if (max_norm > 0.0 && result.finite) {
    result.coefficient = static_cast<float>(std::min(1.0, max_norm / (result.norm + 1e-6)));
  }
  return result;
}

}  // namespace hsdp::optim
