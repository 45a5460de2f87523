#include "hsdp/shard/formulas.hpp"

#include "hsdp/comm/traffic.hpp"
#include "hsdp/shard/buckets.hpp"
#include "hsdp/shard/flat_param.hpp"

namespace hsdp::shard {

using comm::Collective;
using comm::Sharding;

std::int64_t model_state_bytes(const model::ModelLayout& layout, Sharding strategy, int shard_size,
                               DType param_dtype) {
  std::int64_t total = 0;
  for (const auto& unit : layout.units()) {
    const auto g = UnitGeometry::make(unit.numel, shard_size, 0);
    const auto n = static_cast<std::int64_t>(unit.numel);
    const auto s = static_cast<std::int64_t>(g.shard_numel);
    const auto pp = static_cast<std::int64_t>(g.padded_numel);
    switch (strategy) {
      case Sharding::no_shard: total += (param_dtype == DType::f32 ? 16 : 20) * n; break;
      case Sharding::zero1: total += 4 * pp + 4 * pp + 16 * s; break;
      default: total += 16 * s; break;
    }
  }
  return total;
}

comm::ByteCounters step_traffic(const model::ModelLayout& layout, const EngineOptions& o, const GroupView& shard,
                                const GroupView& replicate) {
  comm::ByteCounters c;
  const std::size_t bp = size_of(o.param_dtype);
  const std::size_t br = size_of(o.reduce_dtype);
  auto on = [&](const GroupView& g, Collective op, std::size_t count, std::size_t bytes, int times) {
    for (int i = 0; i < times; ++i) c.record(op, comm::traffic_bytes(op, count, bytes, g.rank, g.node_of_rank));
  };
  const int k = o.grad_accum;
  const int final_unit = layout.num_units() - 1;
  if (o.strategy == Sharding::no_shard) {
    for (const Bucket& b : make_buckets(layout, o.bucket_mb)) on(replicate, Collective::all_reduce, b.count, br, 1);
    return c;
  }
  // Forward/backward gathers per micro-batch, in issue order does not matter for totals.
  for (int u = 0; u < layout.num_units(); ++u) {
    const std::size_t s = UnitGeometry::make(layout.unit(u).numel, shard.size(), 0).shard_numel;
    int gathers = 0;
    switch (o.strategy) {
      case Sharding::shard_grad_op:
      case Sharding::hybrid_shard_zero2: gathers = 1; break;
      case Sharding::full_shard:
      case Sharding::hybrid_shard: gathers = u == final_unit ? 1 : 2; break;
      default: break;
    }
    on(shard, Collective::all_gather, s, bp, gathers * k);
    const bool hybrid = comm::is_hybrid(o.strategy);
    on(shard, Collective::reduce_scatter, s, br, hybrid ? k : 1);
    if (hybrid) on(replicate, Collective::all_reduce, s, br, 1);
    if (o.strategy == Sharding::zero1) on(shard, Collective::all_gather, s, bp, 1);
  }
  return c;
}

}  // namespace hsdp::shard
