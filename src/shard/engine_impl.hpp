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
#include "hsdp/shard/engine.hpp"

namespace hsdp::shard {

namespace detail {

// A collective in flight plus what to do when it completes (unpack, accumulate, free).
struct InFlight {
  comm::CommHandle handle;
  double issued_at = 0;
  std::function<void()> on_complete;
};

// Raw storage for a buffer of `count` elements of `dtype`, charged to `category`.
struct TypedBuffer {
  Buffer<std::byte> bytes;
  TypedBuffer(std::size_t count, DType t, MemoryAccountant& memory, MemCategory category)
      : bytes(count * size_of(t), memory, category) {}
  void* data() { return bytes.data(); }
};

}  // namespace detail

using detail::InFlight;
using detail::TypedBuffer;

struct Engine::Impl {
  comm::ProcessMesh& mesh;
  EngineOptions o;
  MemoryAccountant& memory;
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
  std::vector<Buffer<float>> persistent_params;
  // Transient gathered parameters [Pp] of sharded strategies, with their gather in flight if any.
  std::vector<std::optional<Buffer<float>>> gathered;
  std::vector<std::optional<InFlight>> gathering;
  // Full fp32 gradients [Pp]: one flat allocation for no_shard (buckets are ranges of it), persistent per unit for
  // zero1, transient per unit for the sharded strategies.
  Buffer<float> flat_grads;
  std::vector<std::size_t> flat_offset;
  std::vector<Buffer<float>> unit_grads;
  std::vector<Bucket> buckets;
  std::vector<int> bucket_pending_units;
  std::deque<InFlight> reductions;

  // ZeRO++
  bool qwz = false, hpz = false, qgz = false;
  bool qgz_exact_fallback = false;  // one node: nothing crosses nodes, the exact reduce-scatter is used
  std::vector<std::shared_ptr<TypedBuffer>> secondary;  // hpZ: this rank's 1/k slice of each block, fwd -> bwd
  bool local_nonfinite = false;  // fp16 + qgZ: non-finite gradients seen before quantizing (the step is skipped)
  std::vector<std::vector<int>> shard_rank_at;  // [node][local] -> shard rank (full_shard qgZ)

  Impl(const model::ModelLayout& l, comm::ProcessMesh& m, const EngineOptions& options, MemoryAccountant& mem,
       std::vector<std::unique_ptr<FlatParamUnit>>& u, StepTiming& t, const Logger* logger)
      : mesh(m), o(options), memory(mem), units(u), timing(t), n_layer(l.config().n_layer),
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

  // ---- completion of collectives ----------------------------------------------------------------------
  void complete(InFlight& op, bool blocking) {
    if (blocking) {
      Stopwatch waited;
      op.handle.wait();
      timing.exposed_comm_ms += waited.milliseconds();
    }
    timing.comm_ms += 1e3 * (monotonic_seconds() - op.issued_at);
    if (op.on_complete) op.on_complete();
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
    auto copy = std::make_shared<TypedBuffer>(slice, o.param_dtype, memory, MemCategory::hpz_secondary);
    const std::size_t begin = slice * static_cast<std::size_t>(mesh.hpz().rank());
    convert_from_f32(std::span<const float>(full + begin, slice), copy->data(), o.param_dtype);
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
      auto recv = std::make_shared<TypedBuffer>(padded, t, memory, MemCategory::comm_buffers);
      auto handle = mesh.hpz().all_gather_async(second->data(), recv->data(), slice, t);
      return issue(std::move(handle), [recv, dest, padded, t]() mutable {
        convert_to_f32(recv->data(), t, std::span<float>(dest, padded));
        recv.reset();
      });
    }
    const bool keep = hpz && (is_block(u) || u == 0);
    if (qwz && !for_backward) {
      const quant::QuantSpec spec = weight_spec();
      const std::size_t s = g.shard_numel;
      const std::size_t m = message_bytes(s, spec);
      const auto n = static_cast<std::size_t>(shard().size());
      auto send = std::make_shared<TypedBuffer>(m, DType::u8, memory, MemCategory::comm_buffers);
      auto recv = std::make_shared<TypedBuffer>(m * n, DType::u8, memory, MemCategory::comm_buffers);
      pack_message(fp.master.span(), spec, static_cast<std::uint8_t*>(send->data()));
      auto handle = shard().all_gather_async(send->data(), recv->data(), m, DType::u8);
      return issue(std::move(handle), [this, send, recv, dest, s, m, n, spec, t, u, keep, padded]() mutable {
        const auto* bytes = static_cast<const std::uint8_t*>(recv->data());
        for (std::size_t j = 0; j < n; ++j) {
          quant::dequantize(message_view(bytes + j * m, s, spec), std::span<float>(dest + j * s, s));
        }
        round_to(std::span<float>(dest, padded), t);
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
    auto send = std::make_shared<TypedBuffer>(g.shard_numel, t, memory, MemCategory::comm_buffers);
    auto recv = std::make_shared<TypedBuffer>(padded, t, memory, MemCategory::comm_buffers);
    convert_from_f32(fp.master.span(), send->data(), t);
    auto handle = shard().all_gather_async(send->data(), recv->data(), g.shard_numel, t);
    return issue(std::move(handle), [this, send, recv, dest, padded, t, u, keep]() mutable {
      convert_to_f32(recv->data(), t, std::span<float>(dest, padded));
      send.reset();
      recv.reset();
      if (keep) keep_secondary(u, dest);
    });
  }
  void prefetch(int u, bool for_backward = false) {
    if (persistent_full || u < 0 || u >= n_units) return;
    auto& slot = gathered[static_cast<std::size_t>(u)];
    if (slot) return;
    slot.emplace(geo(u).padded_numel, memory, MemCategory::params);
    gathering[static_cast<std::size_t>(u)] = gather_into(u, slot->data(), for_backward);
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
    return gathered[static_cast<std::size_t>(u)]->data();
  }

  // ---- gradients --------------------------------------------------------------------------------------
  float* grads(int u) {
    if (replicated) return flat_grads.data() + flat_offset[static_cast<std::size_t>(u)];
    auto& b = unit_grads[static_cast<std::size_t>(u)];
    if (b.empty()) b.reset(geo(u).padded_numel, &memory, MemCategory::grads);
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
      auto staging = std::make_shared<TypedBuffer>(count, o.reduce_dtype, memory, MemCategory::comm_buffers);
      convert_from_f32(std::span<const float>(data, count), staging->data(), o.reduce_dtype);
      const DType t = o.reduce_dtype;
      op = issue(group.all_reduce_async(staging->data(), staging->data(), count, t, comm::ReduceOp::avg),
                 [staging, data, count, t]() mutable {
                   convert_to_f32(staging->data(), t, std::span<float>(data, count));
                   staging.reset();
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
    auto whole = std::make_shared<TypedBuffer>(block * p, t, memory, MemCategory::comm_buffers);
    auto part = std::make_shared<TypedBuffer>(block, t, memory, MemCategory::comm_buffers);
    convert_from_f32(std::span<const float>(data, count), whole->data(), t);
    std::fill(whole->bytes.begin() + static_cast<std::ptrdiff_t>(count * size_of(t)), whole->bytes.end(), std::byte{0});
    auto gathered = [whole, part, data, count, t]() mutable {
      convert_to_f32(whole->data(), t, std::span<float>(data, count));
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
    auto recv = std::make_shared<TypedBuffer>(g.shard_numel, t, memory, MemCategory::comm_buffers);
    std::shared_ptr<TypedBuffer> send;
    const void* send_data = full;
    if (t != DType::f32) {
      send = std::make_shared<TypedBuffer>(g.padded_numel, t, memory, MemCategory::comm_buffers);
      convert_from_f32(std::span<const float>(full, g.padded_numel), send->data(), t);
      send_data = send->data();
    }
    // zero1 keeps its full gradients for the next step (zeroed in begin_step); the others free them once sent.
    const bool free_full = !st.grads_whole;
    auto handle = shard().reduce_scatter_async(send_data, recv->data(), g.shard_numel, t, comm::ReduceOp::avg);
    FlatParamUnit* fp = &unit(u);
    const bool cross_replicas = hybrid && last;
    reductions.push_back(issue(std::move(handle), [this, fp, recv, send, t, u, free_full, cross_replicas]() mutable {
      const std::size_t s = fp->geometry.shard_numel;
      Buffer<float> reduced(s);
      convert_to_f32(recv->data(), t, reduced.span());
      for (std::size_t i = 0; i < s; ++i) fp->grad_shard[i] += reduced[i];
      recv.reset();
      send.reset();
      if (free_full) unit_grads[static_cast<std::size_t>(u)].clear();
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
    if (o.param_dtype == DType::f16 && !quant::all_finite(std::span<const float>(full, g.padded_numel))) {
      // fp16 overflow: quantizing would throw on this rank only. Send zeros, remember, let the scaler skip the step.
      local_nonfinite = true;
      std::fill_n(full, g.padded_numel, 0.0f);
    }
    Buffer<float> shard_sum(s);
    const std::span<const float> gradient(full, g.padded_numel);
    Stopwatch waited;  // the hops are blocking collectives: their time is exposed communication
    if (hybrid) {
      qgz_one_hop(gradient, shard_sum.span(), spec, shard());
    } else {
      qgz_two_hop(gradient, shard_sum.span(), spec, mesh.node(), mesh.cross_node(), shard_rank_at);
    }
    timing.exposed_comm_ms += waited.milliseconds();
    timing.comm_ms += waited.milliseconds();
    const float inverse = 1.0f / static_cast<float>(shard().size());
    FlatParamUnit& fp = unit(u);
    for (std::size_t i = 0; i < s; ++i) fp.grad_shard[i] += shard_sum[i] * inverse;
    if (!st.grads_whole) unit_grads[static_cast<std::size_t>(u)].clear();
    if (hybrid && last) all_reduce_range(fp.grad_shard.data(), s, replicate(), true);
  }
};

}  // namespace hsdp::shard
