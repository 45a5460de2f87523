#include "collective_variants.hpp"

#include "engine_impl.hpp"
#include "hsdp/shard/zeropp.hpp"

namespace hsdp::shard {
namespace {

std::uint8_t* bytes(const Staging& b) {
  return reinterpret_cast<std::uint8_t*>(b->data());
}

// ------------------------------------------------------------------------------------------- ParamGather

class ExactGather final : public ParamGather {
 public:
  void enqueue(Engine::Impl& m, int u, Tracked<std::byte>& dest, std::vector<ReleaseAfter>& release) const override {
    const UnitGeometry& g = m.geo(u);
    const DType t = m.o.param_dtype;
    const DType c = m.o.compute_dtype;
    const BufferId master = m.master_id[static_cast<std::size_t>(u)];
    const float* from = m.unit(u).master.data();
    const std::size_t s = g.shard_numel;
    const std::size_t padded = g.padded_numel;
    std::byte* out = dest.data();
    comm::Communicator& shard = m.shard();
    if (t == DType::f32) {  // then the compute dtype is fp32 too
      m.q.collective(m.gather, Engine::Impl::name_of("all_gather", u), {&shard}, {reads(master), writes(dest.id)},
                     [&shard, from, out, s] { return shard.all_gather_async(from, out, s, DType::f32); });
      return;
    }
    Staging send = m.staging(s, t, Engine::Impl::name_of("gather send", u));
    DeviceOps& dev = m.dev;
    m.q.enqueue(m.gather, Engine::Impl::name_of("convert master", u), {reads(master), writes(send->id)},
                [&dev, from, send, s, t] { dev.convert(from, DType::f32, send->data(), t, s); });
    release.push_back({send, Engine::Impl::name_of("free gather send", u)});
    if (c == t) {  // gathered in the compute dtype: straight into the destination
      m.q.collective(m.gather, Engine::Impl::name_of("all_gather", u), {&shard}, {reads(send->id), writes(dest.id)},
                     [&shard, send, out, s, t] { return shard.all_gather_async(send->data(), out, s, t); });
      return;
    }
    Staging recv = m.staging(padded, t, Engine::Impl::name_of("gather receive", u));
    m.q.collective(m.gather, Engine::Impl::name_of("all_gather", u), {&shard}, {reads(send->id), writes(recv->id)},
                   [&shard, send, recv, s, t] { return shard.all_gather_async(send->data(), recv->data(), s, t); });
    m.q.enqueue(m.gather, Engine::Impl::name_of("convert gathered", u), {reads(recv->id), writes(dest.id)},
                [&dev, recv, out, padded, t, c] { dev.convert(recv->data(), t, out, c, padded); });
    release.push_back({recv, Engine::Impl::name_of("free gather receive", u)});
  }
};

class QuantizedGather final : public ParamGather {
 public:
  void enqueue(Engine::Impl& m, int u, Tracked<std::byte>& dest, std::vector<ReleaseAfter>& release) const override {
    const quant::QuantSpec spec = m.weight_spec();
    const std::size_t s = m.geo(u).shard_numel;
    const std::size_t padded = m.geo(u).padded_numel;
    const std::size_t bytes_per_rank = message_bytes(s, spec);
    const auto n = static_cast<std::size_t>(m.shard().size());
    const DType t = m.o.param_dtype;
    const DType c = m.o.compute_dtype;
    const BufferId master = m.master_id[static_cast<std::size_t>(u)];
    const float* from = m.unit(u).master.data();
    std::byte* out = dest.data();
    DeviceOps& dev = m.dev;
    comm::Communicator& shard = m.shard();
    Staging send = m.staging(bytes_per_rank, DType::u8, Engine::Impl::name_of("qwZ send", u));
    Staging recv = m.staging(bytes_per_rank * n, DType::u8, Engine::Impl::name_of("qwZ receive", u));
    // Dequantized in fp32: into the destination when that is fp32, else into a staging buffer converted from.
    Staging values;
    if (c != DType::f32) values = m.staging(padded, DType::f32, Engine::Impl::name_of("qwZ values", u));
    m.q.enqueue(m.gather, Engine::Impl::name_of("quantize", u), {reads(master), writes(send->id)},
                [&dev, from, s, spec, send] { dev.quantize(from, s, spec, bytes(send)); });
    m.q.collective(m.gather, Engine::Impl::name_of("all_gather (qwZ)", u), {&shard},
                   {reads(send->id), writes(recv->id)}, [&shard, send, recv, bytes_per_rank] {
                     return shard.all_gather_async(send->data(), recv->data(), bytes_per_rank, DType::u8);
                   });
    std::vector<BufferAccess> access{reads(recv->id), writes(dest.id)};
    if (values) access.push_back(writes(values->id));
    m.q.enqueue(m.gather, Engine::Impl::name_of("dequantize", u), access,
                [&dev, recv, out, values, s, bytes_per_rank, n, spec, padded, t, c] {
                  float* f = values ? reinterpret_cast<float*>(values->data()) : reinterpret_cast<float*>(out);
                  for (std::size_t j = 0; j < n; ++j) dev.dequantize(bytes(recv) + j * bytes_per_rank, s, spec, f + j * s);
                  if (values) {
                    dev.convert(f, DType::f32, out, c, padded);  // c == t: the conversion rounds to precision.param
                  } else {
                    dev.round_to(f, padded, t);
                  }
                });
    release.push_back({send, Engine::Impl::name_of("free qwZ send", u)});
    release.push_back({recv, Engine::Impl::name_of("free qwZ receive", u)});
    if (values) release.push_back({values, Engine::Impl::name_of("free qwZ values", u)});
  }
};

class SecondaryGather final : public ParamGather {
 public:
  void enqueue(Engine::Impl& m, int u, Tracked<std::byte>& dest, std::vector<ReleaseAfter>& release) const override {
    const std::size_t padded = m.geo(u).padded_numel;
    comm::Communicator& hpz = m.mesh.hpz();
    const std::size_t slice = padded / static_cast<std::size_t>(hpz.size());
    const DType t = m.o.param_dtype;
    const DType c = m.o.compute_dtype;
    std::byte* out = dest.data();
    DeviceOps& dev = m.dev;
    Staging from = m.secondary[static_cast<std::size_t>(u)];
    if (c == t) {  // the slices are in the compute dtype: straight into the destination
      m.q.collective(m.gather, Engine::Impl::name_of("all_gather (hpZ)", u), {&hpz}, {reads(from->id), writes(dest.id)},
                     [&hpz, from, out, slice, t] { return hpz.all_gather_async(from->data(), out, slice, t); });
      return;
    }
    Staging recv = m.staging(padded, t, Engine::Impl::name_of("hpZ receive", u));
    m.q.collective(m.gather, Engine::Impl::name_of("all_gather (hpZ)", u), {&hpz}, {reads(from->id), writes(recv->id)},
                   [&hpz, from, recv, slice, t] { return hpz.all_gather_async(from->data(), recv->data(), slice, t); });
    m.q.enqueue(m.gather, Engine::Impl::name_of("convert gathered", u), {reads(recv->id), writes(dest.id)},
                [&dev, recv, out, padded, t, c] { dev.convert(recv->data(), t, out, c, padded); });
    release.push_back({recv, Engine::Impl::name_of("free hpZ receive", u)});
  }
};

// ---------------------------------------------------------------------------------------- ShardReduction

class ExactReduceScatter final : public ShardReduction {
 public:
  void enqueue(Engine::Impl& m, int u, std::vector<ReleaseAfter>& release) const override {
    const UnitGeometry& g = m.geo(u);
    float* full = m.grads(u);
    const BufferId full_id = m.grads_id(u);
    const DType t = m.o.reduce_dtype;
    const std::size_t s = g.shard_numel;
    const std::size_t padded = g.padded_numel;
    DeviceOps& dev = m.dev;
    comm::Communicator& shard = m.shard();
    Staging recv = m.staging(s, t, Engine::Impl::name_of("reduce_scatter receive", u));
    Staging send;
    const void* send_data = full;
    BufferId send_id = full_id;
    if (t != DType::f32) {
      send = m.staging(padded, t, Engine::Impl::name_of("reduce_scatter send", u));
      m.q.enqueue(m.reduce, Engine::Impl::name_of("convert gradients", u), {reads(full_id), writes(send->id)},
                  [&dev, full, send, padded, t] { dev.convert(full, DType::f32, send->data(), t, padded); });
      send_data = send->data();
      send_id = send->id;
    }
    m.q.collective(m.reduce, Engine::Impl::name_of("reduce_scatter", u), {&shard}, {reads(send_id), writes(recv->id)},
                   [&shard, send, send_data, recv, s, t] {
                     return shard.reduce_scatter_async(send_data, recv->data(), s, t, comm::ReduceOp::avg);
                   });
    float* shard_grad = m.unit(u).grad_shard.data();
    const BufferId shard_id = m.grad_shard_id[static_cast<std::size_t>(u)];
    if (m.faults.early_staging_free) {
      m.release_after(recv, m.q.record(m.reduce), Engine::Impl::name_of("free reduce_scatter receive", u));
    }
    m.q.enqueue(m.reduce, Engine::Impl::name_of("accumulate gradient shard", u), {reads(recv->id), writes(shard_id)},
                [&dev, shard_grad, recv, s, t] { dev.accumulate_from(shard_grad, recv->data(), t, s, 1.0f); });
    release.push_back({recv, Engine::Impl::name_of("free reduce_scatter receive", u)});
    if (send) release.push_back({send, Engine::Impl::name_of("free reduce_scatter send", u)});
  }
};

// qgZ (zeropp.hpp): the hops are nonblocking collectives between quantize, requantize and sum steps on the reduce
// queue; each hop's buffers go back after the step that consumes them.
class QuantizedReduceScatter final : public ShardReduction {
 public:
  void enqueue(Engine::Impl& m, int u, std::vector<ReleaseAfter>& release) const override {
    const UnitGeometry& g = m.geo(u);
    float* full = m.grads(u);
    const BufferId full_id = m.grads_id(u);
    const std::size_t s = g.shard_numel;
    const std::size_t padded = g.padded_numel;
    const quant::QuantSpec spec = m.grad_spec();
    const std::size_t msg = message_bytes(s, spec);
    const std::vector<std::vector<int>>* at = &m.shard_rank_at;
    comm::Communicator* last_hop = &m.mesh.cross_node();
    if (m.hybrid) {
      at = &m.one_group_at;
      last_hop = &m.shard();
    }
    const std::size_t nodes = at->size();
    const std::size_t p = at->front().size();
    DeviceOps& dev = m.dev;
    StreamQueues& q = m.q;
    const QueueId reduce = m.reduce;
    const auto name = [u](const char* what) { return Engine::Impl::name_of(what, u); };
    if (m.o.param_dtype == DType::f16) {
      // fp16 overflow: quantizing would throw on this rank only. The rank sends zeros and sets the flag, and the
      // scaler skips the step.
      double* flag = m.scalar(Engine::Impl::Scalar::nonfinite_flag);
      q.enqueue(reduce, name("overflow check"), {writes(full_id), writes(m.flag_id)},
                [&dev, full, padded, flag] { dev.zero_if_nonfinite(full, padded, flag); });
    }
    Staging sum = m.staging(s, DType::f32, name("qgZ sum"));
    Staging hop2_send = m.staging(nodes * msg, DType::u8, name("qgZ hop-2 send"));
    Staging hop2_recv = m.staging(nodes * msg, DType::u8, name("qgZ hop-2 receive"));
    if (p == 1) {
      q.enqueue(
          reduce, name("qgZ quantize"), {reads(full_id), writes(hop2_send->id)},
          [&dev, full, s, spec, at, hop2_send] { qgz_quantize_slices(dev, full, s, spec, *at, bytes(hop2_send)); });
    } else {
      comm::Communicator& node = m.mesh.node();
      Staging send = m.staging(p * nodes * msg, DType::u8, name("qgZ hop-1 send"));
      Staging recv = m.staging(p * nodes * msg, DType::u8, name("qgZ hop-1 receive"));
      q.enqueue(reduce, name("qgZ quantize"), {reads(full_id), writes(send->id)},
                [&dev, full, s, spec, at, send] { qgz_quantize_slices(dev, full, s, spec, *at, bytes(send)); });
      q.collective(reduce, name("qgZ all_to_all (node)"), {&node}, {reads(send->id), writes(recv->id)},
                   [&node, send, recv, nodes, msg] {
                     return node.all_to_all_async(send->data(), recv->data(), nodes * msg, DType::u8);
                   });
      q.enqueue(reduce, name("qgZ requantize"), {reads(recv->id), writes(hop2_send->id)},
                [&dev, recv, hop2_send, s, spec, p, nodes] {
                  qgz_requantize(dev, bytes(recv), s, spec, p, nodes, bytes(hop2_send));
                });
      const StreamEvent requantized = q.record(reduce);
      m.release_after(send, requantized, name("free qgZ hop-1 send"));
      m.release_after(recv, requantized, name("free qgZ hop-1 receive"));
    }
    q.collective(reduce, name("qgZ all_to_all"), {last_hop}, {reads(hop2_send->id), writes(hop2_recv->id)},
                 [last_hop, hop2_send, hop2_recv, msg] {
                   return last_hop->all_to_all_async(hop2_send->data(), hop2_recv->data(), msg, DType::u8);
                 });
    q.enqueue(reduce, name("qgZ sum"), {reads(hop2_recv->id), writes(sum->id)}, [&dev, hop2_recv, sum, nodes, s, spec] {
      qgz_sum(dev, bytes(hop2_recv), nodes, s, spec, reinterpret_cast<float*>(sum->data()));
    });
    const StreamEvent summed = q.record(reduce);
    m.release_after(hop2_send, summed, name("free qgZ hop-2 send"));
    m.release_after(hop2_recv, summed, name("free qgZ hop-2 receive"));
    const float inverse = 1.0f / static_cast<float>(m.shard().size());
    float* shard_grad = m.unit(u).grad_shard.data();
    const BufferId shard_id = m.grad_shard_id[static_cast<std::size_t>(u)];
    q.enqueue(reduce, name("accumulate gradient shard"), {reads(sum->id), writes(shard_id)},
              [&dev, shard_grad, sum, s, inverse] {
                dev.accumulate(shard_grad, reinterpret_cast<const float*>(sum->data()), s, inverse);
              });
    release.push_back({sum, name("free qgZ sum")});
  }
};

}  // namespace

std::unique_ptr<ParamGather> make_exact_gather() {
  return std::make_unique<ExactGather>();
}
std::unique_ptr<ParamGather> make_quantized_gather() {
  return std::make_unique<QuantizedGather>();
}
std::unique_ptr<ParamGather> make_secondary_gather() {
  return std::make_unique<SecondaryGather>();
}
std::unique_ptr<ShardReduction> make_exact_reduce_scatter() {
  return std::make_unique<ExactReduceScatter>();
}
std::unique_ptr<ShardReduction> make_quantized_reduce_scatter() {
  return std::make_unique<QuantizedReduceScatter>();
}

}  // namespace hsdp::shard
