// Hangs every rank in a mismatched collective so the comm watchdog (timeout 2 s) must end the job: ranks 1..
// call all_reduce on world while rank 0 calls all_reduce on another communicator with the same members.
// Run by expect_watchdog.sh; exits 0 only if the collectives completed, which would be a bug.
#include <mpi.h>

#include <iostream>

#include "hsdp/comm/mpi.hpp"
#include "hsdp/comm/topology.hpp"
#include "hsdp/core/log.hpp"

int main(int argc, char** argv) {
  using namespace hsdp;
  using namespace hsdp::comm;
  MpiEnvironment mpi(&argc, &argv);
  const Logger logger(mpi.world_rank(), host_name());
  const Topology topology = detect_topology(MPI_COMM_WORLD, TopologyOptions{});
  const CommOptions options{2.0};
  MpiCommunicator world(MpiComm(MPI_COMM_WORLD), "world", topology.node_of_rank, options, logger);
  const auto other = world.split(0, mpi.world_rank(), "probe_other");
  world.barrier();  // sequence #1 on world: the hanging all_reduce is #2
  float value = 1.0f;
  MpiCommunicator& mine = mpi.world_rank() == 0 ? *other : world;
  mine.all_reduce(&value, &value, 1, DType::f32, ReduceOp::sum);
  logger.any_rank("watchdog_probe: the mismatched all_reduce completed; the watchdog never fired");
  return 0;
}
