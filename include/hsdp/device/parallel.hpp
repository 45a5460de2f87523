#pragma once
// OpenMP helpers for the CPU kernels. Each output element is produced by exactly one thread with a fixed
// order of operations, whichever thread that is, so results are bit-identical run to run and for any
// number of threads. Items are handed out dynamically in small chunks: on a shared node, a thread that
// the OS preempts then delays only its own chunk instead of stalling the team at the barrier.
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace hsdp::device {

// Below this many elements of light work a loop runs on the calling thread (a parallel region costs
// a few microseconds).
inline constexpr std::int64_t kParallelMinWork = 1 << 14;

struct Range {
  std::int64_t begin;
  std::int64_t end;
};

// The part'th of `parts` contiguous, nearly equal pieces of [0, n).
constexpr Range split_range(std::int64_t n, std::int64_t parts, std::int64_t part) {
  const std::int64_t base = n / parts;
  const std::int64_t extra = n % parts;
  const std::int64_t begin = part * base + std::min(part, extra);
  return {begin, begin + base + (part < extra ? 1 : 0)};
}

// Chunks per thread handed out by the dynamic schedule.
inline constexpr std::int64_t kChunksPerThread = 8;

// body(i) for i in [0, n); serial when n * work_per_item is small.
template <typename Body>
void parallel_for(std::int64_t n, Body&& body, std::int64_t work_per_item = 1) {
  const std::int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads <= 1 || n * work_per_item < kParallelMinWork) {
    for (std::int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  const auto chunk = static_cast<int>(std::max<std::int64_t>(1, n / (threads * kChunksPerThread)));
#pragma omp parallel for schedule(dynamic, chunk)
  for (std::int64_t i = 0; i < n; ++i) body(i);
}

// Elementwise loops over n items in contiguous blocks of kElementBlock (vectorizable inner loops).
inline constexpr std::int64_t kElementBlock = 4096;
template <typename Body>
void parallel_blocks(std::int64_t n, Body&& body) {
  const std::int64_t blocks = (n + kElementBlock - 1) / kElementBlock;
  parallel_for(
      blocks,
      [&](std::int64_t b) {
        const std::int64_t begin = b * kElementBlock;
        body(begin, std::min(n, begin + kElementBlock));
      },
      kElementBlock);
}

}  // namespace hsdp::device
