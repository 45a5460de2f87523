#pragma once
// The variants of the engine's two collectives (private to src/shard), each behind one interface, so that gather
// and reduce-scatter never branch on ZeRO++ (docs/architecture.md, "The engine's schedule"):
//
//   ParamGather      unit u's parameters into full compute parameters [Pp] (EngineOptions::compute_dtype), on the
//                    gather queue
//     exact          all-gather over the shard group in precision.param (straight into the destination where that is
//                    the compute dtype)
//     quantized      qwZ: int8 blocks over the shard group, dequantized and rounded to precision.param
//     secondary      hpZ: from the slices kept after the forward gather, over the hpZ group
//   ShardReduction   unit u's full gradient into this rank's fp32 gradient shard (accumulated), on the reduce queue
//     exact          reduce-scatter (avg) over the shard group in precision.reduce
//     quantized      qgZ: quantized all-to-alls (full_shard: inside the node, then across nodes; hybrid_shard:
//                    inside the node), summed and averaged
//
// The engine picks the variants once (Engine::configure_zeropp) and calls them with a context of what they may use
// (CollectiveContext); what surrounds a variant (the wait for the masters' update, hpZ's kept slice, the release of
// the full gradient, hybrid's all-reduce across replicas) is the engine's. A variant enqueues its steps and hands
// back the buffers that go back to their pools after the event that ends the whole operation.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hsdp/shard/engine.hpp"
#include "hsdp/shard/flat_param.hpp"

namespace hsdp::shard {

namespace detail {
template <typename T>
struct Tracked;
}  // namespace detail

// How the checker names a unit's buffer or operation: "<what> unit <u>".
inline std::string unit_name(const char* what, int u) {
  return std::string(what) + " unit " + std::to_string(u);
}

// A buffer to release after the operation's event, and what the release is called (for the checker's reports).
struct ReleaseAfter {
  std::shared_ptr<detail::Tracked<std::byte>> buffer;
  std::string what;
};

// What a variant may use of the engine, for one unit on one queue (the engine builds it per call): the queues, the
// device, the groups, the precisions, the unit's geometry, and staging buffers from the pools. Not the schedule, the
// optimizer, the other units or the step's scalars (but the fp16 overflow flag a reduction sets).
struct CollectiveContext {
  using Staging = std::shared_ptr<detail::Tracked<std::byte>>;
  int unit;
  const UnitGeometry& geo;
  StreamQueues& q;
  QueueId queue;
  DeviceOps& dev;
  comm::ProcessMesh& mesh;
  comm::Communicator& shard;
  const EngineOptions& options;
  const StreamFaults& faults;  // tests of the checker only
  // A staging buffer of `count` elements of `t` from the pools, tracked as "<what> unit <u>".
  std::function<Staging(std::size_t count, DType t, const char* what)> staging;
  // The buffer goes back to its pool after `event` (a release the variant orders itself, before the operation's).
  std::function<void(Staging, const StreamEvent&, const char* what)> release_after;
  std::string name(const char* what) const { return unit_name(what, unit); }
  quant::QuantSpec weight_spec() const { return {quant::Bits::int8, options.zeropp.block}; }       // qwZ
  quant::QuantSpec grad_spec() const { return {options.zeropp.grad_bits, options.zeropp.block}; }  // qgZ
};

// A gather reads the unit's master shard (or hpZ's kept slice).
struct GatherContext : CollectiveContext {
  const float* master;
  BufferId master_id;
  Staging secondary;  // hpZ: this rank's kept slice of the unit (empty: none)
};

// A reduction reads the unit's full gradient and accumulates into its gradient shard.
struct ReductionContext : CollectiveContext {
  float* grads;
  BufferId grads_id;
  float* grad_shard;
  BufferId grad_shard_id;
  // qgZ: the ranks' places ([node][local] -> rank of the hop's group) and the group of the last hop.
  const std::vector<std::vector<int>>* qgz_at;
  comm::Communicator* qgz_last_hop;
  double* nonfinite_flag;  // set where the gradient holds inf or nan (qgZ, before quantizing)
  BufferId flag_id;
};

class ParamGather {
 public:
  virtual ~ParamGather() = default;
  virtual void enqueue(const GatherContext& c, detail::Tracked<std::byte>& dest,
                       std::vector<ReleaseAfter>& release) const = 0;
};

class ShardReduction {
 public:
  virtual ~ShardReduction() = default;
  virtual void enqueue(const ReductionContext& c, std::vector<ReleaseAfter>& release) const = 0;
};

std::unique_ptr<ParamGather> make_exact_gather();
std::unique_ptr<ParamGather> make_quantized_gather();
std::unique_ptr<ParamGather> make_secondary_gather();
std::unique_ptr<ShardReduction> make_exact_reduce_scatter();
std::unique_ptr<ShardReduction> make_quantized_reduce_scatter();

}  // namespace hsdp::shard
