#pragma once
// FlatParamUnit: one model unit's parameters as a flat fp32 buffer split over the shard group.
//   N  = the unit's elements; n = shard group size; S = ceil(N / n) elements per rank; Pp = S * n (padded).
//   Rank r of the shard group owns elements [r S, r S + S) of the padded buffer; those beyond N are padding:
//   always zero, never updated, never in a norm or a checkpoint.
// The owned shard holds the fp32 master weights and the AdamW moments, plus (sharded-gradient strategies)
// the fp32 gradient shard, all in the device memory of the engine's DeviceOps (device_ops.hpp). Full (gathered)
// parameters and gradients are transient buffers the engine allocates around each use, charged to the accountant while
// they live. The host reaches the shard only through the engine's checkpoint views (Engine::shard_views).
#include <cstddef>
#include <vector>

#include "hsdp/model/layout.hpp"
#include "hsdp/model/unit_shard.hpp"
#include "hsdp/optim/adamw.hpp"
#include "hsdp/stream/device_ops.hpp"

namespace hsdp::shard {

using stream::DeviceArray;
using stream::DeviceOps;

struct UnitGeometry {
  std::size_t numel = 0;         // N
  std::size_t shard_numel = 0;   // S
  std::size_t padded_numel = 0;  // Pp = S * n
  std::size_t begin = 0;         // r * S
  std::size_t valid = 0;         // elements of the shard below N (count without padding)

  static UnitGeometry make(std::size_t numel, int shard_size, int shard_rank);
};

using model::UnitShard;  // a checkpoint's unit of I/O (model/unit_shard.hpp)

struct FlatParamUnit {
  int unit = 0;
  UnitGeometry geometry;
  DeviceArray<float> master;                  // [S] fp32 weights (MemCategory::params)
  DeviceArray<float> exp_avg;                 // [S] (optimizer)
  DeviceArray<float> exp_avg_sq;              // [S] (optimizer)
  DeviceArray<float> grad_shard;              // [S] fp32 reduced gradient (grads); empty for no_shard
  std::vector<optim::DecaySegment> segments;  // decay segments of [0, valid) of the shard

  FlatParamUnit(const model::ModelLayout& layout, int unit, int shard_size, int shard_rank, bool with_grad_shard,
                DeviceOps& device);
  // Initialises the owned shard from the model's deterministic init (identical to one-rank training), computed on
  // the host and copied to the device.
  void init_master(const model::ModelLayout& layout, std::uint64_t seed, DeviceOps& device);
};

}  // namespace hsdp::shard
