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
// The engine picks the variants once (Engine::configure_zeropp) and calls them; what surrounds a variant (the wait
// for the masters' update, hpZ's kept slice, the release of the full gradient, hybrid's all-reduce across
// replicas) is the engine's. A variant enqueues its steps and hands back the buffers that go back to their pools
// after the event that ends the whole operation.
#include <memory>
#include <string>
#include <vector>

#include "hsdp/shard/engine.hpp"

namespace hsdp::shard {

namespace detail {
template <typename T>
struct Tracked;
}  // namespace detail

// A buffer to release after the operation's event, and what the release is called (for the checker's reports).
struct ReleaseAfter {
  std::shared_ptr<detail::Tracked<std::byte>> buffer;
  std::string what;
};

class ParamGather {
 public:
  virtual ~ParamGather() = default;
  virtual void enqueue(Engine::Impl& m, int u, detail::Tracked<std::byte>& dest,
                       std::vector<ReleaseAfter>& release) const = 0;
};

class ShardReduction {
 public:
  virtual ~ShardReduction() = default;
  virtual void enqueue(Engine::Impl& m, int u, std::vector<ReleaseAfter>& release) const = 0;
};

std::unique_ptr<ParamGather> make_exact_gather();
std::unique_ptr<ParamGather> make_quantized_gather();
std::unique_ptr<ParamGather> make_secondary_gather();
std::unique_ptr<ShardReduction> make_exact_reduce_scatter();
std::unique_ptr<ShardReduction> make_quantized_reduce_scatter();

}  // namespace hsdp::shard
