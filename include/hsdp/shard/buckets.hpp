#pragma once
// DDP gradient buckets: consecutive units, in backward order (final norm, last block, ..., embedding), grouped
// until a bucket holds at least parallel.bucket_mb MiB of fp32 gradients. A bucket is a contiguous range of the
// flat gradient buffer (units are stored in forward order), all-reduced as soon as its last unit's backward is done.
#include <cstddef>
#include <span>
#include <vector>

namespace hsdp::shard {

struct Bucket {
  int first_unit = 0;  // lowest unit index in the bucket
  int last_unit = 0;   // highest
  std::size_t offset = 0;  // elements into the flat gradient buffer
  std::size_t count = 0;
};

// unit_numel: elements of each unit, in forward order.
std::vector<Bucket> make_buckets(std::span<const std::size_t> unit_numel, double bucket_mb);

}  // namespace hsdp::shard
