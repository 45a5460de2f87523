#include "hsdp/shard/engine.hpp"

#include "engine_impl.hpp"
#include "hsdp/shard/formulas.hpp"

namespace hsdp::shard {
namespace {

// The compute copies this engine gathers are in EngineOptions::compute_dtype: the model must read that dtype.
void require_compute_dtype(const model::UnitModel& model, DType compute) {
  if (model.compute_dtype() != compute) {
    throw_internal("shard::Engine: the model computes in " + std::string(to_string(model.compute_dtype())) +
                   ", but this engine's compute copies are " + std::string(to_string(compute)));
  }
}

// While a micro-batch computes, the model polls the queues between its kernels (UnitModel::between_kernels), so a
// unit's reduction moves on to its next hop, and MPI moves its messages, within the next unit's compute instead of
// at its end. Inline queues only: with worker threads the model runs off the host thread, the only one that may
// call MPI (it is initialised FUNNELED).
class PollBetweenKernels {
 public:
  PollBetweenKernels(model::UnitModel& model, StreamQueues& queues) : model_(model) {
    if (!queues.options().threads) model_.between_kernels([&queues] { queues.progress(); });
  }
  ~PollBetweenKernels() { model_.between_kernels({}); }
  PollBetweenKernels(const PollBetweenKernels&) = delete;
  PollBetweenKernels& operator=(const PollBetweenKernels&) = delete;

 private:
  model::UnitModel& model_;
};

}  // namespace

Engine::Engine(const model::ModelLayout& layout, comm::ProcessMesh& mesh, const EngineOptions& options,
               std::uint64_t seed, MemoryAccountant& memory, const Logger* log, std::unique_ptr<DeviceOps> device)
    : device_(device ? std::move(device) : make_cpu_device_ops(memory)),
      queues_(std::make_unique<StreamQueues>(options.streams)), mesh_(mesh) {
  if (options.grad_accum < 1) throw_config("train.grad_accum must be >= 1");
  for (const DType t : {options.param_dtype, options.reduce_dtype}) {
    if (t != DType::f32 && t != DType::bf16 && t != DType::f16) {
      throw_config("precision: " + std::string(to_string(t)) + " is not a parameter/reduction dtype (fp32|bf16|fp16)");
    }
  }
  if (options.compute_dtype != DType::f32 && options.compute_dtype != options.param_dtype) {
    throw_config("the model computes in " + std::string(to_string(options.compute_dtype)) +
                 ": precision.param must be " + std::string(to_string(options.compute_dtype)) + " too (it is " +
                 std::string(to_string(options.param_dtype)) + ")");
  }
  impl_ = std::make_unique<Impl>(layout, mesh, options, *device_, *queues_, units_, timing_, log);
  Impl& m = *impl_;
  configure_zeropp(options.zeropp);
  const bool no_shard = m.unsharded;
  const int shard_size = mesh.shard().size();
  const int shard_rank = mesh.shard().rank();
  const auto n = static_cast<std::size_t>(m.n_units);
  for (int u = 0; u < layout.num_units(); ++u) {
    units_.push_back(std::make_unique<FlatParamUnit>(layout, u, shard_size, shard_rank, !no_shard, *device_));
    units_.back()->init_master(layout, seed, *device_);
    m.master_id.push_back(queues_->track(Impl::name_of("master", u)));
    m.grad_shard_id.push_back(queues_->track(Impl::name_of("gradient shard", u)));
  }
  m.gathered.resize(n);
  m.unit_grads.resize(n);
  if (no_shard) {
    std::size_t total = 0;
    for (int u = 0; u < m.n_units; ++u) {
      m.flat_offset.push_back(total);
      m.flat_grad_id.push_back(queues_->track(Impl::name_of("gradients", u)));
      total += m.geo(u).padded_numel;
    }
    m.flat_grads = device_->array<float>(total, MemCategory::grads);
    m.buckets = make_buckets(UnitSizes::of(layout).numel, options.bucket_mb);
    if (options.param_dtype != DType::f32) {
      for (int u = 0; u < m.n_units; ++u) m.persistent_params.push_back(m.compute_copy(u, "parameters"));
    }
  } else if (m.st.grads_whole) {  // zero1
    for (int u = 0; u < m.n_units; ++u) {
      m.persistent_params.push_back(m.compute_copy(u, "parameters"));
      m.unit_grads[static_cast<std::size_t>(u)] = {device_->array<float>(m.geo(u).padded_numel, MemCategory::grads),
                                                   queues_->track(Impl::name_of("gradients", u))};
    }
  }
  m.derived_pending = true;
  if (!options.defer_first_gather) refresh_derived_state();  // zero1's gather: a collective
}

void Engine::configure_zeropp(const ZeroPPOptions& z) {
  Impl& m = *impl_;
  m.secondary.resize(static_cast<std::size_t>(m.n_units));
  if (!z.any()) return;
  validate(m.o.strategy, z);
  const comm::Topology& topo = mesh_.topology();
  if (z.quantized_weights) m.forward_gather = make_quantized_gather();
  if (z.hpz_partition_size > 0) {
    if (!mesh_.has_hpz()) {
      throw_config("zeropp.hpz_partition_size=" + std::to_string(z.hpz_partition_size) +
                   ": the process mesh was built without an hpZ group (internal: pass it to ProcessMesh)");
    }
    m.hpz = true;
    m.secondary_gather = make_secondary_gather();
  }
  if (!z.quantized_gradients) return;
  if (!topo.nodes_equal_size()) {
    throw_config("zeropp.quantized_gradients: the two-hop all-to-all needs nodes of equal size");
  }
  if (m.hybrid) {
    m.one_group_at = qgz_one_node(mesh_.shard().size());
  } else {
    if (topo.num_nodes() == 1) {  // the exact reduce-scatter stays
      if (m.log != nullptr) {
        m.log->info("zeropp: qgZ falls back to the exact reduce-scatter: all ranks are on one node, so no gradient "
                      "crosses a node (quantizing would only add error)");
      }
      return;
    }
    // Shard ranks of full_shard are world ranks (the shard group is world in rank order).
    if (mesh_.shard().rank() != topo.world_rank) throw_internal("qgZ: shard ranks are not world ranks");
    for (int j = 0; j < topo.num_nodes(); ++j) m.shard_rank_at.push_back(topo.ranks_on_node(j));
  }
  m.shard_reduction = make_quantized_reduce_scatter();
}

Engine::~Engine() {
  // Pending work must complete before its buffers go away.
  if (impl_) {
    try {
      queues_->drain();
      for (int u = 0; u < impl_->n_units; ++u) impl_->release(u);
      queues_->drain();
    } catch (...) {  // a failed collective or a checker's report: the job is ending; the memory goes with it
    }
  }
  // What is still held (after a failure) goes before the memory it may write: a collective's handle waits for it.
  queues_.reset();
  impl_.reset();
}

void Engine::derive_if_pending() {
  if (impl_->derived_pending) refresh_derived_state();
}

void Engine::refresh_derived_state() {
  Impl& m = *impl_;
  m.derived_pending = false;
  if (m.st.gather_after_step) {
    for (int u = 0; u < m.n_units; ++u) m.gather_into(u, m.persistent_params[static_cast<std::size_t>(u)]);
    m.q.wait(m.compute, m.q.record(m.gather));
  } else if (m.unsharded && m.o.param_dtype != DType::f32) {
    for (int u = 0; u < m.n_units; ++u) {
      Tracked<std::byte>& p = m.persistent_params[static_cast<std::size_t>(u)];
      const float* master = units_[static_cast<std::size_t>(u)]->master.data();
      void* out = p.data();
      const std::size_t count = m.geo(u).padded_numel;
      const DType t = m.o.param_dtype;
      const DType c = m.o.compute_dtype;
      // The master rounded to precision.param: in fp32 compute copies a round trip, in param_dtype ones a conversion.
      m.q.enqueue(m.compute, Impl::name_of("round parameters", u),
                  {reads(m.master_id[static_cast<std::size_t>(u)]), writes(p.id)}, [this, master, out, count, t, c] {
                    device_->convert(master, DType::f32, out, c, count);
                    if (c == DType::f32) device_->round_to(static_cast<float*>(out), count, t);
                  });
    }
  }
}

void Engine::begin_step() {
  Impl& m = *impl_;
  derive_if_pending();
  m.compute_after_reductions();
  if (m.trace) {
    m.trace->start();  // written from the first step on: a run refused before it writes no trace
    m.trace->instant("begin_step " + std::to_string(++m.steps_begun), monotonic_seconds());
    m.trace->flush();
  }
  timing_ = {};
  m.in_flight.clear();
  m.waited_at_step_start = m.q.host_waited_s();
  std::vector<BufferAccess> zeroed{writes(m.flag_id), writes(m.loss_sum_id)};
  const bool clear_reduced = !m.reduced_grads_zero;
  if (clear_reduced) {
    for (const BufferId id : m.grad_shard_id) zeroed.push_back(writes(id));
    for (const BufferId id : m.flat_grad_id) zeroed.push_back(writes(id));
  }
  // What to zero, taken now: the host may allocate and free gradient buffers before the work runs.
  std::vector<std::pair<void*, std::size_t>> zero{{m.scalar(Impl::Scalar::nonfinite_flag), sizeof(double)},
                                                  {m.scalar(Impl::Scalar::loss_sum), sizeof(double)}};
  if (clear_reduced) {
    for (auto& u : units_) zero.emplace_back(u->grad_shard.data(), u->grad_shard.size() * sizeof(float));
    zero.emplace_back(m.flat_grads.data(), m.flat_grads.size() * sizeof(float));
  }
  for (auto& g : m.unit_grads) {
    if (g.empty()) continue;
    zeroed.push_back(writes(g.id));
    zero.emplace_back(g.data(), g.mem.size() * sizeof(float));
  }
  m.q.enqueue(m.compute, "zero gradients", zeroed, [this, zero] {
    for (const auto& [data, bytes] : zero) {
      if (bytes > 0) device_->fill_zero(data, bytes);  // an empty buffer's data() may be null: memset's UB
    }
  });
  m.reduced_grads_zero = false;
}

// The forward of one micro-batch through the blocks: each unit gathered before it computes (its successor
// prefetched) and released after it where `purpose` lets it go: training keeps a unit for its backward unless the
// strategy frees after forward (and then keeps its hpZ slice), evaluation keeps nothing after a block and the
// embedding's hpZ slice for a tied head. A tied head's embedding is prefetched again at the last block where it was
// released; an untied head (a Llama's lm_head, in the final unit) never reads the embedding.
void Engine::forward_blocks(model::UnitModel& model, std::shared_ptr<const std::vector<std::int32_t>> tokens,
                            Purpose purpose) {
  Impl& m = *impl_;
  const int L = m.n_layer;
  StreamQueues& q = m.q;
  const bool training = purpose == Purpose::training;
  const bool release_after_use = !training || m.free_after_forward;
  const Impl::Secondary block_slice = training ? Impl::Secondary::keep : Impl::Secondary::drop;
  model::UnitModel* g = &model;
  m.ensure(Impl::kEmbedding);
  m.maybe_prefetch(Impl::block_unit(0));
  q.enqueue(m.compute, "forward embedding", {reads(m.params_id(Impl::kEmbedding))},
            [g, tokens, p = m.params(Impl::kEmbedding)] { g->forward_embedding(*tokens, p); });
  if (release_after_use) {  // a tied head reads its hpZ slice
    m.release(Impl::kEmbedding, m.tied_head ? Impl::Secondary::keep : Impl::Secondary::drop);
  }
  for (int i = 0; i < L; ++i) {
    const int u = Impl::block_unit(i);
    m.ensure(u);
    m.maybe_prefetch(u + 1);
    if (i == L - 1 && release_after_use && m.tied_head) m.maybe_prefetch(Impl::kEmbedding);  // for the head
    q.progress();
    q.enqueue(m.compute, Impl::name_of("forward block", u), {reads(m.params_id(u))},
              [g, i, p = m.params(u)] { g->forward_block(i, p); });
    if (release_after_use) m.release(u, block_slice);
  }
  m.ensure(m.final_unit());
  if (m.tied_head) m.ensure(Impl::kEmbedding);
}

void Engine::forward_backward(model::UnitModel& model, std::span<const std::int32_t> tokens,
                              std::span<const std::int32_t> targets, float dloss, bool last) {
  Impl& m = *impl_;
  derive_if_pending();
  require_compute_dtype(model, m.o.compute_dtype);
  const int L = m.n_layer;
  const int final_unit = m.final_unit();
  constexpr int emb = Impl::kEmbedding;
  const QueueId compute = m.compute;
  StreamQueues& q = m.q;
  const PollBetweenKernels poll(model, q);
  // A reduction still in flight reads this unit's gradient buffer, which this micro-batch's backward adds to.
  m.compute_after_reductions();
  if (m.unsharded && last) {
    m.bucket_pending_units.clear();
    for (const Bucket& b : m.buckets) m.bucket_pending_units.push_back(b.last_unit - b.first_unit + 1);
  }
  model::UnitModel* g = &model;
  // The ids, copied: nothing below waits for the device, so the caller may refill its buffers while this
  // micro-batch's work is still to run (on worker threads; a GPU's model copies them at the call).
  auto token_ids = std::make_shared<const std::vector<std::int32_t>>(tokens.begin(), tokens.end());
  auto target_ids = std::make_shared<const std::vector<std::int32_t>>(targets.begin(), targets.end());

  // forward: embedding, blocks, head (its loss added to the step's)
  forward_blocks(model, std::move(token_ids), Purpose::training);
  if (m.free_after_forward && L > 0) m.maybe_prefetch(Impl::block_unit(L - 1), Impl::Pass::backward);
  double* loss_slot = m.scalar(Impl::Scalar::loss);
  double* loss_sum = m.scalar(Impl::Scalar::loss_sum);
  const bool tied = m.tied_head;
  std::vector<BufferAccess> head_reads{reads(m.params_id(final_unit)), writes(m.loss_id), writes(m.loss_sum_id)};
  if (tied) head_reads.push_back(reads(m.params_id(emb)));
  q.enqueue(compute, "forward head", head_reads,
            [g, dev = device_.get(), target_ids, dloss, loss_slot, loss_sum, pf = m.params(final_unit),
             pe = tied ? m.params(emb) : nullptr] {
              g->forward_head(*target_ids, pf, pe, dloss, loss_slot);
              dev->add_scalar(loss_sum, loss_slot);
            });

  // backward: head (final norm, the LM head: the embedding's when tied), blocks, embedding
  std::vector<BufferAccess> head_access{reads(m.params_id(final_unit)), writes(m.grads_id(final_unit))};
  if (tied) {
    head_access.push_back(reads(m.params_id(emb)));
    head_access.push_back(writes(m.grads_id(emb)));
  }
  q.enqueue(compute, "backward head", head_access,
            [g, pf = m.params(final_unit), pe = tied ? m.params(emb) : nullptr, gf = m.grads(final_unit),
             ge = tied ? m.grads(emb) : nullptr] { g->backward_head(pf, pe, gf, ge); });
  m.release(final_unit);
  m.release(emb);
  m.unit_backward_done(final_unit, last);
  for (int i = L - 1; i >= 0; --i) {
    const int u = Impl::block_unit(i);
    m.ensure(u, Impl::Pass::backward);
    if (i > 0) m.maybe_prefetch(u - 1, Impl::Pass::backward);
    q.progress();
    q.enqueue(compute, Impl::name_of("backward block", u), {reads(m.params_id(u)), writes(m.grads_id(u))},
              [g, i, p = m.params(u), gr = m.grads(u)] { g->backward_block(i, p, gr); });
    m.release(u);
    m.unit_backward_done(u, last);
  }
  q.enqueue(compute, "backward embedding", {writes(m.grads_id(emb))},
            [g, ge = m.grads(emb)] { g->backward_embedding(ge); });
  m.unit_backward_done(emb, last);
  q.progress();
}

float Engine::evaluate(model::UnitModel& model, std::span<const std::int32_t> tokens,
                       std::span<const std::int32_t> targets) {
  Impl& m = *impl_;
  derive_if_pending();
  require_compute_dtype(model, m.o.compute_dtype);
  const int final_unit = m.final_unit();
  constexpr int emb = Impl::kEmbedding;
  StreamQueues& q = m.q;
  const PollBetweenKernels poll(model, q);
  model::UnitModel* g = &model;
  forward_blocks(model, std::make_shared<const std::vector<std::int32_t>>(tokens.begin(), tokens.end()),
                 Purpose::evaluation);
  double* loss_slot = m.scalar(Impl::Scalar::loss);
  const bool tied = m.tied_head;
  std::vector<BufferAccess> head_reads{reads(m.params_id(final_unit)), writes(m.loss_id)};
  if (tied) head_reads.push_back(reads(m.params_id(emb)));
  q.enqueue(m.compute, "forward head", head_reads,
            [g, targets, loss_slot, pf = m.params(final_unit), pe = tied ? m.params(emb) : nullptr] {
              g->evaluate_head(targets, pf, pe, loss_slot);
            });
  m.release(final_unit);
  m.release(emb);
  return static_cast<float>(m.read_loss());  // the targets span outlives the work: the read waits for it
}

StepScalars Engine::step_scalars(bool check_nonfinite) {
  Impl& m = *impl_;
  m.compute_after_reductions();
  std::vector<BufferAccess> access;
  for (int u = 0; u < m.n_units; ++u) {
    access.push_back(reads(m.unsharded ? m.flat_grad_id[static_cast<std::size_t>(u)]
                                       : m.grad_shard_id[static_cast<std::size_t>(u)]));
  }
  // Sum the disjoint shards once: only the first replica of each shard contributes. On world, so the engine's
  // byte counters (shard/replicate groups) hold gradient and parameter traffic only. Unsharded, every rank holds
  // the same averaged gradients.
  const bool contributes = m.unsharded || mesh_.replicate().rank() == 0;
  double* norm = m.scalar(Impl::Scalar::squared_norm);
  std::vector<BufferAccess> norm_access = access;
  norm_access.push_back(writes(m.norm_id));
  m.q.enqueue(m.compute, "squared sum", norm_access, [this, &m, norm, contributes] {
    device_->fill_zero(norm, sizeof(double));
    if (!contributes) return;
    for (int u = 0; u < m.n_units; ++u) {
      if (m.unsharded) {
        device_->squared_sum(m.grads(u), m.geo(u).numel, norm);
      } else {
        device_->squared_sum(units_[static_cast<std::size_t>(u)]->grad_shard.data(), m.geo(u).valid, norm);
      }
    }
  });
  if (!m.unsharded) m.world_sum(norm, m.norm_id, "all_reduce squared norm");
  if (check_nonfinite) {
    double* flag = m.scalar(Impl::Scalar::nonfinite_flag);  // qgZ may have set it already (begin_step zeroed it)
    access.push_back(writes(m.flag_id));
    m.q.enqueue(m.compute, "non-finite check", access, [this, &m, flag] {
      for (int u = 0; u < m.n_units; ++u) {
        const float* g = m.unsharded ? m.grads(u) : units_[static_cast<std::size_t>(u)]->grad_shard.data();
        const std::size_t n = m.unsharded ? m.geo(u).numel : m.geo(u).valid;
        device_->flag_nonfinite(g, n, flag);
      }
    });
    m.world_sum(flag, m.flag_id, "all_reduce non-finite flag");
  }
  const auto [loss_sum, norm_squared, flag] = m.read_step_scalars();
  m.settle_timing();
  return {loss_sum, norm_squared, check_nonfinite && flag > 0};
}

void Engine::optimizer_step(const optim::AdamWConfig& config, const optim::AdamWStep& step) {
  Impl& m = *impl_;
  m.compute_after_reductions();
  // Unsharded with bf16 compute copies (a GPU's no_shard): AdamW writes the copies in its own pass, as
  // refresh_derived_state's conversion would after it (the same rounding; the padding AdamW does not see keeps the
  // zeros of the first conversion), and that pass over the masters goes.
  const bool copies_in_adamw = m.unsharded && !m.st.gather_after_step && m.o.param_dtype == DType::bf16 &&
                               m.o.compute_dtype == DType::bf16 && !m.persistent_params.empty();
  std::vector<BufferAccess> access;
  for (int u = 0; u < m.n_units; ++u) {
    access.push_back(writes(m.master_id[static_cast<std::size_t>(u)]));
    access.push_back(writes(m.unsharded ? m.flat_grad_id[static_cast<std::size_t>(u)]
                                        : m.grad_shard_id[static_cast<std::size_t>(u)]));
    if (copies_in_adamw) access.push_back(writes(m.persistent_params[static_cast<std::size_t>(u)].id));
  }
  m.q.enqueue(m.compute, "adamw", access, [this, &m, config, step, copies_in_adamw] {
    for (int u = 0; u < m.n_units; ++u) {
      FlatParamUnit& fp = *units_[static_cast<std::size_t>(u)];
      const std::size_t n = fp.geometry.valid;
      float* grad = m.unsharded ? m.grads(u) : fp.grad_shard.data();
      bf16_t* copy = nullptr;
      if (copies_in_adamw) copy = reinterpret_cast<bf16_t*>(m.persistent_params[static_cast<std::size_t>(u)].data());
      device_->adamw(config, step, fp.master.data(), grad, fp.exp_avg.data(), fp.exp_avg_sq.data(), n, fp.segments,
                     true, copy);
    }
  });
  m.params_updated = m.q.record(m.compute);
  // Every element AdamW did not see (the shards' padding) was zero already: reduce-scatters of zero padding.
  m.reduced_grads_zero = true;
  if (!copies_in_adamw) refresh_derived_state();
  // zero1's all-gathers after AdamW belong to the step (the host waits for their time); else the host goes on.
  if (m.st.gather_after_step) m.q.synchronize(m.q.record(m.compute));
  m.settle_timing();
}

void Engine::synchronize() {
  queues_->drain();
}

std::vector<UnitShard> Engine::shard_views() {
  // Checkpoints read and write the shards on the host: in place where the host can reach device memory (the CPU),
  // else through host copies, taken on compute after the last update of the masters.
  Impl& m = *impl_;
  m.compute_after_reductions();
  m.checkpoint_staging.clear();
  std::vector<UnitShard> views;
  for (auto& u : units_) {
    const std::size_t count = u->geometry.valid;
    float* host[3] = {};
    const float* from[3] = {u->master.data(), u->exp_avg.data(), u->exp_avg_sq.data()};
    for (int k = 0; k < 3; ++k) {
      host[k] = static_cast<float*>(device_->host_address(const_cast<float*>(from[k])));
      if (host[k] != nullptr || count == 0) continue;
      host[k] = m.checkpoint_staging.emplace_back(count).data();  // host memory, not the device's accountant
      m.q.enqueue(m.compute, Impl::name_of("copy shard to host", u->unit),
                  {reads(m.master_id[static_cast<std::size_t>(u->unit)])},
                  [this, to = host[k], f = from[k], count] { device_->copy_to_host(to, f, count * sizeof(float)); });
    }
    views.push_back({u->unit, u->geometry.begin, count, host[0], host[1], host[2]});
  }
  queues_->drain();
  return views;
}

std::vector<Engine::ReplicatedParams> Engine::replicated_params() {
  Impl& m = *impl_;
  derive_if_pending();
  m.compute_after_reductions();
  m.replica_staging.clear();
  m.replica_staging.reserve(static_cast<std::size_t>(m.n_units));  // the copies' addresses stay put
  std::vector<ReplicatedParams> out;
  for (std::size_t u = 0; u < m.persistent_params.size(); ++u) {  // none where the strategy keeps none
    Tracked<std::byte>& p = m.persistent_params[u];
    if (p.empty()) continue;
    const std::size_t size = p.mem.size();
    auto* host = static_cast<std::byte*>(device_->host_address(p.data()));
    const bool in_place = host != nullptr;
    if (!in_place) {
      host = m.replica_staging.emplace_back(size).data();
      m.q.enqueue(m.compute, Impl::name_of("copy full parameters to host", static_cast<int>(u)), {reads(p.id)},
                  [this, host, from = p.data(), size] { device_->copy_to_host(host, from, size); });
    }
    out.push_back({static_cast<int>(u), host, size, in_place});
  }
  queues_->drain();
  return out;
}

void Engine::checkpoint_loaded() {
  // The views of shard_views() hold the loaded shards: copied to the device where they were staged.
  Impl& m = *impl_;
  std::size_t next = 0;
  for (auto& u : units_) {
    const std::size_t count = u->geometry.valid;
    float* to[3] = {u->master.data(), u->exp_avg.data(), u->exp_avg_sq.data()};
    for (int k = 0; k < 3; ++k) {
      if (count == 0 || device_->host_address(to[k]) != nullptr) continue;
      if (next >= m.checkpoint_staging.size()) throw_internal("checkpoint_loaded: no staged views (call shard_views)");
      const float* from = m.checkpoint_staging[next++].data();
      m.q.enqueue(m.compute, Impl::name_of("copy shard to device", u->unit),
                  {writes(m.master_id[static_cast<std::size_t>(u->unit)])},
                  [this, t = to[k], from, count] { device_->copy_from_host(t, from, count * sizeof(float)); });
    }
  }
  m.params_updated = m.q.record(m.compute);
  refresh_derived_state();
  queues_->drain();
  m.checkpoint_staging.clear();
}

void Engine::inject(const StreamFaults& faults) { impl_->faults = faults; }

bool Engine::is_checkpoint_writer() const { return mesh_.replicate().rank() == 0; }

}  // namespace hsdp::shard
