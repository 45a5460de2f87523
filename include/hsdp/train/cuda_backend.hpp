#pragma once
// device.type = cuda: the training backend on the rank's GPU (picked by hsdp::device::select_device: local rank
// modulo the visible devices).
//
// What it does: the GPT of hsdp/model/cuda/gpt.hpp (bf16 compute copy, cuBLASLt GEMMs with fp32 accumulation),
// fp32 master weights, gradients and AdamW state on the GPU, data-parallel over every rank (parallel.sharding =
// no_shard, DDP): during the backward of the last micro-batch each unit's gradient is all-reduced over the
// node's ranks with NCCL on a communication stream as soon as backward has written it (ordered by an event, so
// the rest of backward overlaps it) -- or, with comm.intra=mpi (ranks may then share a GPU, as when one GPU emulates
// nodes), over the node with MPI after backward, staged through pinned host memory or CUDA-aware; then, on more
// than one node, across nodes through comm.inter (mpi: CUDA-aware MPI or staging through pinned host memory; nccl). Gradients are summed and the loss gradient is divided
// by the world size, so the result is the global mean as on the CPU.
//
// What it refuses (config errors, checked by check_cuda_options before any GPU work): other sharding strategies,
// precision.param other than bf16 (the kernels compute in bf16), precision.reduce other than fp32, ZeRO++ and
// activation checkpointing. Built only with the CUDA backend; otherwise make_cuda_backend says the build lacks it.
#include <memory>

#include "hsdp/train/backend.hpp"

namespace hsdp::train {

// Throws a config Error naming the first deck key device.type = cuda cannot honour (the trainer calls it before
// make_cuda_backend).
void check_cuda_options(const TrainOptions& options);

// Collective over the mesh (NCCL set-up). Expects options that passed check_cuda_options.
std::unique_ptr<Backend> make_cuda_backend(const TrainOptions& options, const model::ModelLayout& layout,
                                           comm::ProcessMesh& mesh, MemoryAccountant& memory, const Logger& log);

}  // namespace hsdp::train
