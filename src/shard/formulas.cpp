#include "hsdp/shard/formulas.hpp"

#include "hsdp/comm/traffic.hpp"
#include "hsdp/shard/buckets.hpp"
#include "hsdp/shard/flat_param.hpp"
#include "hsdp/shard/zeropp.hpp"

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

comm::ByteCounters step_traffic(const model::ModelLayout& layout, const EngineOptions& o, const MeshGroups& g) {
  comm::ByteCounters c;
  const std::size_t bp = size_of(o.param_dtype);
  const std::size_t br = size_of(o.reduce_dtype);
  auto on = [&](const GroupView& group, Collective op, std::size_t count, std::size_t bytes, int times) {
    for (int i = 0; i < times; ++i) c.record(op, comm::traffic_bytes(op, count, bytes, group.rank, group.node_of_rank));
  };
  const int k = o.grad_accum;
  const int final_unit = layout.num_units() - 1;
  if (o.strategy == Sharding::no_shard) {
    for (const Bucket& b : make_buckets(layout, o.bucket_mb)) on(g.replicate, Collective::all_reduce, b.count, br, 1);
    return c;
  }
  const ZeroPPOptions& z = o.zeropp;
  const bool hybrid = comm::is_hybrid(o.strategy);
  const bool regather = o.strategy == Sharding::full_shard || o.strategy == Sharding::hybrid_shard;
  const int nodes = g.cross_node.size();
  const int p = g.node.size();
  for (int u = 0; u < layout.num_units(); ++u) {
    const UnitGeometry geo = UnitGeometry::make(layout.unit(u).numel, g.shard.size(), 0);
    const std::size_t s = geo.shard_numel;
    const bool block = u >= 1 && u < final_unit;
    // forward gathers: the embedding is gathered for the embedding and again for the head
    // (with hpZ the second one reads the embedding's secondary slice inside the node).
    const bool head_regather = regather && u == 0;
    const bool hpz = z.hpz_partition_size > 0;
    const std::size_t hpz_slice = geo.padded_numel / static_cast<std::size_t>(g.hpz.size());
    if (o.strategy != Sharding::zero1) {
      const int shard_gathers = (head_regather && !hpz) ? 2 : 1;
      if (z.quantized_weights) {
        on(g.shard, Collective::all_gather, message_bytes(s, {quant::Bits::int8, z.block}), 1, shard_gathers * k);
      } else {
        on(g.shard, Collective::all_gather, s, bp, shard_gathers * k);
      }
      if (head_regather && hpz) on(g.hpz, Collective::all_gather, hpz_slice, bp, k);
    }
    if (regather && block) {  // backward gathers
      if (hpz) {
        on(g.hpz, Collective::all_gather, hpz_slice, bp, k);
      } else {
        on(g.shard, Collective::all_gather, s, bp, k);
      }
    }
    const int reductions = hybrid ? k : 1;
    const std::size_t m = message_bytes(s, {z.grad_bits, z.block});
    if (z.quantized_gradients && hybrid) {
      on(g.shard, Collective::all_to_all, m, 1, reductions);
    } else if (z.quantized_gradients && nodes > 1) {
      if (p > 1) on(g.node, Collective::all_to_all, static_cast<std::size_t>(nodes) * m, 1, reductions);
      on(g.cross_node, Collective::all_to_all, m, 1, reductions);
    } else {
      on(g.shard, Collective::reduce_scatter, s, br, reductions);
    }
    if (hybrid) on(g.replicate, Collective::all_reduce, s, br, 1);
    if (o.strategy == Sharding::zero1) on(g.shard, Collective::all_gather, s, bp, 1);
  }
  return c;
}

}  // namespace hsdp::shard
