// make_cuda_backend in a build without the CUDA backend (HSDP_CUDA=OFF, or nvcc or NCCL not found).
#include "hsdp/core/error.hpp"
#include "hsdp/train/cuda_backend.hpp"

namespace hsdp::train {

std::unique_ptr<Backend> make_cuda_backend(const TrainOptions&, const model::ModelLayout&, comm::ProcessMesh&,
                                           MemoryAccountant&, const Logger&) {
  throw_config(
      "device.type=cuda: this hsdp was built without the CUDA backend (HSDP_CUDA=OFF, or nvcc or NCCL was not "
      "found when it was configured); rebuild where CUDA is installed, or use device.type=cpu");
}

}  // namespace hsdp::train
