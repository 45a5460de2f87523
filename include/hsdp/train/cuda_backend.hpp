#pragma once
// device.type = cuda: the sharding engine (hsdp/shard/engine.hpp) on the rank's GPU, picked from what the host's
// ranks see (hsdp::device::assign_gpus, in cuda_mesh_carrier), for every strategy and ZeRO++:
//   device    CudaDeviceOps (stream-ordered memory, the element kernels) and the CUDA executor: each of the engine's
//             queues a CUDA stream, the compute queue on the model's;
//   model     GptCuda<bf16> with precision.param=bf16 (the engine's compute copies in bf16), GptCuda<float>
//             otherwise; activation checkpointing as the deck says;
//   groups    the mesh's groups carried by comm::device_carrier: NCCL inside a node (comm.intra=nccl, one GPU per
//             rank) or MPI staged through pinned host memory (comm.intra=mpi: ranks may share a GPU), comm.inter
//             across nodes; CUDA-aware MPI gets the device pointers of the collectives that only move bytes.
// Written and checked on the CPU (the engine's suites on the threads executor, staged groups, bf16 compute copies);
// hsdp-train names on rank 0 the commit of the last GPU validation (tests/gpu/device_check.sh; docs/gpu.md records
// each). Built only with the CUDA backend (CUDA and NCCL); otherwise these say the build lacks it.
#include <mpi.h>

#include <memory>
#include <string>

#include "hsdp/comm/mesh.hpp"
#include "hsdp/core/memory.hpp"
#include "hsdp/train/backend.hpp"

namespace hsdp::train {

// Selects this rank's GPU (device::assign_gpus over what the host's ranks see) and returns what carries the mesh's
// groups over its memory. Collective over `world`; a config Error on every rank where a rank sees no GPU or
// comm.intra=nccl meets ranks of a node that share a GPU (they must use comm.intra=mpi), and where comm.stage=direct
// meets an MPI that is not CUDA-aware. Before the mesh is built.
comm::MeshCarrier cuda_mesh_carrier(const TrainOptions& options, MPI_Comm world, const comm::Topology& topology,
                                    const Logger& log);

// This rank's GPU's free memory (cudaMemGetInfo, after cuda_mesh_carrier selected it), how many of the host's ranks
// are on that GPU (by its identity, gathered over the host's ranks: collective over `world`), and the GPU's name
// for messages ("GPU 0 (NVIDIA H100) of host n1").
struct GpuMemory {
  HostMemory memory;
  int sharing = 1;
  std::string where;
};
GpuMemory cuda_memory_available(MPI_Comm world);

// No collective of the engine's (Backend::start follows). Expects the mesh built with
// cuda_mesh_carrier's carrier.
std::unique_ptr<Backend> make_cuda_backend(const TrainOptions& options, const model::ModelLayout& layout,
                                           comm::ProcessMesh& mesh, MemoryAccountant& memory, const Logger& log);

}  // namespace hsdp::train
