#pragma once
// EngineOptions: how shard::Engine shards, rounds, reduces and schedules (engine.hpp), in a header of its own so that
// the formulas (formulas.hpp) and the planner read them without the engine.
#include <string>

#include "hsdp/core/dtype.hpp"
#include "hsdp/shard/strategy.hpp"
#include "hsdp/shard/zeropp.hpp"
#include "hsdp/stream/queues.hpp"

namespace hsdp::shard {

using stream::StreamOptions;

// The compute dtype of hsdp's models: a GPU's GptCuda computes in bf16 with precision.param=bf16 (bf16 compute
// copies) and in fp32 otherwise; the CPU's Gpt<float> always in fp32.
constexpr DType model_compute_dtype(bool gpu, DType param_dtype) {
  return gpu && param_dtype == DType::bf16 ? DType::bf16 : DType::f32;
}

struct EngineOptions {
  Sharding strategy = Sharding::no_shard;
  DType param_dtype = DType::f32;
  DType reduce_dtype = DType::f32;
  // The dtype the model computes in (UnitModel::compute_dtype): the gathered and persistent full parameters are in
  // it. fp32 (the CPU's; with a lower param_dtype the values are rounded to it), or param_dtype itself (a GPU's bf16
  // model: gathers land in bf16 without a conversion).
  DType compute_dtype = DType::f32;
  bool prefetch = true;
  double bucket_mb = 25.0;
  int grad_accum = 1;
  ZeroPPOptions zeropp;    // full_shard and hybrid_shard only
  StreamOptions streams;   // how the queues run: inline (default), checked, on worker threads (hsdp/stream/queues.hpp)
  std::string trace_file;  // non-empty: every queue operation, collective and host wait to this file (trace.hpp)
  // true: the constructor issues no collective; the first gather of what the strategy keeps whole (zero1's full
  // parameters) waits for Engine::derive_if_pending or the first use. For a caller that builds the engine inside
  // comm::agree, where a rank whose construction failed would leave the others in that gather.
  bool defer_first_gather = false;
};

}  // namespace hsdp::shard
