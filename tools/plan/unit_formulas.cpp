#include "plan/unit_formulas.hpp"

#include "hsdp/comm/traffic.hpp"
#include "hsdp/shard/flat_param.hpp"
#include "hsdp/shard/zeropp.hpp"

namespace hsdp::plan {

using comm::Collective;
using comm::Sharding;

// Line for line src/shard/formulas.cpp (model_state_bytes), over unit sizes.
std::int64_t model_state_bytes(const UnitSizes& units, Sharding strategy, int shard_size, DType param_dtype) {
  std::int64_t total = 0;
  for (const std::size_t numel : units.numel) {
    const auto g = shard::UnitGeometry::make(numel, shard_size, 0);
    const auto n = static_cast<std::int64_t>(numel);
    const auto s = static_cast<std::int64_t>(g.shard_numel);
    const auto pp = static_cast<std::int64_t>(g.padded_numel);
    switch (strategy) {
      case Sharding::no_shard:
        total += (param_dtype == DType::f32 ? 16 : 20) * n;
        break;
      case Sharding::zero1:
        total += 4 * pp + 4 * pp + 16 * s;
        break;
      default:
        total += 16 * s;
        break;
    }
  }
  return total;
}

// Line for line src/shard/buckets.cpp.
std::vector<shard::Bucket> make_buckets(const UnitSizes& units, double bucket_mb) {
  const double limit = bucket_mb * 1024.0 * 1024.0;
  const int n_units = static_cast<int>(units.numel.size());
  const auto numel = [&](int u) { return units.numel[static_cast<std::size_t>(u)]; };
  std::vector<std::size_t> offset;
  std::size_t total = 0;
  for (const std::size_t n : units.numel) {
    offset.push_back(total);
    total += n;
  }
  std::vector<shard::Bucket> buckets;
  int hi = n_units - 1;
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

// Line for line src/shard/formulas.cpp (step_traffic), naming each collective instead of counting it.
void for_each_collective(const UnitSizes& units, const shard::EngineOptions& o, const shard::MeshGroups& g,
                         const std::function<void(const CollectiveCall&)>& visit) {
  const std::size_t bp = size_of(o.param_dtype);
  const std::size_t br = size_of(o.reduce_dtype);
  const int k = o.grad_accum;
  const int n_units = static_cast<int>(units.numel.size());
  const int final_unit = n_units - 1;
  auto on = [&](const shard::GroupView& group, Collective op, std::size_t count, std::size_t bytes, int times, int unit,
                Phase phase) {
    if (times > 0) visit({&group, op, count, bytes, times, unit, phase});
  };
  if (o.strategy == Sharding::no_shard) {
    for (const shard::Bucket& b : make_buckets(units, o.bucket_mb)) {
      on(g.replicate, Collective::all_reduce, b.count, br, 1, b.first_unit, Phase::bucket_all_reduce);
    }
    return;
  }
  const shard::ZeroPPOptions& z = o.zeropp;
  const bool hybrid = comm::is_hybrid(o.strategy);
  const bool regather = o.strategy == Sharding::full_shard || o.strategy == Sharding::hybrid_shard;
  const int nodes = g.cross_node.size();
  const int p = g.node.size();
  for (int u = 0; u < n_units; ++u) {
    const auto geo = shard::UnitGeometry::make(units.numel[static_cast<std::size_t>(u)], g.shard.size(), 0);
    const std::size_t s = geo.shard_numel;
    const bool block = u >= 1 && u < final_unit;
    const bool head_regather = regather && u == 0 && units.tied_head;
    const bool hpz = z.hpz_partition_size > 0;
    const std::size_t hpz_slice = geo.padded_numel / static_cast<std::size_t>(g.hpz.size());
    if (o.strategy != Sharding::zero1) {
      const int shard_gathers = (head_regather && !hpz) ? 2 : 1;
      if (z.quantized_weights) {
        on(g.shard, Collective::all_gather, shard::message_bytes(s, {quant::Bits::int8, z.block}), 1, shard_gathers * k,
           u, Phase::forward_gather);
      } else {
        on(g.shard, Collective::all_gather, s, bp, shard_gathers * k, u, Phase::forward_gather);
      }
      if (head_regather && hpz) on(g.hpz, Collective::all_gather, hpz_slice, bp, k, u, Phase::forward_gather);
    }
    if (regather && block) {
      if (hpz) {
        on(g.hpz, Collective::all_gather, hpz_slice, bp, k, u, Phase::backward_gather);
      } else {
        on(g.shard, Collective::all_gather, s, bp, k, u, Phase::backward_gather);
      }
    }
    const int reductions = hybrid ? k : 1;
    const std::size_t m = shard::message_bytes(s, {z.grad_bits, z.block});
    if (z.quantized_gradients && hybrid) {
      on(g.shard, Collective::all_to_all, m, 1, reductions, u, Phase::reduce);
    } else if (z.quantized_gradients && nodes > 1) {
      if (p > 1) {
        on(g.node, Collective::all_to_all, static_cast<std::size_t>(nodes) * m, 1, reductions, u, Phase::reduce);
      }
      on(g.cross_node, Collective::all_to_all, m, 1, reductions, u, Phase::reduce);
    } else {
      on(g.shard, Collective::reduce_scatter, s, br, reductions, u, Phase::reduce);
    }
    if (hybrid) on(g.replicate, Collective::all_reduce, s, br, 1, u, Phase::cross_node_reduce);
    if (o.strategy == Sharding::zero1) on(g.shard, Collective::all_gather, s, bp, 1, u, Phase::post_step_gather);
  }
}

comm::ByteCounters step_traffic(const UnitSizes& units, const shard::EngineOptions& options,
                                const shard::MeshGroups& g) {
  comm::ByteCounters c;
  for_each_collective(units, options, g, [&](const CollectiveCall& call) {
    const comm::LinkBytes bytes =
        comm::traffic_bytes(call.op, call.count, call.elem_bytes, call.group->rank, call.group->node_of_rank);
    for (int i = 0; i < call.times; ++i) c.record(call.op, bytes);
  });
  return c;
}

}  // namespace hsdp::plan
