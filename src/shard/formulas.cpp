#include "hsdp/shard/formulas.hpp"

#include "hsdp/comm/traffic.hpp"
#include "hsdp/shard/buckets.hpp"
#include "hsdp/shard/flat_param.hpp"
#include "hsdp/shard/zeropp.hpp"

namespace hsdp::shard {

using comm::Collective;

UnitSizes UnitSizes::of(const model::ModelLayout& layout) {
  UnitSizes sizes;
  for (const auto& unit : layout.units()) sizes.numel.push_back(unit.numel);
  sizes.tied_head = layout.config().tied_head();  // an untied Llama gathers its head with the final unit only
  return sizes;
}

std::int64_t model_state_bytes(const UnitSizes& units, Sharding strategy, int shard_size, DType param_dtype,
                               DType compute_dtype) {
  const Strategy& st = shard::strategy(strategy);
  const auto bc = static_cast<std::int64_t>(size_of(compute_dtype));
  // The fp32 master is the compute copy only when nothing is sharded and compute needs no rounding.
  const bool master_is_compute = st.shard_scope == comm::ShardScope::self && param_dtype == DType::f32;
  std::int64_t total = 0;
  for (const std::size_t numel : units.numel) {
    const auto g = UnitGeometry::make(numel, shard_size, 0);
    const auto s = static_cast<std::int64_t>(g.shard_numel);
    const auto pp = static_cast<std::int64_t>(g.padded_numel);
    total += 12 * s;                                         // master, AdamW m and v
    if (st.shard_scope != comm::ShardScope::self) total += 4 * s;  // the reduced gradient shard
    if (st.grads_whole) total += 4 * pp;                     // full gradients
    if (st.params_whole && !master_is_compute) total += bc * pp;  // full compute parameters
  }
  return total;
}

std::int64_t outer_state_bytes(const UnitSizes& units, int shard_size, bool overlap) {
  std::int64_t bytes = 0;
  const auto n = static_cast<std::size_t>(shard_size);
  const std::size_t per_element = overlap ? 16 : 12;
  for (const std::size_t numel : units.numel) bytes += static_cast<std::int64_t>(per_element * ((numel + n - 1) / n));
  return bytes;
}

std::int64_t model_state_bytes(const model::ModelLayout& layout, Sharding strategy, int shard_size,
                               DType param_dtype, DType compute_dtype) {
  return model_state_bytes(UnitSizes::of(layout), strategy, shard_size, param_dtype, compute_dtype);
}

void for_each_collective(const UnitSizes& units, const EngineOptions& o, const MeshGroups& g,
                         const std::function<void(const CollectiveCall&)>& visit) {
  const Strategy& st = strategy(o.strategy);
  const std::size_t bp = size_of(o.param_dtype);
  const std::size_t br = size_of(o.reduce_dtype);
  const int k = o.grad_accum;
  const int n_units = static_cast<int>(units.numel.size());
  const int final_unit = n_units - 1;
  const int nodes = g.cross_node.size();
  const int p = g.node.size();
  auto on = [&](const GroupView& group, Collective op, std::size_t count, std::size_t bytes, int times, int unit,
                Phase phase) {
    if (times > 0) visit({&group, op, count, bytes, times, unit, phase});
  };
  if (st.shard_scope == comm::ShardScope::self) {
    const bool hierarchical = g.nodes_equal_size && hierarchical_ddp(nodes, p);
    for (const Bucket& b : make_buckets(units.numel, o.bucket_mb)) {
      if (!hierarchical) {
        on(g.replicate, Collective::all_reduce, b.count, br, 1, b.first_unit, Phase::bucket_reduce);
        continue;
      }
      const std::size_t block = (b.count + static_cast<std::size_t>(p) - 1) / static_cast<std::size_t>(p);
      on(g.node, Collective::reduce_scatter, block, br, 1, b.first_unit, Phase::bucket_reduce);
      on(g.cross_node, Collective::all_reduce, block, br, 1, b.first_unit, Phase::cross_node_reduce);
      on(g.node, Collective::all_gather, block, br, 1, b.first_unit, Phase::bucket_gather);
    }
    return;
  }
  const ZeroPPOptions& z = o.zeropp;
  const bool hpz = z.hpz_partition_size > 0;
  for (int u = 0; u < n_units; ++u) {
    const auto geo = UnitGeometry::make(units.numel[static_cast<std::size_t>(u)], g.shard.size(), 0);
    const std::size_t s = geo.shard_numel;
    const bool block = u >= 1 && u < final_unit;
    // The embedding is gathered for the embedding and again for a tied head; with hpZ the second gather reads the
    // embedding's secondary slice inside the node.
    const bool head_regather = st.free_after_forward && u == 0 && units.tied_head;
    const std::size_t hpz_slice = geo.padded_numel / static_cast<std::size_t>(g.hpz.size());
    if (!st.params_whole) {
      const int shard_gathers = (head_regather && !hpz) ? 2 : 1;
      if (z.quantized_weights) {
        on(g.shard, Collective::all_gather, message_bytes(s, {quant::Bits::int8, z.block}), 1, shard_gathers * k, u,
           Phase::forward_gather);
      } else {
        on(g.shard, Collective::all_gather, s, bp, shard_gathers * k, u, Phase::forward_gather);
      }
      if (head_regather && hpz) on(g.hpz, Collective::all_gather, hpz_slice, bp, k, u, Phase::forward_gather);
    }
    if (st.free_after_forward && block) {
      if (hpz) {
        on(g.hpz, Collective::all_gather, hpz_slice, bp, k, u, Phase::backward_gather);
      } else {
        on(g.shard, Collective::all_gather, s, bp, k, u, Phase::backward_gather);
      }
    }
    const int reductions = st.reduce_every_micro_batch ? k : 1;
    const std::size_t m = message_bytes(s, {z.grad_bits, z.block});
    if (z.quantized_gradients && st.hybrid) {
      on(g.shard, Collective::all_to_all, m, 1, reductions, u, Phase::reduce);
    } else if (z.quantized_gradients && nodes > 1) {
      if (p > 1) on(g.node, Collective::all_to_all, static_cast<std::size_t>(nodes) * m, 1, reductions, u, Phase::reduce);
      on(g.cross_node, Collective::all_to_all, m, 1, reductions, u, Phase::reduce);
    } else {
      on(g.shard, Collective::reduce_scatter, s, br, reductions, u, Phase::reduce);
    }
    if (st.hybrid) on(g.replicate, Collective::all_reduce, s, br, 1, u, Phase::cross_node_reduce);
    if (st.gather_after_step) on(g.shard, Collective::all_gather, s, bp, 1, u, Phase::post_step_gather);
  }
}

comm::ByteCounters step_traffic(const UnitSizes& units, const EngineOptions& options, const MeshGroups& g) {
  comm::ByteCounters c;
  for_each_collective(units, options, g, [&](const CollectiveCall& call) {
    const comm::LinkBytes bytes =
        comm::traffic_bytes(call.op, call.count, call.elem_bytes, call.group->rank, call.group->node_of_rank);
    for (int i = 0; i < call.times; ++i) c.record(call.op, bytes);
  });
  return c;
}

comm::ByteCounters step_traffic(const model::ModelLayout& layout, const EngineOptions& options, const MeshGroups& g) {
  return step_traffic(UnitSizes::of(layout), options, g);
}

std::int64_t transient_bytes(const UnitSizes& units, const EngineOptions& o, int shard_size, int nodes,
                             int ranks_per_node) {
  std::int64_t padded_total = 0, shard_total = 0, largest = 0, hpz_units = 0;
  const int n_units = static_cast<int>(units.numel.size());
  for (int u = 0; u < n_units; ++u) {
    const auto geo = UnitGeometry::make(units.numel[static_cast<std::size_t>(u)], shard_size, 0);
    const auto pp = static_cast<std::int64_t>(geo.padded_numel);
    padded_total += pp;
    shard_total += static_cast<std::int64_t>(geo.shard_numel);
    largest = std::max(largest, pp);
    const bool block = u >= 1 && u < n_units - 1;
    if (block || (u == 0 && units.tied_head)) hpz_units += pp;
  }
  const auto bp = static_cast<std::int64_t>(size_of(o.param_dtype));
  const auto br = static_cast<std::int64_t>(size_of(o.reduce_dtype));
  const auto bc = static_cast<std::int64_t>(size_of(o.compute_dtype));
  const Strategy& st = strategy(o.strategy);
  const bool keeps_gathered = !st.params_whole && !st.free_after_forward;
  std::int64_t bytes = 0;
  if (keeps_gathered)
    bytes += bc * padded_total;
  else if (!st.params_whole)
    bytes += 3 * bc * largest;
  if (!st.params_whole) {
    bytes += (o.grad_accum > 1 && !st.reduce_every_micro_batch) ? 4 * padded_total : 3 * 4 * largest;
    // Each gather in flight (at most 3: a gathered copy outlives its gather's staging) stages, for the largest
    // unit: exact, param dtype not fp32: its shard converted, and the whole received when the compute dtype differs;
    // qwZ (forward): the int8 shard, the n received, and one slice's fp32 values when the compute dtype is not
    // fp32; hpZ
    // (backward): the whole received when the compute dtype differs from the param dtype.
    const std::int64_t shard = largest / shard_size;
    const bool converts = o.param_dtype != o.compute_dtype;
    std::int64_t gather = 0;
    if (bp != 4) gather = bp * shard + (converts ? bp * largest : 0);
    if (o.zeropp.quantized_weights) {
      const auto msg = static_cast<std::int64_t>(
          message_bytes(static_cast<std::size_t>(shard), {quant::Bits::int8, o.zeropp.block}));
      gather = std::max(gather, (1 + shard_size) * msg + (o.compute_dtype != DType::f32 ? 4 * shard : 0));
    }
    bytes += 3 * gather;
  }
  const bool hierarchical = st.shard_scope == comm::ShardScope::self && hierarchical_ddp(nodes, ranks_per_node);
  if (hierarchical) {  // each bucket: the whole, padded to p blocks, and this rank's block (engine_impl.hpp)
    const auto p = static_cast<std::size_t>(ranks_per_node);
    for (const Bucket& b : make_buckets(units.numel, o.bucket_mb)) {
      const std::size_t block = (b.count + p - 1) / p;
      bytes += br * static_cast<std::int64_t>(block * p + block);
    }
  } else if (br != 4) {
    bytes += br * (st.params_whole ? padded_total : 3 * largest);
  }
  // qgZ (when it quantizes: hybrid, or nodes > 1) keeps an fp32 sum per unit where the reduce-scatter keeps its
  // receive buffer, and each reduction in flight (3 units) holds its hops' messages: the last hop's send and receive
  // (nodes' slices; hybrid: one per shard rank), and with p > 1 ranks per node the first hop's (p x nodes).
  const bool qgz = o.zeropp.quantized_gradients && !st.params_whole && (st.hybrid || nodes > 1);
  if (qgz) {
    const std::int64_t largest_shard = largest / shard_size;
    const auto msg = static_cast<std::int64_t>(
        message_bytes(static_cast<std::size_t>(largest_shard), {o.zeropp.grad_bits, o.zeropp.block}));
    const std::int64_t hop_nodes = st.hybrid ? shard_size : nodes;
    const std::int64_t hop_p = st.hybrid ? 1 : ranks_per_node;
    bytes += 4 * shard_total + 3 * (2 * hop_nodes * msg + (hop_p > 1 ? 2 * hop_p * hop_nodes * msg : 0));
  } else if (st.shard_scope != comm::ShardScope::self) {
    bytes += br * shard_total;
  }
  if (o.zeropp.hpz_partition_size > 0) bytes += bp * hpz_units / o.zeropp.hpz_partition_size;
  return bytes + kStepScalarBytes;
}

}  // namespace hsdp::shard
