#include "hsdp/shard/flat_param.hpp"

#include <algorithm>

#include "hsdp/comm/traffic.hpp"
#include "hsdp/core/buffer.hpp"
#include "hsdp/model/init.hpp"

namespace hsdp::shard {

UnitGeometry UnitGeometry::make(std::size_t numel, int shard_size, int shard_rank) {
  UnitGeometry g;
  g.numel = numel;
  g.shard_numel = comm::shard_count(numel, static_cast<std::size_t>(shard_size));
  g.padded_numel = g.shard_numel * static_cast<std::size_t>(shard_size);
  g.begin = g.shard_numel * static_cast<std::size_t>(shard_rank);
  g.valid = g.begin >= numel ? 0 : std::min(g.shard_numel, numel - g.begin);
  return g;
}

FlatParamUnit::FlatParamUnit(const model::ModelLayout& layout, int unit_index, int shard_size, int shard_rank,
                             bool with_grad_shard, DeviceOps& device)
    : unit(unit_index), geometry(UnitGeometry::make(layout.unit(unit_index).numel, shard_size, shard_rank)) {
  const std::size_t s = geometry.shard_numel;
  master = device.array<float>(s, MemCategory::params);
  exp_avg = device.array<float>(s, MemCategory::optimizer);
  exp_avg_sq = device.array<float>(s, MemCategory::optimizer);
  if (with_grad_shard) grad_shard = device.array<float>(s, MemCategory::grads);
  // Decay segments: the parts of each parameter that fall inside [begin, begin + valid), shard-relative.
  const std::size_t lo = geometry.begin;
  const std::size_t hi = geometry.begin + geometry.valid;
  for (const model::ParamInfo* p : layout.unit_params(unit_index)) {
    const std::size_t a = std::max(lo, p->offset);
    const std::size_t b = std::min(hi, p->offset + p->numel);
    if (a < b) segments.push_back({a - lo, b - a, p->weight_decay});
  }
}

void FlatParamUnit::init_master(const model::ModelLayout& layout, std::uint64_t seed, DeviceOps& device) {
  Buffer<float> full(geometry.numel);
  model::init_unit<float>(layout, unit, full.span(), seed);
  device.copy_from_host(master.data(), full.data() + geometry.begin, geometry.valid * sizeof(float));
}

}  // namespace hsdp::shard
