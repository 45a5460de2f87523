#include "hsdp/shard/buckets.hpp"

namespace hsdp::shard {

std::vector<Bucket> make_buckets(std::span<const std::size_t> unit_numel, double bucket_mb) {
  const double limit = bucket_mb * 1024.0 * 1024.0;
  const auto numel = [&](int u) { return unit_numel[static_cast<std::size_t>(u)]; };
  std::vector<std::size_t> offset;
  std::size_t total = 0;
  for (const std::size_t n : unit_numel) {
    offset.push_back(total);
    total += n;
  }
  std::vector<Bucket> buckets;
  int hi = static_cast<int>(unit_numel.size()) - 1;
  while (hi >= 0) {
    int lo = hi;
    double bytes = 4.0 * static_cast<double>(numel(lo));
    while (bytes < limit && lo > 0) {
      --lo;
      bytes += 4.0 * static_cast<double>(numel(lo));
    }
    const std::size_t begin = offset[static_cast<std::size_t>(lo)];
    const std::size_t end = offset[static_cast<std::size_t>(hi)] + numel(hi);
    buckets.push_back({lo, hi, begin, end - begin});
    hi = lo - 1;
  }
  return buckets;
}

}  // namespace hsdp::shard
