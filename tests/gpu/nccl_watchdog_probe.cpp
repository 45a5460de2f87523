// Hangs an NCCL collective behind 10 s of work on the compute stream, with a 1 s watchdog: the watchdog must end
// the job (exit 4) with a line naming the collective, group and sequence number. Run by expect_nccl_watchdog.sh
// on one rank; exits 0 only if the collective completed, which would be a bug.
#include <iostream>
#include <string>

#include "hsdp/comm/nccl.hpp"
#include "hsdp/comm/topology.hpp"
#include "hsdp/device/cuda/runtime.hpp"
#include "hsdp/device/select_device.hpp"

int main(int argc, char** argv) {
  using namespace hsdp;
  using namespace hsdp::comm;
  namespace cuda = hsdp::device::cuda;
  std::string reason;
  if (cuda::visible_device_count(&reason) == 0) {
    std::cout << "no CUDA device visible: " << reason << "\n";
    return 77;
  }
  MpiEnvironment mpi(&argc, &argv);
  const Logger logger(mpi.world_rank(), host_name());
  const Topology topology = detect_topology(MPI_COMM_WORLD, TopologyOptions{});
  device::select_device(device::DeviceType::cuda, topology.local_rank());
  MpiCommunicator world(MpiComm(MPI_COMM_WORLD), "world", topology.node_of_rank, CommOptions{60.0}, logger);
  NcclCommunicator nccl(world, "gpu_world", CommOptions{1.0}, logger);
  cuda::Stream compute;
  cuda::DeviceBuffer<float> data(16);
  cuda::spin_on_stream(compute, 10000.0);
  cuda::Event busy;
  busy.record(compute);
  nccl.wait_for(busy.get());
  nccl.all_reduce(data.data(), data.data(), data.size(), DType::f32, ReduceOp::sum);  // #1: waits 10 s
  logger.any_rank("nccl_watchdog_probe: the all_reduce completed; the watchdog never fired");
  return 0;
}
