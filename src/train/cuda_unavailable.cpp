// make_cuda_backend in a build without the CUDA backend (HSDP_CUDA=OFF, or nvcc or NCCL not found).
#include "hsdp/core/error.hpp"
#include "hsdp/train/cuda_backend.hpp"

namespace hsdp::train {

namespace {

[[noreturn]] void built_without_cuda() {
  throw_config(
      "device.type=cuda: this hsdp was built without the CUDA backend (HSDP_CUDA=OFF, or nvcc or NCCL was not "
      "found when it was configured); rebuild where CUDA is installed, or use device.type=cpu");
}

}  // namespace

comm::MeshCarrier cuda_mesh_carrier(const TrainOptions&, MPI_Comm, const comm::Topology&, const Logger&) {
  built_without_cuda();
}

GpuMemory cuda_memory_available(MPI_Comm) {
  built_without_cuda();
}

std::unique_ptr<Backend> make_cuda_backend(const TrainOptions&, const model::ModelLayout&, comm::ProcessMesh&,
                                           MemoryAccountant&, const Logger&) {
  built_without_cuda();
}

}  // namespace hsdp::train
