#pragma once
// The sharding engine's internals (private to src/shard): gathers of parameters and reductions of gradients as work
// on stream queues (stream_queues.hpp). Engine (engine.cpp) drives them unit by unit.
//
// Queues (docs/architecture.md, "Stream order and the stream checker"):
//   compute   the model's forward and backward, AdamW, the norm and overflow partial sums
//   gather    parameter gathers and the work behind them (convert, dequantize, the hpZ copy)
//   reduce    gradient reductions inside the shard group (reduce-scatter or qgZ, accumulate) and no_shard's buckets
//   cross     the all-reduce across replicas (hybrid), the cross-node hop of hierarchical buckets
//   regather  the node all-gather of hierarchical buckets
// Every buffer the queues touch is tracked by name for the checker; memory goes back to its pool through
// StreamQueues::release after the event that covers its last use.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "hsdp/core/buffer.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/timer.hpp"
#include "hsdp/shard/buckets.hpp"
#include "hsdp/shard/device.hpp"
#include "hsdp/shard/engine.hpp"
#include "hsdp/shard/stream_queues.hpp"

namespace hsdp::shard {

namespace detail {

// Device memory the stream checker follows (id -1 without the checker).
template <typename T>
struct Tracked {
  DeviceArray<T> mem;
  BufferId id = -1;
  T* data() { return mem.data(); }
  bool empty() const { return mem.empty(); }
};

}  // namespace detail

using detail::Tracked;
using Staging = std::shared_ptr<Tracked<std::byte>>;

struct Engine::Impl {
  comm::ProcessMesh& mesh;
  EngineOptions o;
  Device& dev;
  StreamQueues& q;
  std::vector<std::unique_ptr<FlatParamUnit>>& units;
  StepTiming& timing;
  int n_layer;
  int n_units;

  const Logger* log;
  const Strategy& st;        // what the strategy means (strategy.hpp)
  bool persistent_full;      // full parameters live on every rank between steps
  bool free_after_forward;   // free after forward, gather again for backward
  bool hybrid;
  bool unsharded;            // shard group of one (no_shard): whole gradients reduced in buckets over the world
  bool hierarchical = false; // unsharded on several nodes of several ranks (equal sizes): buckets reduce-scattered
                             // in the node, all-reduced across nodes, all-gathered in the node

  QueueId compute, gather, reduce, cross, regather;
  StreamEvent params_updated;  // compute: the last write of the masters (AdamW, a checkpoint load)
  StreamFaults faults;         // tests of the checker only

  // The shard state's buffers, for the checker: master (and AdamW's moments), gradient shard, per unit.
  std::vector<BufferId> master_id, grad_shard_id;
  // Persistent full compute parameters [Pp] (zero1; no_shard when rounding to a lower precision).
  std::vector<Tracked<float>> persistent_params;
  // Transient gathered parameters [Pp] of sharded strategies (empty when not gathered), and the event after their
  // gather (queue -1: none pending).
  std::vector<Tracked<float>> gathered;
  std::vector<StreamEvent> gathered_event;
  // Full fp32 gradients [Pp]: one flat allocation for no_shard (buckets are ranges of it; tracked per unit),
  // persistent per unit for zero1, transient per unit for the sharded strategies.
  DeviceArray<float> flat_grads;
  std::vector<std::size_t> flat_offset;
  std::vector<BufferId> flat_grad_id;
  std::vector<Tracked<float>> unit_grads;
  std::vector<Bucket> buckets;
  std::vector<int> bucket_pending_units;

  // Host copies of the shards (master, m, v per unit) where the device's memory is not the host's: checkpoints.
  std::vector<Buffer<float>> checkpoint_staging;
  // The step's scalars in device memory: [0] loss of the last micro-batch, [1] squared norm, [2] non-finite flag.
  DeviceArray<double> scalars;
  BufferId loss_id = -1, norm_id = -1, flag_id = -1;

  // ZeRO++
  bool qwz = false, hpz = false, qgz = false;
  bool qgz_exact_fallback = false;  // one node: nothing crosses nodes, the exact reduce-scatter is used
  std::vector<Staging> secondary;   // hpZ: this rank's 1/k slice of each block, fwd -> bwd
  // The last optimizer step zeroed the reduced gradients (the flat gradients of no_shard, the gradient shards) in its
  // AdamW pass, so begin_step need not clear them again.
  bool reduced_grads_zero = false;
  std::vector<std::vector<int>> shard_rank_at;  // [node][local] -> shard rank (full_shard qgZ)
  std::vector<std::vector<int>> one_group_at;   // hybrid_shard qgZ: the node's ranks as nodes of one (zeropp.hpp)

  Impl(const model::ModelLayout& l, comm::ProcessMesh& m, const EngineOptions& options, Device& device,
       StreamQueues& queues, std::vector<std::unique_ptr<FlatParamUnit>>& u, StepTiming& t, const Logger* logger)
      : mesh(m), o(options), dev(device), q(queues), units(u), timing(t), n_layer(l.config().n_layer),
        n_units(l.num_units()), log(logger), st(strategy(options.strategy)) {
    persistent_full = st.params_whole;
    free_after_forward = st.free_after_forward;
    hybrid = st.hybrid;
    unsharded = st.shard_scope == comm::ShardScope::self;
    const comm::Topology& topo = m.topology();
    hierarchical = unsharded && topo.nodes_equal_size() && hierarchical_ddp(topo.num_nodes(), topo.node_size(0));
    compute = q.make_queue("compute", QueueRole::compute);
    gather = q.make_queue("gather");
    reduce = q.make_queue("reduce");
    cross = q.make_queue("cross");
    regather = q.make_queue("regather");
    q.on_collective([this](double issued, double completed) { in_flight.emplace_back(issued, completed); });
    scalars = dev.array<double>(3, MemCategory::comm_buffers);
    loss_id = q.track("loss");
    norm_id = q.track("squared norm");
    flag_id = q.track("non-finite flag");
  }

  comm::Communicator& shard() { return mesh.shard(); }
  comm::Communicator& replicate() { return mesh.replicate(); }
  const UnitGeometry& geo(int u) const { return units[static_cast<std::size_t>(u)]->geometry; }
  FlatParamUnit& unit(int u) { return *units[static_cast<std::size_t>(u)]; }
  static std::string name_of(const char* what, int u) { return std::string(what) + " unit " + std::to_string(u); }
  Staging staging(std::size_t count, DType t, std::string name, MemCategory category = MemCategory::comm_buffers) {
    auto s = std::make_shared<Tracked<std::byte>>();
    s->mem = dev.typed(count, t, category);
    s->id = q.track(std::move(name));
    return s;
  }
  // The staging buffer goes back to its pool after `event`.
  void release_after(Staging s, const StreamEvent& event, const std::string& what) {
    const BufferId id = s->id;
    q.release(id, event, what, [s]() mutable { s->mem.reset(); });
  }
  template <typename T>
  void release_after(Tracked<T>& t, const StreamEvent& event, const std::string& what) {
    auto mem = std::make_shared<DeviceArray<T>>(std::move(t.mem));
    q.release(t.id, event, what, [mem] { mem->reset(); });
    t = Tracked<T>{};
  }

  // ---- timing -----------------------------------------------------------------------------------------
  // This step's collectives as (issue, observed completion) in seconds; settle_timing() turns them into comm_ms.
  std::vector<std::pair<double, double>> in_flight;
  double waited_at_step_start = 0;
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
    timing.exposed_comm_ms = 1e3 * (q.host_waited_s() - waited_at_step_start);
  }
  // The host's one read of a step scalar (after everything compute did).
  double read_scalar(int index, BufferId id, const std::string& what) {
    if (!(faults.early_norm_read && id == norm_id)) q.synchronize(q.record(compute));
    q.host_read(id, what);
    double value = 0;
    dev.copy_to_host(&value, scalars.data() + index, sizeof(double));
    return value;
  }
  // The scalar summed over the world (on the reduce queue, after compute; compute then after it).
  void world_sum(double* value, BufferId id, const std::string& what) {
    q.wait(reduce, q.record(compute));
    comm::Communicator& world = mesh.world();
    q.collective(reduce, what, {&world}, {writes(id)},
                 [value, &world] { return world.all_reduce_async(value, value, 1, DType::f64, comm::ReduceOp::sum); });
    q.wait(compute, q.record(reduce));
  }
  // The compute queue after every reduction enqueued so far (the gradients they read, the shards they write).
  void compute_after_reductions() {
    for (const QueueId r : {reduce, cross, regather}) q.wait(compute, q.record(r));
  }

  // ---- parameters -------------------------------------------------------------------------------------
  bool is_block(int u) const { return u >= 1 && u <= n_layer; }
  quant::QuantSpec weight_spec() const { return {quant::Bits::int8, o.zeropp.block}; }
  quant::QuantSpec grad_spec() const { return {o.zeropp.grad_bits, o.zeropp.block}; }

  // Enqueues on the gather queue the gather of unit u's weights into `dest` [Pp] fp32: from the hpZ secondary group
  // when the unit's secondary slice exists (a block's backward, the embedding's second use at the head), else over
  // the shard group: int8 blocks with qwZ for forward gathers, else o.param_dtype. hpZ keeps this rank's slice of a
  // block (and of the embedding) gathered over the shard group. Returns the event after the gather.
  StreamEvent gather_into(int u, Tracked<float>& dest, bool for_backward = false) {
    const UnitGeometry& g = geo(u);
    FlatParamUnit& fp = unit(u);
    const std::size_t padded = g.padded_numel;
    const DType t = o.param_dtype;
    const BufferId master = master_id[static_cast<std::size_t>(u)];
    float* out = dest.data();
    q.wait(gather, params_updated);
    Staging& second = secondary[static_cast<std::size_t>(u)];
    if (hpz && second) {
      const std::size_t slice = padded / static_cast<std::size_t>(mesh.hpz().size());
      Staging recv = staging(padded, t, name_of("hpZ receive", u));
      Staging from = second;
      q.collective(gather, name_of("all_gather (hpZ)", u), {&mesh.hpz()}, {reads(from->id), writes(recv->id)},
                   [this, from, recv, slice, t] {
                     return mesh.hpz().all_gather_async(from->data(), recv->data(), slice, t);
                   });
      q.enqueue(gather, name_of("convert gathered", u), {reads(recv->id), writes(dest.id)},
                [this, recv, out, padded, t] { dev.convert(recv->data(), t, out, DType::f32, padded); });
      const StreamEvent done = q.record(gather);
      release_after(recv, done, name_of("free hpZ receive", u));
      return done;
    }
    const bool keep = hpz && (is_block(u) || u == 0);
    if (qwz && !for_backward) {
      const quant::QuantSpec spec = weight_spec();
      const std::size_t s = g.shard_numel;
      const std::size_t m = message_bytes(s, spec);
      const auto n = static_cast<std::size_t>(shard().size());
      Staging send = staging(m, DType::u8, name_of("qwZ send", u));
      Staging recv = staging(m * n, DType::u8, name_of("qwZ receive", u));
      const float* from = fp.master.data();
      q.enqueue(gather, name_of("quantize", u), {reads(master), writes(send->id)},
                [this, from, s, spec, send] {
                  dev.quantize(from, s, spec, reinterpret_cast<std::uint8_t*>(send->data()));
                });
      q.collective(gather, name_of("all_gather (qwZ)", u), {&shard()}, {reads(send->id), writes(recv->id)},
                   [this, send, recv, m] { return shard().all_gather_async(send->data(), recv->data(), m, DType::u8); });
      q.enqueue(gather, name_of("dequantize", u), {reads(recv->id), writes(dest.id)},
                [this, recv, out, s, m, n, spec, padded, t] {
                  const auto* bytes = reinterpret_cast<const std::uint8_t*>(recv->data());
                  for (std::size_t j = 0; j < n; ++j) dev.dequantize(bytes + j * m, s, spec, out + j * s);
                  dev.round_to(out, padded, t);
                });
      if (keep) keep_secondary(u, dest);
      const StreamEvent done = q.record(gather);
      release_after(send, done, name_of("free qwZ send", u));
      release_after(recv, done, name_of("free qwZ receive", u));
      return done;
    }
    if (t == DType::f32) {
      const float* from = fp.master.data();
      const std::size_t s = g.shard_numel;
      q.collective(gather, name_of("all_gather", u), {&shard()}, {reads(master), writes(dest.id)},
                   [this, from, out, s] { return shard().all_gather_async(from, out, s, DType::f32); });
      if (keep) keep_secondary(u, dest);
      return q.record(gather);
    }
    Staging send = staging(g.shard_numel, t, name_of("gather send", u));
    Staging recv = staging(padded, t, name_of("gather receive", u));
    const float* from = fp.master.data();
    const std::size_t s = g.shard_numel;
    q.enqueue(gather, name_of("convert master", u), {reads(master), writes(send->id)},
              [this, from, send, s, t] { dev.convert(from, DType::f32, send->data(), t, s); });
    q.collective(gather, name_of("all_gather", u), {&shard()}, {reads(send->id), writes(recv->id)},
                 [this, send, recv, s, t] { return shard().all_gather_async(send->data(), recv->data(), s, t); });
    q.enqueue(gather, name_of("convert gathered", u), {reads(recv->id), writes(dest.id)},
              [this, recv, out, padded, t] { dev.convert(recv->data(), t, out, DType::f32, padded); });
    if (keep) keep_secondary(u, dest);
    const StreamEvent done = q.record(gather);
    release_after(send, done, name_of("free gather send", u));
    release_after(recv, done, name_of("free gather receive", u));
    return done;
  }
  // hpZ: this rank's slice of the gathered unit, kept for the backward gather inside the hpZ group.
  void keep_secondary(int u, Tracked<float>& full) {
    const std::size_t slice = geo(u).padded_numel / static_cast<std::size_t>(mesh.hpz().size());
    Staging copy = staging(slice, o.param_dtype, name_of("hpZ secondary", u), MemCategory::hpz_secondary);
    const float* from = full.data() + slice * static_cast<std::size_t>(mesh.hpz().rank());
    const DType t = o.param_dtype;
    q.enqueue(gather, name_of("keep hpZ slice", u), {reads(full.id), writes(copy->id)},
              [this, from, copy, slice, t] { dev.convert(from, DType::f32, copy->data(), t, slice); });
    secondary[static_cast<std::size_t>(u)] = std::move(copy);
  }
  void prefetch(int u, bool for_backward = false) {
    if (persistent_full || u < 0 || u >= n_units) return;
    Tracked<float>& slot = gathered[static_cast<std::size_t>(u)];
    if (!slot.empty()) return;
    slot.mem = dev.array<float>(geo(u).padded_numel, MemCategory::params);
    slot.id = q.track(name_of("gathered", u));
    gathered_event[static_cast<std::size_t>(u)] = gather_into(u, slot, for_backward);
  }
  // The compute queue after unit u's gather.
  void ensure(int u, bool for_backward = false) {
    if (persistent_full) return;
    prefetch(u, for_backward);
    if (faults.skip_gather_wait && u == 1) return;
    q.wait(compute, gathered_event[static_cast<std::size_t>(u)]);
  }
  void maybe_prefetch(int u, bool for_backward = false) {
    if (o.prefetch) prefetch(u, for_backward);
  }
  // The unit is done on compute for now; after_backward: for this micro-batch (its hpZ secondary slice goes too).
  void release(int u, bool after_backward = true) {
    if (persistent_full) return;
    const auto i = static_cast<std::size_t>(u);
    q.wait(compute, gathered_event[i]);  // never freed before its gather is done
    const StreamEvent used = q.record(compute);
    if (after_backward && secondary[i]) {
      release_after(secondary[i], used, name_of("free hpZ secondary", u));
      secondary[i].reset();
    }
    if (!gathered[i].empty()) release_after(gathered[i], used, name_of("free gathered", u));
    gathered_event[i] = StreamEvent{};
  }
  const float* params(int u) {
    if (unsharded && o.param_dtype == DType::f32) return unit(u).master.data();
    if (persistent_full) return persistent_params[static_cast<std::size_t>(u)].data();
    return gathered[static_cast<std::size_t>(u)].data();
  }
  BufferId params_id(int u) {
    if (unsharded && o.param_dtype == DType::f32) return master_id[static_cast<std::size_t>(u)];
    if (persistent_full) return persistent_params[static_cast<std::size_t>(u)].id;
    return gathered[static_cast<std::size_t>(u)].id;
  }

  // ---- gradients --------------------------------------------------------------------------------------
  float* grads(int u) {
    if (unsharded) return flat_grads.data() + flat_offset[static_cast<std::size_t>(u)];
    Tracked<float>& b = unit_grads[static_cast<std::size_t>(u)];
    if (b.empty()) {
      b.mem = dev.array<float>(geo(u).padded_numel, MemCategory::grads);
      b.id = q.track(name_of("gradients", u));
    }
    return b.data();
  }
  BufferId grads_id(int u) {
    if (unsharded) return flat_grad_id[static_cast<std::size_t>(u)];
    grads(u);
    return unit_grads[static_cast<std::size_t>(u)].id;
  }
  std::vector<BufferAccess> bucket_access(const Bucket& b, AccessMode mode) {
    std::vector<BufferAccess> out;
    for (int u = b.first_unit; u <= b.last_unit; ++u) out.push_back({flat_grad_id[static_cast<std::size_t>(u)], mode});
    return out;
  }
  // Called when unit u's gradient of this micro-batch is complete (enqueued on compute).
  void unit_backward_done(int u, bool last) {
    if (unsharded) {
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
  // In-place average over `group` in o.reduce_dtype, on queue `on` (which must already be after the data's writer).
  void all_reduce_range(QueueId on, float* data, std::size_t count, std::vector<BufferAccess> ids,
                        comm::Communicator& group, const std::string& what) {
    std::vector<BufferAccess> rw = ids;
    for (auto& a : rw) a.mode = AccessMode::write;
    if (o.reduce_dtype == DType::f32) {
      q.collective(on, "all_reduce " + what, {&group}, rw, [data, count, &group] {
        return group.all_reduce_async(data, data, count, DType::f32, comm::ReduceOp::avg);
      });
      return;
    }
    const DType t = o.reduce_dtype;
    Staging reduced = staging(count, t, "all_reduce staging " + what);
    std::vector<BufferAccess> convert_in = ids;
    convert_in.push_back(writes(reduced->id));
    q.enqueue(on, "convert " + what, convert_in,
              [this, data, reduced, count, t] { dev.convert(data, DType::f32, reduced->data(), t, count); });
    q.collective(on, "all_reduce " + what, {&group}, {writes(reduced->id)}, [reduced, count, t, &group] {
      return group.all_reduce_async(reduced->data(), reduced->data(), count, t, comm::ReduceOp::avg);
    });
    std::vector<BufferAccess> convert_out = rw;
    convert_out.push_back(reads(reduced->id));
    q.enqueue(on, "convert back " + what, convert_out,
              [this, data, reduced, count, t] { dev.convert(reduced->data(), t, data, DType::f32, count); });
    release_after(reduced, q.record(on), "free all_reduce staging " + what);
  }
  // no_shard: the bucket's gradients averaged over the world. Flat: one all-reduce. Hierarchical: a reduce-scatter
  // over the node into 1/p of the (padded) bucket, an all-reduce of that shard across nodes, an all-gather over the
  // node (on node_gather: see mesh.hpp), each on its own queue after the one before.
  void reduce_bucket(const Bucket& b) {
    float* data = flat_grads.data() + b.offset;
    const std::string what = "bucket of units " + std::to_string(b.first_unit) + "-" + std::to_string(b.last_unit);
    q.wait(reduce, q.record(compute));
    if (!hierarchical) {
      all_reduce_range(reduce, data, b.count, bucket_access(b, AccessMode::write), replicate(), what);
      return;
    }
    const std::size_t count = b.count;
    const auto p = static_cast<std::size_t>(mesh.node().size());
    const std::size_t block = (count + p - 1) / p;
    const DType t = o.reduce_dtype;
    Staging whole = staging(block * p, t, "whole " + what);  // zeroed: the padding beyond the bucket stays 0
    Staging part = staging(block, t, "part " + what);
    std::vector<BufferAccess> in = bucket_access(b, AccessMode::read);
    in.push_back(writes(whole->id));
    q.enqueue(reduce, "convert " + what, in,
              [this, data, whole, count, t] { dev.convert(data, DType::f32, whole->data(), t, count); });
    q.collective(reduce, "reduce_scatter (node) " + what, {&mesh.node()}, {reads(whole->id), writes(part->id)},
                 [this, whole, part, block, t] {
                   return mesh.node().reduce_scatter_async(whole->data(), part->data(), block, t, comm::ReduceOp::avg);
                 });
    q.wait(cross, q.record(reduce));
    q.collective(cross, "all_reduce (cross_node) " + what, {&mesh.cross_node()}, {writes(part->id)},
                 [this, part, block, t] {
                   return mesh.cross_node().all_reduce_async(part->data(), part->data(), block, t, comm::ReduceOp::avg);
                 });
    q.wait(regather, q.record(cross));
    q.collective(regather, "all_gather (node) " + what, {&mesh.node_gather()}, {reads(part->id), writes(whole->id)},
                 [this, whole, part, block, t] {
                   return mesh.node_gather().all_gather_async(part->data(), whole->data(), block, t);
                 });
    std::vector<BufferAccess> out = bucket_access(b, AccessMode::write);
    out.push_back(reads(whole->id));
    q.enqueue(regather, "convert back " + what, out,
              [this, data, whole, count, t] { dev.convert(whole->data(), t, data, DType::f32, count); });
    const StreamEvent done = q.record(regather);
    release_after(whole, done, "free whole " + what);
    release_after(part, done, "free part " + what);
  }
  void reduce_scatter_unit(int u, bool last) {
    q.wait(reduce, q.record(compute));
    if (qgz && !qgz_exact_fallback) {
      quantized_reduce_scatter(u, last);
      return;
    }
    const UnitGeometry& g = geo(u);
    float* full = grads(u);
    const BufferId full_id = grads_id(u);
    const DType t = o.reduce_dtype;
    const std::size_t s = g.shard_numel;
    const std::size_t padded = g.padded_numel;
    Staging recv = staging(s, t, name_of("reduce_scatter receive", u));
    Staging send;
    const void* send_data = full;
    BufferId send_id = full_id;
    if (t != DType::f32) {
      send = staging(padded, t, name_of("reduce_scatter send", u));
      q.enqueue(reduce, name_of("convert gradients", u), {reads(full_id), writes(send->id)},
                [this, full, send, padded, t] { dev.convert(full, DType::f32, send->data(), t, padded); });
      send_data = send->data();
      send_id = send->id;
    }
    q.collective(reduce, name_of("reduce_scatter", u), {&shard()}, {reads(send_id), writes(recv->id)},
                 [this, send, send_data, recv, s, t] {
                   return shard().reduce_scatter_async(send_data, recv->data(), s, t, comm::ReduceOp::avg);
                 });
    FlatParamUnit& fp = unit(u);
    float* shard_grad = fp.grad_shard.data();
    const BufferId shard_id = grad_shard_id[static_cast<std::size_t>(u)];
    if (faults.early_staging_free) release_after(recv, q.record(reduce), name_of("free reduce_scatter receive", u));
    q.enqueue(reduce, name_of("accumulate gradient shard", u), {reads(recv->id), writes(shard_id)},
              [this, shard_grad, recv, s, t] { dev.accumulate_from(shard_grad, recv->data(), t, s, 1.0f); });
    const StreamEvent done = q.record(reduce);
    release_after(recv, done, name_of("free reduce_scatter receive", u));
    if (send) release_after(send, done, name_of("free reduce_scatter send", u));
    // zero1 keeps its full gradients for the next step (zeroed in begin_step); the others free them once sent.
    if (!st.grads_whole) release_after(unit_grads[static_cast<std::size_t>(u)], done, name_of("free gradients", u));
    if (hybrid && last) {
      q.wait(cross, done);
      all_reduce_range(cross, shard_grad, s, {writes(shard_id)}, replicate(), name_of("gradient shard", u));
    }
  }

  // qgZ (zeropp.hpp): the unit's gradient reduced to this rank's shard through quantized all-to-alls, enqueued on
  // the reduce queue as its steps with the hops as nonblocking collectives (full_shard: hop 1 inside the node, hop 2
  // across nodes; hybrid_shard: one hop inside the node).
  void quantized_reduce_scatter(int u, bool last) {
    const UnitGeometry& g = geo(u);
    float* full = grads(u);
    const BufferId full_id = grads_id(u);
    const std::size_t s = g.shard_numel;
    const std::size_t padded = g.padded_numel;
    const quant::QuantSpec spec = grad_spec();
    const std::size_t m = message_bytes(s, spec);
    const std::vector<std::vector<int>>* at = &shard_rank_at;
    comm::Communicator* last_hop = &mesh.cross_node();
    if (hybrid) {
      at = &one_group_at;
      last_hop = &shard();
    }
    const std::size_t nodes = at->size();
    const std::size_t p = at->front().size();
    if (o.param_dtype == DType::f16) {
      // fp16 overflow: quantizing would throw on this rank only. The rank sends zeros and sets the flag, and the
      // scaler skips the step.
      double* flag = scalars.data() + 2;
      q.enqueue(reduce, name_of("overflow check", u), {writes(full_id), writes(flag_id)},
                [this, full, padded, flag] { dev.zero_if_nonfinite(full, padded, flag); });
    }
    Staging sum = staging(s, DType::f32, name_of("qgZ sum", u));
    Staging hop2_send = staging(nodes * m, DType::u8, name_of("qgZ hop-2 send", u));
    Staging hop2_recv = staging(nodes * m, DType::u8, name_of("qgZ hop-2 receive", u));
    auto bytes = [](const Staging& b) { return reinterpret_cast<std::uint8_t*>(b->data()); };
    if (p == 1) {
      q.enqueue(reduce, name_of("qgZ quantize", u), {reads(full_id), writes(hop2_send->id)},
                [this, full, s, spec, at, hop2_send, bytes] { qgz_quantize_slices(dev, full, s, spec, *at, bytes(hop2_send)); });
    } else {
      Staging send = staging(p * nodes * m, DType::u8, name_of("qgZ hop-1 send", u));
      Staging recv = staging(p * nodes * m, DType::u8, name_of("qgZ hop-1 receive", u));
      q.enqueue(reduce, name_of("qgZ quantize", u), {reads(full_id), writes(send->id)},
                [this, full, s, spec, at, send, bytes] { qgz_quantize_slices(dev, full, s, spec, *at, bytes(send)); });
      q.collective(reduce, name_of("qgZ all_to_all (node)", u), {&mesh.node()}, {reads(send->id), writes(recv->id)},
                   [this, send, recv, nodes, m] {
                     return mesh.node().all_to_all_async(send->data(), recv->data(), nodes * m, DType::u8);
                   });
      q.enqueue(reduce, name_of("qgZ requantize", u), {reads(recv->id), writes(hop2_send->id)},
                [this, recv, hop2_send, s, spec, p, nodes, bytes] {
                  qgz_requantize(dev, bytes(recv), s, spec, p, nodes, bytes(hop2_send));
                });
      const StreamEvent requantized = q.record(reduce);
      release_after(send, requantized, name_of("free qgZ hop-1 send", u));
      release_after(recv, requantized, name_of("free qgZ hop-1 receive", u));
    }
    q.collective(reduce, name_of("qgZ all_to_all", u), {last_hop}, {reads(hop2_send->id), writes(hop2_recv->id)},
                 [last_hop, hop2_send, hop2_recv, m] {
                   return last_hop->all_to_all_async(hop2_send->data(), hop2_recv->data(), m, DType::u8);
                 });
    q.enqueue(reduce, name_of("qgZ sum", u), {reads(hop2_recv->id), writes(sum->id)},
              [this, hop2_recv, sum, nodes, s, spec, bytes] {
                qgz_sum(dev, bytes(hop2_recv), nodes, s, spec, reinterpret_cast<float*>(sum->data()));
              });
    const StreamEvent summed = q.record(reduce);
    release_after(hop2_send, summed, name_of("free qgZ hop-2 send", u));
    release_after(hop2_recv, summed, name_of("free qgZ hop-2 receive", u));
    const float inverse = 1.0f / static_cast<float>(shard().size());
    FlatParamUnit& fp = unit(u);
    float* shard_grad = fp.grad_shard.data();
    const BufferId shard_id = grad_shard_id[static_cast<std::size_t>(u)];
    q.enqueue(reduce, name_of("accumulate gradient shard", u), {reads(sum->id), writes(shard_id)},
              [this, shard_grad, sum, s, inverse] {
                dev.accumulate(shard_grad, reinterpret_cast<const float*>(sum->data()), s, inverse);
              });
    const StreamEvent done = q.record(reduce);
    release_after(sum, done, name_of("free qgZ sum", u));
    if (!st.grads_whole) release_after(unit_grads[static_cast<std::size_t>(u)], done, name_of("free gradients", u));
    if (hybrid && last) {
      q.wait(cross, done);
      all_reduce_range(cross, shard_grad, s, {writes(shard_id)}, replicate(), name_of("gradient shard", u));
    }
  }
};

}  // namespace hsdp::shard
