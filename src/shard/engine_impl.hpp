#pragma once
// The sharding engine's internals (private to src/shard): gathers of parameters and reductions of gradients as work
// on stream queues (hsdp/stream/queues.hpp). Engine (engine.cpp) drives them unit by unit.
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
#include <array>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "collective_variants.hpp"
#include "hsdp/core/buffer.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/timer.hpp"
#include "hsdp/core/trace.hpp"
#include "hsdp/shard/buckets.hpp"
#include "hsdp/shard/engine.hpp"
#include "hsdp/stream/device_ops.hpp"
#include "hsdp/stream/queues.hpp"

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
  DeviceOps& dev;
  StreamQueues& q;
  std::vector<std::unique_ptr<FlatParamUnit>>& units;
  StepTiming& timing;
  int n_layer;
  bool tied_head;  // the LM head reads the embedding unit (GPT-2; a Llama with tie_embeddings)
  int n_units;

  const Logger* log;
  std::unique_ptr<TraceFile> trace;  // log.trace: the queues' timeline
  int steps_begun = 0;
  const Strategy& st;       // what the strategy means (strategy.hpp)
  bool persistent_full;     // full parameters live on every rank between steps
  bool free_after_forward;  // free after forward, gather again for backward
  bool hybrid;
  bool unsharded;             // shard group of one (no_shard): whole gradients reduced in buckets over the world
  bool hierarchical = false;  // unsharded on several nodes of several ranks (equal sizes): buckets reduce-scattered
                              // in the node, all-reduced across nodes, all-gathered in the node

  QueueId compute, gather, reduce, cross, regather;
  StreamEvent params_updated;  // compute: the last write of the masters (AdamW, a checkpoint load)
  // The derived copies (persistent full or rounded parameters) not yet made from the masters: with
  // EngineOptions::defer_first_gather, until Engine::derive_if_pending or the first use.
  bool derived_pending = false;
  StreamFaults faults;         // tests of the checker only

  // The shard state's buffers, for the checker: master (and AdamW's moments), gradient shard, per unit.
  std::vector<BufferId> master_id, grad_shard_id;
  // Persistent full compute parameters [Pp] in the compute dtype (zero1; no_shard when rounding to a lower precision).
  std::vector<Tracked<std::byte>> persistent_params;
  // A unit's transient gathered parameters [Pp] (sharded strategies; empty when not gathered) kept with the event
  // after their gather (queue -1: none pending): compute waits for it before reading them, and they go back to
  // their pool only after it.
  struct GatheredUnit {
    Tracked<std::byte> full;  // in the compute dtype
    StreamEvent ready;
  };
  std::vector<GatheredUnit> gathered;
  // The host runs ahead of the device (the CUDA executor, the threads executor) and a unit's gathered copy or
  // gradient buffer goes back only once its last use has completed: unbounded, a step would hold every unit's at once
  // (on a GPU, 19 GB of transients for GPT-2 XL). So before another is allocated, the host waits for the oldest
  // pending release while kAliveUnits or more are alive, as FSDP limits its all-gathers in flight. Three is what the
  // plan's transient formula counts (formulas.cpp: the unit in use, the next one prefetched, the last one going back).
  // Inline (the CPU engine's fast path) every release happens at once and this never waits.
  static constexpr int kAliveUnits = 3;
  struct AliveUnits {
    int held = 0;                   // allocated, not yet released
    std::deque<StreamEvent> going;  // released, gone once each event has happened (in release order)
  };
  AliveUnits alive_gathered, alive_grads;
  void make_room(AliveUnits& a) {
    if (a.going.empty()) return;
    q.progress();  // the releases whose events happened run now: their memory is back before the next allocation
    while (!a.going.empty() && q.happened(a.going.front())) a.going.pop_front();
    while (!a.going.empty() && a.held + static_cast<int>(a.going.size()) >= kAliveUnits) {
      q.synchronize(a.going.front());  // frees it (and what went back before it)
      a.going.pop_front();
    }
  }
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
  // Host copies of the persistent full parameters where the device's memory is not the host's: the replica check.
  std::vector<std::vector<std::byte>> replica_staging;
  // The step's scalars in device memory: the loss the model writes (a micro-batch's, an evaluation batch's), then
  // the three the host reads once a step, in one copy (read_step_scalars): the loss summed over the step's
  // micro-batches, the squared norm, fp16's non-finite flag.
  enum class Scalar { loss, loss_sum, squared_norm, nonfinite_flag };
  static constexpr std::size_t kScalars = static_cast<std::size_t>(Scalar::nonfinite_flag) + 1;
  DeviceArray<double> scalars;
  BufferId loss_id = -1, loss_sum_id = -1, norm_id = -1, flag_id = -1;
  double* scalar(Scalar s) { return scalars.data() + static_cast<std::size_t>(s); }

  // The collectives' variants (collective_variants.hpp), chosen by Engine::configure_zeropp: qwZ makes the forward
  // gather quantized, hpZ adds the secondary gather, qgZ makes the reduction quantized.
  std::unique_ptr<ParamGather> forward_gather = make_exact_gather(), backward_gather = make_exact_gather();
  std::unique_ptr<ParamGather> secondary_gather;
  std::unique_ptr<ShardReduction> shard_reduction = make_exact_reduce_scatter();
  bool hpz = false;
  std::vector<Staging> secondary;  // hpZ: this rank's 1/k slice of each block, fwd -> bwd
  // The last optimizer step zeroed the reduced gradients (the flat gradients of no_shard, the gradient shards) in its
  // AdamW pass, so begin_step need not clear them again.
  bool reduced_grads_zero = false;
  std::vector<std::vector<int>> shard_rank_at;  // [node][local] -> shard rank (full_shard qgZ)
  std::vector<std::vector<int>> one_group_at;   // hybrid_shard qgZ: the node's ranks as nodes of one (zeropp.hpp)

  Impl(const model::ModelLayout& l, comm::ProcessMesh& m, const EngineOptions& options, DeviceOps& device,
       StreamQueues& queues, std::vector<std::unique_ptr<FlatParamUnit>>& u, StepTiming& t, const Logger* logger)
      : mesh(m),
        o(options),
        dev(device),
        q(queues),
        units(u),
        timing(t),
        n_layer(l.config().n_layer),
        tied_head(l.config().tied_head()),
        n_units(l.num_units()),
        log(logger),
        st(strategy(options.strategy)) {
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
    if (!o.trace_file.empty()) {
      trace = std::make_unique<TraceFile>(o.trace_file, m.world().rank());
      q.on_span([t = trace.get()](const std::string& queue, const std::string& name, double begin, double end) {
        t->span(queue, name, begin, end);
      });
    }
    scalars = dev.array<double>(kScalars, MemCategory::comm_buffers);
    loss_id = q.track("loss");
    loss_sum_id = q.track("loss sum");
    norm_id = q.track("squared norm");
    flag_id = q.track("non-finite flag");
  }

  comm::Communicator& shard() { return mesh.shard(); }
  comm::Communicator& replicate() { return mesh.replicate(); }
  const UnitGeometry& geo(int u) const { return units[static_cast<std::size_t>(u)]->geometry; }
  FlatParamUnit& unit(int u) { return *units[static_cast<std::size_t>(u)]; }
  static std::string name_of(const char* what, int u) { return unit_name(what, u); }
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
  // The host's read of the loss an evaluation batch wrote (after everything compute did).
  double read_loss() {
    q.synchronize(q.record(compute));
    q.host_read(loss_id, "read the loss");
    double value = 0;
    dev.copy_to_host(&value, scalar(Scalar::loss), sizeof(double));
    dev.raise_deferred_errors();
    return value;
  }
  // The host's one read a step: loss sum, squared norm and flag (adjacent), after everything compute did.
  std::array<double, 3> read_step_scalars() {
    if (!faults.early_norm_read) q.synchronize(q.record(compute));
    q.host_read(norm_id, "read the norm");
    q.host_read(flag_id, "read the non-finite flag");
    q.host_read(loss_sum_id, "read the loss");
    std::array<double, 3> values{};
    static_assert(static_cast<int>(Scalar::nonfinite_flag) - static_cast<int>(Scalar::loss_sum) == 2);
    dev.copy_to_host(values.data(), scalar(Scalar::loss_sum), sizeof(values));
    dev.raise_deferred_errors();
    return values;
  }
  // The scalar summed over the world (on the reduce queue, after compute; compute then after it).
  void world_sum(double* value, BufferId id, const std::string& what) {
    q.wait(reduce, q.record(compute));
    comm::Communicator& world = mesh.engine_world();
    q.collective(reduce, what, {&world}, {writes(id)},
                 [value, &world] { return world.all_reduce_async(value, value, 1, DType::f64, comm::ReduceOp::sum); });
    q.wait(compute, q.record(reduce));
  }
  // The compute queue after every reduction enqueued so far (the gradients they read, the shards they write).
  void compute_after_reductions() {
    for (const QueueId r : {reduce, cross, regather}) q.wait(compute, q.record(r));
  }

  // ---- parameters -------------------------------------------------------------------------------------
  // Units (ModelLayout): the embedding (read again by a tied LM head), the blocks, the final unit (the final norm;
  // a Llama's untied LM head).
  static constexpr int kEmbedding = model::ModelLayout::embedding_unit();
  static constexpr int block_unit(int block) { return model::ModelLayout::block_unit(block); }
  int final_unit() const { return n_layer + 1; }
  bool is_block(int u) const { return u >= 1 && u <= n_layer; }
  // What a gather is for: qwZ quantizes forward gathers only; hpZ serves backward gathers from its kept slice.
  enum class Pass { forward, backward };
  // What a release lets go of besides the gathered unit: its hpZ slice too once no backward will read it.
  enum class Secondary { keep, drop };
  // What a collective variant may use for unit u on queue `on` (collective_variants.hpp).
  CollectiveContext collective_context(int u, QueueId on) {
    return {u,
            geo(u),
            q,
            on,
            dev,
            mesh,
            shard(),
            o,
            faults,
            [this, u](std::size_t count, DType t, const char* what) { return staging(count, t, name_of(what, u)); },
            [this, u](Staging s, const StreamEvent& event, const char* what) {
              release_after(std::move(s), event, name_of(what, u));
            }};
  }
  GatherContext gather_context(int u) {
    const auto i = static_cast<std::size_t>(u);
    return {collective_context(u, gather), unit(u).master.data(), master_id[i], secondary[i]};
  }
  ReductionContext reduction_context(int u) {
    const auto i = static_cast<std::size_t>(u);
    // qgZ's hops: full_shard's second hop crosses nodes; hybrid_shard's node is one group of the shard's ranks.
    return {collective_context(u, reduce),
            grads(u),
            grads_id(u),
            unit(u).grad_shard.data(),
            grad_shard_id[i],
            hybrid ? &one_group_at : &shard_rank_at,
            hybrid ? &shard() : &mesh.cross_node(),
            scalar(Scalar::nonfinite_flag),
            flag_id};
  }

  // Full parameters of unit u [Pp] in the compute dtype, charged to params.
  Tracked<std::byte> compute_copy(int u, const char* what) {
    return {dev.typed(geo(u).padded_numel, o.compute_dtype, MemCategory::params), q.track(name_of(what, u))};
  }
  // Enqueues on the gather queue the gather of unit u's weights into `dest` [Pp] (compute dtype), by the variant that
  // applies (collective_variants.hpp): hpZ's from the unit's kept slice when there is one (a block's backward, the
  // embedding's second use at the head), else the forward or backward gather over the shard group. With hpZ, a
  // gather over the shard group keeps this rank's slice of a block (and of the embedding). Returns the event after.
  StreamEvent gather_into(int u, Tracked<std::byte>& dest, Pass pass = Pass::forward) {
    q.wait(gather, params_updated);
    std::vector<ReleaseAfter> staging_used;
    if (secondary[static_cast<std::size_t>(u)]) {
      secondary_gather->enqueue(gather_context(u), dest, staging_used);
    } else {
      (pass == Pass::backward ? backward_gather : forward_gather)->enqueue(gather_context(u), dest, staging_used);
      if (hpz && (is_block(u) || u == kEmbedding)) keep_secondary(u, dest);
    }
    const StreamEvent done = q.record(gather);
    for (ReleaseAfter& r : staging_used) release_after(std::move(r.buffer), done, r.what);
    return done;
  }
  // hpZ: this rank's slice of the gathered unit, kept for the backward gather inside the hpZ group.
  void keep_secondary(int u, Tracked<std::byte>& full) {
    const std::size_t slice = geo(u).padded_numel / static_cast<std::size_t>(mesh.hpz().size());
    Staging copy = staging(slice, o.param_dtype, name_of("hpZ secondary", u), MemCategory::hpz_secondary);
    const DType c = o.compute_dtype;
    const std::byte* from = full.data() + slice * static_cast<std::size_t>(mesh.hpz().rank()) * size_of(c);
    const DType t = o.param_dtype;
    q.enqueue(gather, name_of("keep hpZ slice", u), {reads(full.id), writes(copy->id)},
              [this, from, copy, slice, c, t] { dev.convert(from, c, copy->data(), t, slice); });
    secondary[static_cast<std::size_t>(u)] = std::move(copy);
  }
  void prefetch(int u, Pass pass = Pass::forward) {
    if (persistent_full || u < 0 || u >= n_units) return;
    GatheredUnit& slot = gathered[static_cast<std::size_t>(u)];
    if (!slot.full.empty()) return;
    make_room(alive_gathered);
    slot.full = compute_copy(u, "gathered");
    ++alive_gathered.held;
    slot.ready = gather_into(u, slot.full, pass);
  }
  // The compute queue after unit u's gather.
  void ensure(int u, Pass pass = Pass::forward) {
    if (persistent_full) return;
    prefetch(u, pass);
    if (faults.skip_gather_wait && u == block_unit(0)) return;
    q.wait(compute, gathered[static_cast<std::size_t>(u)].ready);
  }
  void maybe_prefetch(int u, Pass pass = Pass::forward) {
    if (o.prefetch) prefetch(u, pass);
  }
  // The unit is done on compute for now (after everything enqueued on compute so far).
  void release(int u, Secondary secondary_slice = Secondary::drop) {
    if (persistent_full) return;
    const auto i = static_cast<std::size_t>(u);
    GatheredUnit& slot = gathered[i];
    q.wait(compute, slot.ready);  // never freed before its gather is done
    const StreamEvent used = q.record(compute);
    if (secondary_slice == Secondary::drop && secondary[i]) {
      release_after(secondary[i], used, name_of("free hpZ secondary", u));
      secondary[i].reset();
    }
    if (!slot.full.empty()) {
      release_after(slot.full, used, name_of("free gathered", u));
      --alive_gathered.held;
      alive_gathered.going.push_back(used);
    }
    slot.ready = StreamEvent{};
  }
  // Unit u's full parameters in the compute dtype, as the model reads them.
  const void* params(int u) {
    if (unsharded && o.param_dtype == DType::f32) return unit(u).master.data();
    if (persistent_full) return persistent_params[static_cast<std::size_t>(u)].data();
    return gathered[static_cast<std::size_t>(u)].full.data();
  }
  BufferId params_id(int u) {
    if (unsharded && o.param_dtype == DType::f32) return master_id[static_cast<std::size_t>(u)];
    if (persistent_full) return persistent_params[static_cast<std::size_t>(u)].id;
    return gathered[static_cast<std::size_t>(u)].full.id;
  }

  // ---- gradients --------------------------------------------------------------------------------------
  float* grads(int u) {
    if (unsharded) return flat_grads.data() + flat_offset[static_cast<std::size_t>(u)];
    Tracked<float>& b = unit_grads[static_cast<std::size_t>(u)];
    if (b.empty()) {
      make_room(alive_grads);
      ++alive_grads.held;
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
  // Unit u's full gradient into this rank's gradient shard by the engine's ShardReduction (collective_variants.hpp);
  // then the full gradient goes (zero1 keeps it for the next step, zeroed in begin_step) and, for the hybrids on
  // the last micro-batch, the shard is averaged across replicas.
  void reduce_scatter_unit(int u, bool last) {
    q.wait(reduce, q.record(compute));
    std::vector<ReleaseAfter> staging_used;
    shard_reduction->enqueue(reduction_context(u), staging_used);
    const StreamEvent done = q.record(reduce);
    for (ReleaseAfter& r : staging_used) release_after(std::move(r.buffer), done, r.what);
    if (!st.grads_whole) {
      release_after(unit_grads[static_cast<std::size_t>(u)], done, name_of("free gradients", u));
      --alive_grads.held;
      alive_grads.going.push_back(done);
    }
    if (hybrid && last) {
      q.wait(cross, done);
      const BufferId shard_id = grad_shard_id[static_cast<std::size_t>(u)];
      all_reduce_range(cross, unit(u).grad_shard.data(), geo(u).shard_numel, {writes(shard_id)}, replicate(),
                       name_of("gradient shard", u));
    }
  }
};

}  // namespace hsdp::shard
