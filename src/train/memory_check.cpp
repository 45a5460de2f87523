// The memory check before the model is allocated (train/memory_check.hpp).
#include "hsdp/train/memory_check.hpp"

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "hsdp/core/error.hpp"
#include "hsdp/model/config.hpp"
#include "hsdp/model/gpu_activations.hpp"
#include "hsdp/shard/engine_options.hpp"
#include "hsdp/shard/formulas.hpp"
#include "hsdp/shard/outer.hpp"

namespace hsdp::train {
namespace {

std::string gib(double bytes) {
  std::ostringstream text;
  text.precision(3);
  text << bytes / double(1 << 30) << " GiB";
  return text.str();
}

}  // namespace

void check_memory_fits(const TrainOptions& o, const model::ModelLayout& layout, const comm::Topology& topo,
                       int shard_size, const HostMemory& memory, int sharing, const std::string& where) {
  if (memory.available == 0) return;  // nothing to compare with
  const double available = static_cast<double>(memory.available) / sharing;
  const int world = topo.world_size;
  const bool gpu = o.device_type == device::DeviceType::cuda;
  const DType compute = shard::model_compute_dtype(gpu, o.engine.param_dtype);
  // With islands, each rank also keeps the outer state of its shard (no_shard: of the whole model) and the
  // exchange's scratch, in host memory (on a GPU they are not the device's, and are not checked).
  const shard::UnitSizes units = shard::UnitSizes::of(layout);
  const auto state = [&](shard::Sharding s, int shard_size) {
    double bytes = static_cast<double>(shard::model_state_bytes(layout, s, shard_size, o.engine.param_dtype, compute));
    if (o.islands > 1 && !gpu) {
      bytes += static_cast<double>(shard::outer_state_bytes(units, shard_size, o.outer.overlap > 0)) +
               static_cast<double>(shard::outer_scratch_bytes(
                   o.outer, shard::fragment_counts(units.numel, shard_size, o.outer.fragments), o.islands));
    }
    return bytes;
  };
  const auto activations = [&](std::int64_t micro_batch, bool checkpointing) {
    const model::ActivationShape shape = model::activation_shape(o.model);
    return static_cast<double>(
        gpu ? model::gpu_activation_bytes(shape, micro_batch, o.seq_len, checkpointing, size_of(compute))
            : model::activation_bytes(shape, micro_batch, o.seq_len, checkpointing));
  };
  const double mine_state = state(o.engine.strategy, shard_size);
  const double mine_act = activations(o.micro_batch, o.activation_checkpointing);
  if (mine_state + mine_act <= available) return;

  std::vector<std::string> fixes;
  if (!o.activation_checkpointing && mine_state + activations(o.micro_batch, true) <= available) {
    fixes.push_back("train.activation_checkpointing=true");
  }
  // Another strategy is suggested only where it fits with what its step holds beyond state and activations (the
  // estimate hsdp-plan uses: shard_grad_op keeps every unit gathered until the step ends).
  const auto transient = [&](shard::Sharding s) {
    shard::EngineOptions e;
    e.strategy = s;
    e.param_dtype = o.engine.param_dtype;
    e.reduce_dtype = o.engine.reduce_dtype;
    e.compute_dtype = compute;
    e.grad_accum = o.grad_accum;
    return static_cast<double>(shard::transient_bytes(units, e, world, topo.num_nodes(), topo.node_size(topo.node())));
  };
  for (const shard::Sharding s :
       {shard::Sharding::zero1, shard::Sharding::shard_grad_op, shard::Sharding::full_shard}) {
    if (s != o.engine.strategy && state(s, world) + transient(s) + mine_act <= available) {
      fixes.push_back("parallel.sharding=" + std::string(shard::to_string(s)));
      break;
    }
  }
  // Activations are linear in the micro-batch: the largest that fits.
  const double per_sequence = activations(1, o.activation_checkpointing);
  const auto fitting_batch = static_cast<std::int64_t>(
      std::min(static_cast<double>(o.micro_batch - 1), std::floor((available - mine_state) / per_sequence)));
  if (fitting_batch > 0) {
    fixes.push_back("train.micro_batch=" + std::to_string(fitting_batch) +
                    " (with train.grad_accum to keep the batch)");
  }
  std::string advice;
  for (const std::string& f : fixes) advice += (advice.empty() ? "set " : ", or ") + f;
  if (state(shard::Sharding::full_shard, world) > available) {
    advice += std::string(advice.empty() ? "" : "; ") + "run on more ranks (full_shard over " + std::to_string(world) +
              " rank(s) still holds " + gib(state(shard::Sharding::full_shard, world)) + " of model state per rank)";
  }
  throw_config("memory: this rank needs at least " + gib(mine_state + mine_act) + " (model state " + gib(mine_state) +
               " with " + std::string(shard::to_string(o.engine.strategy)) + " over " + std::to_string(shard_size) +
               " rank(s), activations " + gib(mine_act) + " for micro_batch " + std::to_string(o.micro_batch) +
               " x seq_len " + std::to_string(o.seq_len) + ") but has " + gib(available) + " (" + memory.source +
               " of " + where + " / " + std::to_string(sharing) + " rank(s) on it): " +
               (advice.empty() ? "" : advice + "; ") + "`hsdp-plan --config <deck>` shows what fits");
}

}  // namespace hsdp::train
