// comm.inter = mpi | nccl for device buffers (see make_inter_node_communicator in nccl.hpp).
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI: MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support
#endif

#include <algorithm>
#include <string>

#include "hsdp/comm/nccl.hpp"
#include "hsdp/core/error.hpp"

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

MeshCarrier device_carrier(Transport intra, Transport inter, Staging stage, const CommOptions& options,
                           const Logger& logger) {
  const bool direct = stage != Staging::host && mpi_is_cuda_aware();
  if (stage == Staging::direct && !direct) {
    throw_config(
        "comm.stage=direct: this MPI library is not CUDA-aware (MPIX_Query_cuda_support), so it cannot "
        "read GPU memory; use comm.stage=auto or host");
  }
  return [=](MpiCommunicator& group) -> std::unique_ptr<Communicator> {
    // A group of one: its collectives are copies on the device (never through the host).
    if (group.size() == 1) return std::make_unique<DeviceSelfCommunicator>(group);
    const std::span<const int> nodes = group.node_of_rank();
    const bool crosses = std::any_of(nodes.begin(), nodes.end(), [&](int n) { return n != nodes.front(); });
    if ((crosses ? inter : intra) == Transport::nccl) {
      return std::make_unique<NcclCommunicator>(group, group.name(), options, logger);
    }
    // Each group's copies on a stream of their own, so that the copies of different groups overlap (a copy starts
    // once the host has seen its queue's earlier work complete: any stream orders it correctly).
    return std::make_unique<StagedCommunicator>(group,
                                                std::make_shared<CudaStaging>(std::make_shared<device::cuda::Stream>()),
                                                direct ? DirectCollectives::data_movement : DirectCollectives::none);
  };
}

}  // namespace hsdp::comm
