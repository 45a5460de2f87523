// What device.type = cuda can honour (hsdp/train/cuda_backend.hpp), checked in every build.
#include <string>

#include "hsdp/core/error.hpp"
#include "hsdp/train/cuda_backend.hpp"

namespace hsdp::train {

void check_cuda_options(const TrainOptions& o) {
  const std::string what = "device.type=cuda ";
  if (o.engine.strategy != shard::Sharding::no_shard) {
    throw_config(what + "trains data-parallel only: parallel.sharding=" + shard::to_string(o.engine.strategy) +
                 " runs on the CPU (device.type=cpu); use parallel.sharding=no_shard on GPUs");
  }
  if (o.engine.param_dtype != DType::bf16) {
    throw_config(what + "computes in bf16 with fp32 master weights: set precision.param=bf16 (it is " +
                 std::string(to_string(o.engine.param_dtype)) + ")");
  }
  if (o.engine.reduce_dtype != DType::f32) {
    throw_config(what + "reduces gradients in fp32: set precision.reduce=fp32 (it is " +
                 std::string(to_string(o.engine.reduce_dtype)) + ")");
  }
  const auto& z = o.engine.zeropp;
  if (z.quantized_weights || z.quantized_gradients || z.hpz_partition_size > 0) {
    throw_config(what + "has no ZeRO++ (zeropp.*): it needs a sharded strategy, which runs on the CPU only");
  }
  if (o.activation_checkpointing) {
    throw_config(what + "keeps every activation: set train.activation_checkpointing=false");
  }
  if (o.comm_stage != comm::Staging::automatic) {
    throw_config(what + "runs its own data-parallel collectives, staged through pinned host memory where MPI is not "
                 "CUDA-aware: comm.stage=" + std::string(comm::to_string(o.comm_stage)) +
                 " is the CPU engine's; set comm.stage=auto");
  }
  if (o.log_trace) throw_config(what + "has no timeline yet: log.trace is the CPU engine's; set log.trace=false");
}

}  // namespace hsdp::train
