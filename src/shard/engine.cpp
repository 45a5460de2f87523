#include "hsdp/shard/engine.hpp"

#include "engine_impl.hpp"
#include "hsdp/shard/formulas.hpp"

namespace hsdp::shard {

Engine::Engine(const model::ModelLayout& layout, comm::ProcessMesh& mesh, const EngineOptions& options,
               std::uint64_t seed, MemoryAccountant& memory, const Logger* log, std::unique_ptr<Device> device)
    : device_(device ? std::move(device) : make_cpu_device(memory)), mesh_(mesh) {
  if (options.grad_accum < 1) throw_config("train.grad_accum must be >= 1");
  for (const DType t : {options.param_dtype, options.reduce_dtype}) {
    if (t != DType::f32 && t != DType::bf16 && t != DType::f16) {
      throw_config("precision: " + std::string(to_string(t)) + " is not a parameter/reduction dtype (fp32|bf16|fp16)");
    }
  }
  impl_ = std::make_unique<Impl>(layout, mesh, options, *device_, units_, timing_, log);
  Impl& m = *impl_;
  configure_zeropp(options.zeropp);
  const bool no_shard = m.replicated;
  const int shard_size = mesh.shard().size();
  const int shard_rank = mesh.shard().rank();
  for (int u = 0; u < layout.num_units(); ++u) {
    units_.push_back(std::make_unique<FlatParamUnit>(layout, u, shard_size, shard_rank, !no_shard, memory));
    units_.back()->init_master(layout, seed);
  }
  m.gathered.resize(static_cast<std::size_t>(m.n_units));
  m.gathering.resize(static_cast<std::size_t>(m.n_units));
  m.unit_grads.resize(static_cast<std::size_t>(m.n_units));
  if (no_shard) {
    std::size_t total = 0;
    for (int u = 0; u < m.n_units; ++u) {
      m.flat_offset.push_back(total);
      total += m.geo(u).padded_numel;
    }
    m.flat_grads = device_->array<float>(total, MemCategory::grads);
    m.buckets = make_buckets(UnitSizes::of(layout).numel, options.bucket_mb);
    if (options.param_dtype != DType::f32) {
      for (int u = 0; u < m.n_units; ++u) {
        m.persistent_params.push_back(device_->array<float>(m.geo(u).padded_numel, MemCategory::params));
      }
    }
  } else if (m.st.grads_whole) {  // zero1
    for (int u = 0; u < m.n_units; ++u) {
      m.persistent_params.push_back(device_->array<float>(m.geo(u).padded_numel, MemCategory::params));
      m.unit_grads[static_cast<std::size_t>(u)] = device_->array<float>(m.geo(u).padded_numel, MemCategory::grads);
    }
  }
  refresh_derived_state();
}

void Engine::configure_zeropp(const ZeroPPOptions& z) {
  Impl& m = *impl_;
  m.secondary.resize(static_cast<std::size_t>(m.n_units));
  if (!z.any()) return;
  if (!m.st.zeropp) {
    std::string allowed;
    for (const Strategy& s : all_strategies()) {
      if (s.zeropp) allowed += (allowed.empty() ? "" : " or ") + std::string(s.name);
    }
    throw_config("zeropp: ZeRO++ works with parallel.sharding=" + allowed + ", not " + m.st.name);
  }
  if (z.hpz_partition_size > 0 && m.st.shard_scope != comm::ShardScope::world) {
    throw_config("zeropp.hpz_partition_size=" + std::to_string(z.hpz_partition_size) +
                 ": hpZ keeps the backward gathers inside the node instead of across nodes, but with "
                 "parallel.sharding=" + std::string(m.st.name) +
                 " the shard group is the node already, so it would change nothing; use it with full_shard or set it "
                 "to 0");
  }
  quant::validate({z.grad_bits, z.block});
  const comm::Topology& topo = mesh_.topology();
  m.qwz = z.quantized_weights;
  if (z.hpz_partition_size > 0) {
    if (!mesh_.has_hpz()) {
      throw_config("zeropp.hpz_partition_size=" + std::to_string(z.hpz_partition_size) +
                   ": the process mesh was built without an hpZ group (internal: pass it to ProcessMesh)");
    }
    m.hpz = true;
  }
  m.qgz = z.quantized_gradients;
  if (!m.qgz) return;
  if (!topo.nodes_equal_size()) {
    throw_config("zeropp.quantized_gradients: the two-hop all-to-all needs nodes of equal size");
  }
  if (!m.hybrid) {
    if (topo.num_nodes() == 1) {
      m.qgz_exact_fallback = true;
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
}

Engine::~Engine() {
  // Pending collectives must complete before their buffers go away.
  if (impl_) {
    impl_->drain_reductions();
    for (int u = 0; u < impl_->n_units; ++u) impl_->release(u);
  }
}

void Engine::refresh_derived_state() {
  Impl& m = *impl_;
  if (m.st.gather_after_step) {
    std::vector<InFlight> ops;
    for (int u = 0; u < m.n_units; ++u) ops.push_back(m.gather_into(u, m.persistent_params[static_cast<std::size_t>(u)].data()));
    for (auto& op : ops) m.complete(op, true);
  } else if (m.replicated && m.o.param_dtype != DType::f32) {
    for (int u = 0; u < m.n_units; ++u) {
      auto& p = m.persistent_params[static_cast<std::size_t>(u)];
      device_->convert(units_[static_cast<std::size_t>(u)]->master.data(), DType::f32, p.data(), DType::f32, p.size());
      device_->round_to(p.data(), p.size(), m.o.param_dtype);
    }
  }
}

void Engine::begin_step() {
  Impl& m = *impl_;
  m.drain_reductions();
  timing_ = {};
  m.in_flight.clear();
  if (!m.reduced_grads_zero) {
    for (auto& u : units_) device_->fill_zero(u->grad_shard.data(), u->grad_shard.size_bytes());
    device_->fill_zero(m.flat_grads.data(), m.flat_grads.size() * sizeof(float));
  }
  m.reduced_grads_zero = false;
  m.local_nonfinite = false;
  for (auto& g : m.unit_grads) device_->fill_zero(g.data(), g.size() * sizeof(float));
}

float Engine::forward_backward(model::Gpt<float>& gpt, std::span<const std::int32_t> tokens,
                               std::span<const std::int32_t> targets, float dloss, bool last) {
  Impl& m = *impl_;
  const int L = m.n_layer;
  const int final_unit = L + 1;
  // A reduction still in flight reads this unit's gradient buffer, which this micro-batch's backward adds to.
  m.drain_reductions();
  if (m.replicated && last) {
    m.bucket_pending_units.clear();
    for (const Bucket& b : m.buckets) m.bucket_pending_units.push_back(b.last_unit - b.first_unit + 1);
  }

  // forward: embedding, blocks, head
  m.ensure(0);
  m.maybe_prefetch(1);
  gpt.forward_embedding(tokens, m.params(0));
  if (m.free_after_forward) m.release(0, false);
  for (int i = 0; i < L; ++i) {
    const int u = 1 + i;
    m.ensure(u);
    m.maybe_prefetch(u + 1);
    if (i == L - 1 && m.free_after_forward) m.maybe_prefetch(0);  // the head needs the tied embedding again
    m.poll();
    gpt.forward_block(i, m.params(u));
    if (m.free_after_forward) m.release(u, false);
  }
  m.ensure(final_unit);
  m.ensure(0);
  if (m.free_after_forward && L > 0) m.maybe_prefetch(L, true);
  const float loss = gpt.forward_head(targets, m.params(final_unit), m.params(0));

  // backward: head (final norm and the tied embedding), blocks, embedding
  gpt.backward_head(m.params(final_unit), m.params(0), m.grads(final_unit), m.grads(0), dloss);
  m.release(final_unit);
  m.release(0);
  m.unit_backward_done(final_unit, last);
  for (int i = L - 1; i >= 0; --i) {
    const int u = 1 + i;
    m.ensure(u, true);
    if (i > 0) m.maybe_prefetch(u - 1, true);
    m.poll();
    gpt.backward_block(i, m.params(u), m.grads(u));
    m.release(u);
    m.unit_backward_done(u, last);
  }
  gpt.backward_embedding(m.grads(0));
  m.unit_backward_done(0, last);
  m.poll();
  return loss;
}

float Engine::evaluate(model::Gpt<float>& gpt, std::span<const std::int32_t> tokens,
                       std::span<const std::int32_t> targets) {
  Impl& m = *impl_;
  const int L = m.n_layer;
  m.ensure(0);
  m.maybe_prefetch(1);
  gpt.forward_embedding(tokens, m.params(0));
  m.release(0, false);  // keeps the embedding's hpZ slice for the head
  for (int i = 0; i < L; ++i) {
    m.ensure(1 + i);
    m.maybe_prefetch(2 + i);
    gpt.forward_block(i, m.params(1 + i));
    m.release(1 + i);  // no backward follows: its hpZ slice goes too
  }
  m.ensure(L + 1);
  m.ensure(0);
  const float loss = gpt.forward_head(targets, m.params(L + 1), m.params(0));
  m.release(L + 1);
  m.release(0);
  return loss;
}

double Engine::grad_norm_squared() {
  Impl& m = *impl_;
  m.drain_reductions();
  double local = 0;
  if (m.replicated) {
    for (int u = 0; u < m.n_units; ++u) {
      local += device_->squared_sum(m.grads(u), m.geo(u).numel);
    }
    m.settle_timing();
    return local;  // every rank holds the same averaged gradients
  }
  for (auto& u : units_) local += device_->squared_sum(u->grad_shard.data(), u->geometry.valid);
  // Sum the disjoint shards once: only the first replica of each shard contributes. On world, so the engine's
  // byte counters (shard/replicate groups) hold gradient and parameter traffic only.
  double contribution = mesh_.replicate().rank() == 0 ? local : 0.0;
  Stopwatch waited;
  mesh_.world().all_reduce(std::span<double>(&contribution, 1), comm::ReduceOp::sum);
  m.blocked_for(waited.seconds());
  m.settle_timing();
  return contribution;
}

bool Engine::found_nonfinite() {
  Impl& m = *impl_;
  m.drain_reductions();
  bool local = m.local_nonfinite;
  for (int u = 0; u < m.n_units && !local; ++u) {
    const float* g = m.replicated ? m.grads(u) : units_[static_cast<std::size_t>(u)]->grad_shard.data();
    const std::size_t n = m.replicated ? m.geo(u).numel : m.geo(u).valid;
    local = !device_->all_finite(g, n);
  }
  double flag = local ? 1.0 : 0.0;
  Stopwatch waited;
  mesh_.world().all_reduce(std::span<double>(&flag, 1), comm::ReduceOp::sum);
  m.blocked_for(waited.seconds());
  m.settle_timing();
  return flag > 0;
}

void Engine::optimizer_step(const optim::AdamWConfig& config, const optim::AdamWStep& step) {
  Impl& m = *impl_;
  m.drain_reductions();
  for (int u = 0; u < m.n_units; ++u) {
    FlatParamUnit& fp = *units_[static_cast<std::size_t>(u)];
    const std::size_t n = fp.geometry.valid;
    float* grad = m.replicated ? m.grads(u) : fp.grad_shard.data();
    device_->adamw(config, step, fp.master.data(), grad, fp.exp_avg.data(), fp.exp_avg_sq.data(), n, fp.segments,
                   true);
  }
  // Every element AdamW did not see (the shards' padding) was zero already: reduce-scatters of zero padding.
  m.reduced_grads_zero = true;
  refresh_derived_state();
  m.settle_timing();  // zero1's all-gathers after AdamW belong to the step
}

std::vector<UnitShard> Engine::shard_views() {
  std::vector<UnitShard> views;
  for (auto& u : units_) {
    views.push_back({u->unit, u->geometry.begin, u->geometry.valid, u->master.data(), u->exp_avg.data(),
                     u->exp_avg_sq.data()});
  }
  return views;
}

bool Engine::is_checkpoint_writer() const { return mesh_.replicate().rank() == 0; }

}  // namespace hsdp::shard
