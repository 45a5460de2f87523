#pragma once
// Before the model is allocated: the model state (shard::model_state_bytes) and activations this rank will hold,
// both exact for the engine (the CPU's Gpt<float>: model::activation_bytes; a GPU's GptCuda in the compute dtype:
// model::gpu_activation_bytes, with bf16 compute copies in the state), against the memory it has: the host's
// (host_memory_available()) or its GPU's free memory (cudaMemGetInfo), shared by the ranks on it. What does not fit
// is a config error that names the keys that would make it fit, instead of std::bad_alloc or cudaErrorMemoryAllocation
// half-way through building the model.
// `topo` and `shard_size`: the mesh's (the island's topology with islands); `memory` shared by `sharing` ranks.
#include <string>

#include "hsdp/comm/topology.hpp"
#include "hsdp/core/memory.hpp"
#include "hsdp/model/layout.hpp"
#include "hsdp/train/options.hpp"

namespace hsdp::train {

void check_memory_fits(const TrainOptions& o, const model::ModelLayout& layout, const comm::Topology& topo,
                       int shard_size, const HostMemory& memory, int sharing, const std::string& where);

}  // namespace hsdp::train
