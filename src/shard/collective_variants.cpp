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
  void enqueue(const GatherContext& c, Tracked<std::byte>& dest, std::vector<ReleaseAfter>& release) const override {
    const UnitGeometry& g = c.geo;
    const DType t = c.options.param_dtype;
    const DType compute = c.options.compute_dtype;
    const BufferId master = c.master_id;
    const float* from = c.master;
    const std::size_t s = g.shard_numel;
    const std::size_t padded = g.padded_numel;
    std::byte* out = dest.data();
    comm::Communicator& shard = c.shard;
    if (t == DType::f32) {  // then the compute dtype is fp32 too
      c.q.collective(c.queue, c.name("all_gather"), {&shard}, {reads(master), writes(dest.id)},
                     [&shard, from, out, s] { return shard.all_gather_async(from, out, s, DType::f32); });
      return;
    }
    Staging send = c.staging(s, t, "gather send");
    DeviceOps& dev = c.dev;
    c.q.enqueue(c.queue, c.name("convert master"), {reads(master), writes(send->id)},
                [&dev, from, send, s, t] { dev.convert(from, DType::f32, send->data(), t, s); });
    release.push_back({send, c.name("free gather send")});
    if (compute == t) {  // gathered in the compute dtype: straight into the destination
      c.q.collective(c.queue, c.name("all_gather"), {&shard}, {reads(send->id), writes(dest.id)},
                     [&shard, send, out, s, t] { return shard.all_gather_async(send->data(), out, s, t); });
      return;
    }
    Staging recv = c.staging(padded, t, "gather receive");
    c.q.collective(c.queue, c.name("all_gather"), {&shard}, {reads(send->id), writes(recv->id)},
                   [&shard, send, recv, s, t] { return shard.all_gather_async(send->data(), recv->data(), s, t); });
    c.q.enqueue(c.queue, c.name("convert gathered"), {reads(recv->id), writes(dest.id)},
                [&dev, recv, out, padded, t, compute] { dev.convert(recv->data(), t, out, compute, padded); });
    release.push_back({recv, c.name("free gather receive")});
  }
};

class QuantizedGather final : public ParamGather {
 public:
  void enqueue(const GatherContext& c, Tracked<std::byte>& dest, std::vector<ReleaseAfter>& release) const override {
    const quant::QuantSpec spec = c.weight_spec();
    const std::size_t s = c.geo.shard_numel;
    const std::size_t padded = c.geo.padded_numel;
    const std::size_t bytes_per_rank = message_bytes(s, spec);
    const auto n = static_cast<std::size_t>(c.shard.size());
    const DType t = c.options.param_dtype;
    const DType compute = c.options.compute_dtype;
    const BufferId master = c.master_id;
    const float* from = c.master;
    std::byte* out = dest.data();
    DeviceOps& dev = c.dev;
    comm::Communicator& shard = c.shard;
    Staging send = c.staging(bytes_per_rank, DType::u8, "qwZ send");
    Staging recv = c.staging(bytes_per_rank * n, DType::u8, "qwZ receive");
    // Dequantized in fp32: into the destination when that is fp32, else one rank's slice at a time into a staging
    // buffer of one shard, converted from.
    Staging values;
    if (compute != DType::f32) values = c.staging(s, DType::f32, "qwZ values");
    c.q.enqueue(c.queue, c.name("quantize"), {reads(master), writes(send->id)},
                [&dev, from, s, spec, send] { dev.quantize(from, s, spec, bytes(send)); });
    c.q.collective(c.queue, c.name("all_gather (qwZ)"), {&shard}, {reads(send->id), writes(recv->id)},
                   [&shard, send, recv, bytes_per_rank] {
                     return shard.all_gather_async(send->data(), recv->data(), bytes_per_rank, DType::u8);
                   });
    std::vector<BufferAccess> access{reads(recv->id), writes(dest.id)};
    if (values) access.push_back(writes(values->id));
    c.q.enqueue(c.queue, c.name("dequantize"), access,
                [&dev, recv, out, values, s, bytes_per_rank, n, spec, padded, t, compute] {
                  if (values) {  // compute == t: the conversion rounds to precision.param
                    auto* f = reinterpret_cast<float*>(values->data());
                    const std::size_t slice_bytes = s * size_of(compute);
                    for (std::size_t j = 0; j < n; ++j) {
                      dev.dequantize(bytes(recv) + j * bytes_per_rank, s, spec, f);
                      dev.convert(f, DType::f32, out + j * slice_bytes, compute, s);
                    }
                  } else {
                    auto* f = reinterpret_cast<float*>(out);
                    for (std::size_t j = 0; j < n; ++j)
                      dev.dequantize(bytes(recv) + j * bytes_per_rank, s, spec, f + j * s);
                    dev.round_to(f, padded, t);
                  }
                });
    release.push_back({send, c.name("free qwZ send")});
    release.push_back({recv, c.name("free qwZ receive")});
    if (values) release.push_back({values, c.name("free qwZ values")});
  }
};

class SecondaryGather final : public ParamGather {
 public:
  void enqueue(const GatherContext& c, Tracked<std::byte>& dest, std::vector<ReleaseAfter>& release) const override {
    const std::size_t padded = c.geo.padded_numel;
    comm::Communicator& hpz = c.mesh.hpz();
    const std::size_t slice = padded / static_cast<std::size_t>(hpz.size());
    const DType t = c.options.param_dtype;
    const DType compute = c.options.compute_dtype;
    std::byte* out = dest.data();
    DeviceOps& dev = c.dev;
    Staging from = c.secondary;
    if (compute == t) {  // the slices are in the compute dtype: straight into the destination
      c.q.collective(c.queue, c.name("all_gather (hpZ)"), {&hpz}, {reads(from->id), writes(dest.id)},
                     [&hpz, from, out, slice, t] { return hpz.all_gather_async(from->data(), out, slice, t); });
      return;
    }
    Staging recv = c.staging(padded, t, "hpZ receive");
    c.q.collective(c.queue, c.name("all_gather (hpZ)"), {&hpz}, {reads(from->id), writes(recv->id)},
                   [&hpz, from, recv, slice, t] { return hpz.all_gather_async(from->data(), recv->data(), slice, t); });
    c.q.enqueue(c.queue, c.name("convert gathered"), {reads(recv->id), writes(dest.id)},
                [&dev, recv, out, padded, t, compute] { dev.convert(recv->data(), t, out, compute, padded); });
    release.push_back({recv, c.name("free hpZ receive")});
  }
};

// ---------------------------------------------------------------------------------------- ShardReduction

class ExactReduceScatter final : public ShardReduction {
 public:
  void enqueue(const ReductionContext& c, std::vector<ReleaseAfter>& release) const override {
    const UnitGeometry& g = c.geo;
    float* full = c.grads;
    const BufferId full_id = c.grads_id;
    const DType t = c.options.reduce_dtype;
    const std::size_t s = g.shard_numel;
    const std::size_t padded = g.padded_numel;
    DeviceOps& dev = c.dev;
    comm::Communicator& shard = c.shard;
    Staging recv = c.staging(s, t, "reduce_scatter receive");
    Staging send;
    const void* send_data = full;
    BufferId send_id = full_id;
    if (t != DType::f32) {
      send = c.staging(padded, t, "reduce_scatter send");
      c.q.enqueue(c.queue, c.name("convert gradients"), {reads(full_id), writes(send->id)},
                  [&dev, full, send, padded, t] { dev.convert(full, DType::f32, send->data(), t, padded); });
      send_data = send->data();
      send_id = send->id;
    }
    c.q.collective(c.queue, c.name("reduce_scatter"), {&shard}, {reads(send_id), writes(recv->id)},
                   [&shard, send, send_data, recv, s, t] {
                     return shard.reduce_scatter_async(send_data, recv->data(), s, t, comm::ReduceOp::avg);
                   });
    float* shard_grad = c.grad_shard;
    const BufferId shard_id = c.grad_shard_id;
    if (c.faults.early_staging_free) {
      c.release_after(recv, c.q.record(c.queue), "free reduce_scatter receive");
    }
    c.q.enqueue(c.queue, c.name("accumulate gradient shard"), {reads(recv->id), writes(shard_id)},
                [&dev, shard_grad, recv, s, t] { dev.accumulate_from(shard_grad, recv->data(), t, s, 1.0f); });
    release.push_back({recv, c.name("free reduce_scatter receive")});
    if (send) release.push_back({send, c.name("free reduce_scatter send")});
  }
};

// qgZ (zeropp.hpp): the hops are nonblocking collectives between quantize, requantize and sum steps on the reduce
// queue; each hop's buffers go back after the step that consumes them.
class QuantizedReduceScatter final : public ShardReduction {
 public:
  void enqueue(const ReductionContext& c, std::vector<ReleaseAfter>& release) const override {
    const UnitGeometry& g = c.geo;
    float* full = c.grads;
    const BufferId full_id = c.grads_id;
    const std::size_t s = g.shard_numel;
    const std::size_t padded = g.padded_numel;
    const quant::QuantSpec spec = c.grad_spec();
    const std::size_t msg = message_bytes(s, spec);
    const std::vector<std::vector<int>>* at = c.qgz_at;
    comm::Communicator* last_hop = c.qgz_last_hop;
    const std::size_t nodes = at->size();
    const std::size_t p = at->front().size();
    DeviceOps& dev = c.dev;
    StreamQueues& q = c.q;
    const QueueId reduce = c.queue;
    // A non-finite gradient (an fp16 overflow, or a diverging bf16/fp32 run): quantizing would throw on this rank
    // only, and the others would wait in the all-to-all. The rank sends zeros and sets the flag, which
    // step_scalars(true) sums over the world: fp16's scaler skips the step, bf16 and fp32 end as a divergence.
    double* flag = c.nonfinite_flag;
    q.enqueue(reduce, c.name("qgZ non-finite check"), {writes(full_id), writes(c.flag_id)},
              [&dev, full, padded, flag] { dev.zero_if_nonfinite(full, padded, flag); });
    Staging sum = c.staging(s, DType::f32, "qgZ sum");
    Staging hop2_send = c.staging(nodes * msg, DType::u8, "qgZ hop-2 send");
    Staging hop2_recv = c.staging(nodes * msg, DType::u8, "qgZ hop-2 receive");
    if (p == 1) {
      q.enqueue(
          reduce, c.name("qgZ quantize"), {reads(full_id), writes(hop2_send->id)},
          [&dev, full, s, spec, at, hop2_send] { qgz_quantize_slices(dev, full, s, spec, *at, bytes(hop2_send)); });
    } else {
      comm::Communicator& node = c.mesh.node();
      Staging send = c.staging(p * nodes * msg, DType::u8, "qgZ hop-1 send");
      Staging recv = c.staging(p * nodes * msg, DType::u8, "qgZ hop-1 receive");
      q.enqueue(reduce, c.name("qgZ quantize"), {reads(full_id), writes(send->id)},
                [&dev, full, s, spec, at, send] { qgz_quantize_slices(dev, full, s, spec, *at, bytes(send)); });
      q.collective(reduce, c.name("qgZ all_to_all (node)"), {&node}, {reads(send->id), writes(recv->id)},
                   [&node, send, recv, nodes, msg] {
                     return node.all_to_all_async(send->data(), recv->data(), nodes * msg, DType::u8);
                   });
      q.enqueue(reduce, c.name("qgZ requantize"), {reads(recv->id), writes(hop2_send->id)},
                [&dev, recv, hop2_send, s, spec, p, nodes] {
                  qgz_requantize(dev, bytes(recv), s, spec, p, nodes, bytes(hop2_send));
                });
      const StreamEvent requantized = q.record(reduce);
      c.release_after(send, requantized, "free qgZ hop-1 send");
      c.release_after(recv, requantized, "free qgZ hop-1 receive");
    }
    q.collective(reduce, c.name("qgZ all_to_all"), {last_hop}, {reads(hop2_send->id), writes(hop2_recv->id)},
                 [last_hop, hop2_send, hop2_recv, msg] {
                   return last_hop->all_to_all_async(hop2_send->data(), hop2_recv->data(), msg, DType::u8);
                 });
    q.enqueue(reduce, c.name("qgZ sum"), {reads(hop2_recv->id), writes(sum->id)},
              [&dev, hop2_recv, sum, nodes, s, spec] {
                qgz_sum(dev, bytes(hop2_recv), nodes, s, spec, reinterpret_cast<float*>(sum->data()));
              });
    const StreamEvent summed = q.record(reduce);
    c.release_after(hop2_send, summed, "free qgZ hop-2 send");
    c.release_after(hop2_recv, summed, "free qgZ hop-2 receive");
    const float inverse = 1.0f / static_cast<float>(c.shard.size());
    float* shard_grad = c.grad_shard;
    const BufferId shard_id = c.grad_shard_id;
    q.enqueue(reduce, c.name("accumulate gradient shard"), {reads(sum->id), writes(shard_id)},
              [&dev, shard_grad, sum, s, inverse] {
                dev.accumulate(shard_grad, reinterpret_cast<const float*>(sum->data()), s, inverse);
              });
    release.push_back({sum, c.name("free qgZ sum")});
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
