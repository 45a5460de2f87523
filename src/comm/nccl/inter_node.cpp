// comm.inter = mpi | nccl for device buffers (see make_inter_node_communicator in nccl.hpp).
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI: MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support
#endif

#include <string>

#include "hsdp/comm/nccl.hpp"

namespace hsdp::comm {

bool mpi_is_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

std::unique_ptr<Communicator> make_inter_node_communicator(InterNodeBackend backend, const MpiCommunicator& group,
                                                           std::string name, cudaStream_t compute,
                                                           const CommOptions& options, const Logger& logger) {
  if (backend == InterNodeBackend::nccl) {
    return std::make_unique<NcclCommunicator>(group, std::move(name), options, logger);
  }
  // The MPI variant keeps group's options and logger (its duplicate inherits them).
  // A private duplicate (collective over group): this communicator's requests never mix with group's.
  auto own = group.split(0, group.rank(), std::move(name));
  return std::make_unique<StagedCommunicator>(
      std::move(own), std::make_shared<CudaStaging>(compute),
      mpi_is_cuda_aware() ? DirectCollectives::data_movement : DirectCollectives::none);
}

}  // namespace hsdp::comm
