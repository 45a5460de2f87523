#include "hsdp/shard/buckets.hpp"

namespace hsdp::shard {

std::vector<Bucket> make_buckets(const model::ModelLayout& layout, double bucket_mb) {
  const double limit = bucket_mb * 1024.0 * 1024.0;
  std::vector<std::size_t> offset;
  std::size_t total = 0;
  for (const auto& u : layout.units()) {
    offset.push_back(total);
    total += u.numel;
  }
  std::vector<Bucket> buckets;
  int hi = layout.num_units() - 1;
  while (hi >= 0) {
    int lo = hi;
    double bytes = 4.0 * static_cast<double>(layout.unit(lo).numel);
    while (bytes < limit && lo > 0) {
      --lo;
      bytes += 4.0 * static_cast<double>(layout.unit(lo).numel);
    }
    const std::size_t begin = offset[static_cast<std::size_t>(lo)];
    const std::size_t end = offset[static_cast<std::size_t>(hi)] + layout.unit(hi).numel;
    buckets.push_back({lo, hi, begin, end - begin});
    hi = lo - 1;
  }
  return buckets;
}

}  // namespace hsdp::shard
