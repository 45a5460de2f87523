#pragma once
// UnitShard: one contiguous range of one unit's flat fp32 parameters that a rank holds, with its Adam moments. What
// the sharding engine hands the checkpoint layer (Engine::shard_views) and the checkpoint layer reads and writes; here,
// in the model layer both depend on, so that neither depends on the other.
#include <cstddef>

namespace hsdp::model {

struct UnitShard {
  int unit = 0;                 // index into ModelLayout::units()
  std::size_t begin = 0;        // first element of the unit's flat buffer this rank holds
  std::size_t count = 0;        // valid elements (padding beyond the unit's numel is excluded)
  float* params = nullptr;      // count elements each: fp32 master weights,
  float* exp_avg = nullptr;     // Adam m,
  float* exp_avg_sq = nullptr;  // Adam v
};

}  // namespace hsdp::model
