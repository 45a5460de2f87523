#pragma once
// The sharding engine's internals (private to src/shard): gathers of parameters, reductions of gradients and the
// bookkeeping of collectives in flight. Engine (engine.cpp) drives them unit by unit.
#include <algorithm>
#include <deque>
#include <functional>
#include <memory>
#include <optional>

#include "hsdp/core/error.hpp"
#include "hsdp/core/timer.hpp"
#include "hsdp/shard/buckets.hpp"
#include "hsdp/shard/device.hpp"
#include "hsdp/shard/engine.hpp"

namespace hsdp::shard {

namespace detail {

// A collective in flight plus what to do when it completes (unpack, accumulate, free).
struct InFlight {
  comm::CommHandle handle;
  double issued_at = 0;
  std::function<void()> on_complete;
};

// Device storage shared by a collective and the work that follows it (std::function needs copyable captures).
using SharedBytes = std::shared_ptr<DeviceArray<std::byte>>;

}  // namespace detail

using detail::InFlight;
using detail::SharedBytes;

struct Engine::Impl {
  comm::ProcessMesh& mesh;
  EngineOptions o;
  Device& dev;
  std::vector<std::unique_ptr<FlatParamUnit>>& units;
  StepTiming& timing;
  int n_layer;
  int n_units;

  const Logger* log;
  const Strategy& st;        // what the strategy means (strategy.hpp)
  bool persistent_full;      // full parameters live on every rank between steps
  bool free_after_forward;   // free after forward, gather again for backward
  bool hybrid;
  bool replicated;           // shard group of one (no_shard): whole gradients reduced in buckets over the world
  bool hierarchical = false; // replicated on several nodes of several ranks (equal sizes): buckets reduce-scattered
                             // in the node, all-reduced across nodes, all-gathered in the node

  // Persistent full compute parameters [Pp] (zero1; no_shard when rounding to a lower precision).
  std::vector<DeviceArray<float>> persistent_params;
  // Transient gathered parameters [Pp] of sharded strategies (empty when not gathered), with their gather in flight.
  std::vector<DeviceArray<float>> gathered;
  std::vector<std::optional<InFlight>> gathering;
  // Full fp32 gradients [Pp]: one flat allocation for no_shard (buckets are ranges of it), persistent per unit for
  // zero1, transient per unit for the sharded strategies.
  DeviceArray<float> flat_grads;
  std::vector<std::size_t> flat_offset;
  std::vector<DeviceArray<float>> unit_grads;
  std::vector<Bucket> buckets;
  std::vector<int> bucket_pending_units;
  std::deque<InFlight> reductions;

  // ZeRO++
  bool qwz = false, hpz = false, qgz = false;
  bool qgz_exact_fallback = false;  // one node: nothing crosses nodes, the exact reduce-scatter is used
  std::vector<SharedBytes> secondary;  // hpZ: this rank's 1/k slice of each block, fwd -> bwd
  bool local_nonfinite = false;  // fp16 + qgZ: non-finite gradients seen before quantizing (the step is skipped)
  // The last optimizer step zeroed the reduced gradients (the flat gradients of no_shard, the gradient shards) in its
  // AdamW pass, so begin_step need not clear them again.
  bool reduced_grads_zero = false;
  std::vector<std::vector<int>> shard_rank_at;  // [node][local] -> shard rank (full_shard qgZ)

  Impl(const model::ModelLayout& l, comm::ProcessMesh& m, const EngineOptions& options, Device& device,
       std::vector<std::unique_ptr<FlatParamUnit>>& u, StepTiming& t, const Logger* logger)
      : mesh(m), o(options), dev(device), units(u), timing(t), n_layer(l.config().n_layer),
        n_units(l.num_units()), log(logger), st(strategy(options.strategy)) {
    persistent_full = st.params_whole;
    free_after_forward = st.free_after_forward;
    hybrid = st.hybrid;
    replicated = st.shard_scope == comm::ShardScope::self;
    const comm::Topology& topo = m.topology();
    hierarchical = replicated && topo.nodes_equal_size() && hierarchical_ddp(topo.num_nodes(), topo.node_size(0));
  }

  comm::Communicator& shard() { return mesh.shard(); }
  comm::Communicator& replicate() { return mesh.replicate(); }
  const UnitGeometry& geo(int u) const { return units[static_cast<std::size_t>(u)]->geometry; }
  FlatParamUnit& unit(int u) { return *units[static_cast<std::size_t>(u)]; }
  SharedBytes staging(std::size_t count, DType t, MemCategory category = MemCategory::comm_buffers) {
    return std::make_shared<DeviceArray<std::byte>>(dev.typed(count, t, category));
  }

  // ---- completion of collectives ----------------------------------------------------------------------
  // This step's collectives as (issue, observed completion) in seconds; settle_timing() turns them into comm_ms.
  std::vector<std::pair<double, double>> in_flight;
  void settle_timing() {
    std::sort(in_flight.begin(), in_flight.end());
    double covered = 0, begin = 0, end = -1;
    for (const auto& [b, e] : in_flight) {
      if (b > end) {
        covered += std::max(0.0, end - begin);
        begin = b;
      }
      end = std::max(end, e);
    }
    covered += std::max(0.0, end - begin);
    timing.comm_ms = 1e3 * covered;
  }
  void complete(InFlight& op, bool blocking) {
    if (blocking) {
      Stopwatch waited;
      op.handle.wait();
      timing.exposed_comm_ms += waited.milliseconds();
    }
    in_flight.emplace_back(op.issued_at, monotonic_seconds());
    if (op.on_complete) op.on_complete();
  }
  // A blocking collective of `seconds` that ended now: in flight and exposed for all of it.
  void blocked_for(double seconds) {
    const double now = monotonic_seconds();
    in_flight.emplace_back(now - seconds, now);
    timing.exposed_comm_ms += 1e3 * seconds;
  }
  InFlight issue(comm::CommHandle handle, std::function<void()> on_complete) {
    return InFlight{std::move(handle), monotonic_seconds(), std::move(on_complete)};
  }
  // Lets pending nonblocking collectives progress, completing those that are done (in issue order).
  void poll() {
    for (auto& g : gathering) {
      if (g && g->handle.done()) {
        complete(*g, false);
        g.reset();
      }
    }
    while (!reductions.empty() && reductions.front().handle.done()) {
      complete(reductions.front(), false);
      reductions.pop_front();
    }
  }
  void drain_reductions() {
    while (!reductions.empty()) {
      InFlight op = std::move(reductions.front());
      reductions.pop_front();
      complete(op, true);
    }
  }

  // ---- parameters -------------------------------------------------------------------------------------
  bool is_block(int u) const { return u >= 1 && u <= n_layer; }
  quant::QuantSpec weight_spec() const { return {quant::Bits::int8, o.zeropp.block}; }
  quant::QuantSpec grad_spec() const { return {o.zeropp.grad_bits, o.zeropp.block}; }

  // hpZ: keep this rank's slice of the gathered block for the backward gather inside the hpZ group.
  void keep_secondary(int u, const float* full) {
    const std::size_t slice = geo(u).padded_numel / static_cast<std::size_t>(mesh.hpz().size());
    SharedBytes copy = staging(slice, o.param_dtype, MemCategory::hpz_secondary);
    const std::size_t begin = slice * static_cast<std::size_t>(mesh.hpz().rank());
    dev.convert(full + begin, DType::f32, copy->data(), o.param_dtype, slice);
    secondary[static_cast<std::size_t>(u)] = std::move(copy);
  }

  // Gathers unit u's weights into `dest` [Pp] fp32 (async): from the hpZ secondary group when the unit's secondary
  // slice exists (a block's backward, the embedding's second use at the head), else over the shard group: int8
  // blocks with qwZ for forward gathers, else o.param_dtype.
  InFlight gather_into(int u, float* dest, bool for_backward = false) {
    const UnitGeometry& g = geo(u);
    FlatParamUnit& fp = unit(u);
    const std::size_t padded = g.padded_numel;
    const DType t = o.param_dtype;
    auto& second = secondary[static_cast<std::size_t>(u)];
    if (hpz && second) {
      const std::size_t slice = padded / static_cast<std::size_t>(mesh.hpz().size());
      SharedBytes recv = staging(padded, t);
      auto handle = mesh.hpz().all_gather_async(second->data(), recv->data(), slice, t);
      return issue(std::move(handle), [this, recv, dest, padded, t]() mutable {
        dev.convert(recv->data(), t, dest, DType::f32, padded);
        recv.reset();
      });
    }
    const bool keep = hpz && (is_block(u) || u == 0);
    if (qwz && !for_backward) {
      const quant::QuantSpec spec = weight_spec();
      const std::size_t s = g.shard_numel;
      const std::size_t m = message_bytes(s, spec);
      const auto n = static_cast<std::size_t>(shard().size());
      SharedBytes send = staging(m, DType::u8);
      SharedBytes recv = staging(m * n, DType::u8);
      dev.quantize(fp.master.data(), s, spec, reinterpret_cast<std::uint8_t*>(send->data()));
      auto handle = shard().all_gather_async(send->data(), recv->data(), m, DType::u8);
      return issue(std::move(handle), [this, send, recv, dest, s, m, n, spec, t, u, keep, padded]() mutable {
        const auto* bytes = reinterpret_cast<const std::uint8_t*>(recv->data());
        for (std::size_t j = 0; j < n; ++j) dev.dequantize(bytes + j * m, s, spec, dest + j * s);
        dev.round_to(dest, padded, t);
        send.reset();
        recv.reset();
        if (keep) keep_secondary(u, dest);
      });
    }
    if (t == DType::f32) {
      return issue(shard().all_gather_async(fp.master.data(), dest, g.shard_numel, DType::f32),
                   [this, u, dest, keep] {
                     if (keep) keep_secondary(u, dest);
                   });
    }
    SharedBytes send = staging(g.shard_numel, t);
    SharedBytes recv = staging(padded, t);
    dev.convert(fp.master.data(), DType::f32, send->data(), t, g.shard_numel);
    auto handle = shard().all_gather_async(send->data(), recv->data(), g.shard_numel, t);
    return issue(std::move(handle), [this, send, recv, dest, padded, t, u, keep]() mutable {
      dev.convert(recv->data(), t, dest, DType::f32, padded);
      send.reset();
      recv.reset();
      if (keep) keep_secondary(u, dest);
    });
  }
  void prefetch(int u, bool for_backward = false) {
    if (persistent_full || u < 0 || u >= n_units) return;
    auto& slot = gathered[static_cast<std::size_t>(u)];
    if (!slot.empty()) return;
    slot = dev.array<float>(geo(u).padded_numel, MemCategory::params);
    gathering[static_cast<std::size_t>(u)] = gather_into(u, slot.data(), for_backward);
  }
  void ensure(int u, bool for_backward = false) {
    if (persistent_full) return;
    prefetch(u, for_backward);
    auto& op = gathering[static_cast<std::size_t>(u)];
    if (op) {
      complete(*op, true);
      op.reset();
    }
  }
  void maybe_prefetch(int u, bool for_backward = false) {
    if (o.prefetch) prefetch(u, for_backward);
  }
  // after_backward: the unit is done for this micro-batch (its hpZ secondary slice goes too).
  void release(int u, bool after_backward = true) {
    if (persistent_full) return;
    if (after_backward) secondary[static_cast<std::size_t>(u)].reset();
    auto& op = gathering[static_cast<std::size_t>(u)];
    if (op) {  // never freed while its gather is in flight
      complete(*op, true);
      op.reset();
    }
    gathered[static_cast<std::size_t>(u)].reset();
  }
  const float* params(int u) {
    if (replicated && o.param_dtype == DType::f32) return unit(u).master.data();
    if (persistent_full) return persistent_params[static_cast<std::size_t>(u)].data();
    return gathered[static_cast<std::size_t>(u)].data();
  }

  // ---- gradients --------------------------------------------------------------------------------------
  float* grads(int u) {
    if (replicated) return flat_grads.data() + flat_offset[static_cast<std::size_t>(u)];
    auto& b = unit_grads[static_cast<std::size_t>(u)];
    if (b.empty()) b = dev.array<float>(geo(u).padded_numel, MemCategory::grads);
    return b.data();
  }
  // Called when unit u's gradient of this micro-batch is complete.
  void unit_backward_done(int u, bool last) {
    if (replicated) {
      if (!last) return;
      for (std::size_t b = 0; b < buckets.size(); ++b) {
        if (u >= buckets[b].first_unit && u <= buckets[b].last_unit && --bucket_pending_units[b] == 0) {
          reduce_bucket(buckets[b]);
        }
      }
      return;
    }
    if (!last && !st.reduce_every_micro_batch) return;  // accumulate locally; reduce after the last micro-batch
    reduce_scatter_unit(u, last);
  }
  // In-place average over `group` in o.reduce_dtype, queued as a reduction.
  void all_reduce_range(float* data, std::size_t count, comm::Communicator& group, bool queue) {
    InFlight op;
    if (o.reduce_dtype == DType::f32) {
      op = issue(group.all_reduce_async(data, data, count, DType::f32, comm::ReduceOp::avg), nullptr);
    } else {
      const DType t = o.reduce_dtype;
      SharedBytes reduced = staging(count, t);
      dev.convert(data, DType::f32, reduced->data(), t, count);
      op = issue(group.all_reduce_async(reduced->data(), reduced->data(), count, t, comm::ReduceOp::avg),
                 [this, reduced, data, count, t]() mutable {
                   dev.convert(reduced->data(), t, data, DType::f32, count);
                   reduced.reset();
                 });
    }
    if (queue) {
      reductions.push_back(std::move(op));
    } else {
      complete(op, true);
    }
  }
  // no_shard: the bucket's gradients averaged over the world, queued. Flat: one all-reduce. Hierarchical: a
  // reduce-scatter over the node into 1/p of the (padded) bucket, an all-reduce of that shard across nodes, an
  // all-gather over the node (on node_gather: see mesh.hpp), each issued when the one before completes.
  void reduce_bucket(const Bucket& b) {
    float* data = flat_grads.data() + b.offset;
    if (!hierarchical) {
      all_reduce_range(data, b.count, replicate(), true);
      return;
    }
    const std::size_t count = b.count;
    const auto p = static_cast<std::size_t>(mesh.node().size());
    const std::size_t block = (count + p - 1) / p;
    const DType t = o.reduce_dtype;
    SharedBytes whole = staging(block * p, t);  // zeroed: the padding beyond the bucket stays 0
    SharedBytes part = staging(block, t);
    dev.convert(data, DType::f32, whole->data(), t, count);
    auto gathered = [this, whole, part, data, count, t]() mutable {
      dev.convert(whole->data(), t, data, DType::f32, count);
      whole.reset();
      part.reset();
    };
    auto across = [this, whole, part, block, t, gathered]() mutable {
      reductions.push_back(issue(mesh.node_gather().all_gather_async(part->data(), whole->data(), block, t),
                                 std::move(gathered)));
    };
    auto scattered = [this, part, block, t, across]() mutable {
      reductions.push_back(issue(mesh.cross_node().all_reduce_async(part->data(), part->data(), block, t,
                                                                    comm::ReduceOp::avg),
                                 std::move(across)));
    };
    reductions.push_back(issue(mesh.node().reduce_scatter_async(whole->data(), part->data(), block, t,
                                                                comm::ReduceOp::avg),
                               std::move(scattered)));
  }
  void reduce_scatter_unit(int u, bool last) {
    if (qgz && !qgz_exact_fallback) {
      quantized_reduce_scatter(u, last);
      return;
    }
    const UnitGeometry& g = geo(u);
    float* full = grads(u);
    const DType t = o.reduce_dtype;
    SharedBytes recv = staging(g.shard_numel, t);
    SharedBytes send;
    const void* send_data = full;
    if (t != DType::f32) {
      send = staging(g.padded_numel, t);
      dev.convert(full, DType::f32, send->data(), t, g.padded_numel);
      send_data = send->data();
    }
    // zero1 keeps its full gradients for the next step (zeroed in begin_step); the others free them once sent.
    const bool free_full = !st.grads_whole;
    auto handle = shard().reduce_scatter_async(send_data, recv->data(), g.shard_numel, t, comm::ReduceOp::avg);
    FlatParamUnit* fp = &unit(u);
    const bool cross_replicas = hybrid && last;
    reductions.push_back(issue(std::move(handle), [this, fp, recv, send, t, u, free_full, cross_replicas]() mutable {
      const std::size_t s = fp->geometry.shard_numel;
      if (t == DType::f32) {
        dev.accumulate(fp->grad_shard.data(), reinterpret_cast<const float*>(recv->data()), s, 1.0f);
      } else {
        DeviceArray<float> reduced = dev.array<float>(s, MemCategory::comm_buffers);
        dev.convert(recv->data(), t, reduced.data(), DType::f32, s);
        dev.accumulate(fp->grad_shard.data(), reduced.data(), s, 1.0f);
      }
      recv.reset();
      send.reset();
      if (free_full) unit_grads[static_cast<std::size_t>(u)].reset();
      if (cross_replicas) all_reduce_range(fp->grad_shard.data(), s, replicate(), true);
    }));
  }

  // qgZ (zeropp.hpp): the unit's gradient reduced to this rank's shard through quantized all-to-alls. Blocking: the
  // hops depend on each other; the time shows as exposed communication.
  void quantized_reduce_scatter(int u, bool last) {
    const UnitGeometry& g = geo(u);
    float* full = grads(u);
    const std::size_t s = g.shard_numel;
    const quant::QuantSpec spec = grad_spec();
    if (o.param_dtype == DType::f16 && !dev.all_finite(full, g.padded_numel)) {
      // fp16 overflow: quantizing would throw on this rank only. Send zeros, remember, let the scaler skip the step.
      local_nonfinite = true;
      dev.fill_zero(full, g.padded_numel * sizeof(float));
    }
    DeviceArray<float> shard_sum = dev.array<float>(s, MemCategory::comm_buffers);
    const std::span<const float> gradient(full, g.padded_numel);
    const std::span<float> sum(shard_sum.data(), s);
    Stopwatch waited;  // the hops are blocking collectives: their time is exposed communication
    if (hybrid) {
      qgz_one_hop(dev, gradient, sum, spec, shard());
    } else {
      qgz_two_hop(dev, gradient, sum, spec, mesh.node(), mesh.cross_node(), shard_rank_at);
    }
    blocked_for(waited.seconds());
    const float inverse = 1.0f / static_cast<float>(shard().size());
    FlatParamUnit& fp = unit(u);
    dev.accumulate(fp.grad_shard.data(), shard_sum.data(), s, inverse);
    if (!st.grads_whole) unit_grads[static_cast<std::size_t>(u)].reset();
    if (hybrid && last) all_reduce_range(fp.grad_shard.data(), s, replicate(), true);
  }
};

}  // namespace hsdp::shard
