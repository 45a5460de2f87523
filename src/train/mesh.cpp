// make_mesh (hsdp/train/backend.hpp): the process mesh for the run's device.
#include "hsdp/comm/staged.hpp"
#include "hsdp/shard/strategy.hpp"
#include "hsdp/train/backend.hpp"
#include "hsdp/train/cuda_backend.hpp"

namespace hsdp::train {

std::unique_ptr<comm::ProcessMesh> make_mesh(const TrainOptions& o, comm::MpiCommunicator& world,
                                             const comm::Topology& topology, const Logger& log) {
  comm::MeshOptions mesh_options = shard::mesh_options(o.engine.strategy, o.engine.zeropp.hpz_partition_size);
  mesh_options.islands = o.islands;
  if (o.device_type == device::DeviceType::cuda) {
    // The rank's GPU, and NCCL or staged MPI for each group over its memory.
    mesh_options.carry = cuda_mesh_carrier(o, world.raw(), topology, log);
  } else if (o.comm_stage == comm::Staging::host) {
    // The CPU device's memory is the host's: staging is asked for, to run the GPU's staged path.
    mesh_options.carry = comm::staged_carrier(comm::make_memcpy_staging());
  }
  return std::make_unique<comm::ProcessMesh>(world, topology, mesh_options);
}

}  // namespace hsdp::train
