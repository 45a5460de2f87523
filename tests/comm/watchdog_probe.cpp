// Hangs ranks in a collective so the comm watchdog (timeout 2 s) must end the job, in one of two ways (argument):
//   mismatched (default): ranks 1.. call all_reduce on world while rank 0 calls all_reduce on another
//       communicator with the same members; every rank waits, and each group has ranks behind the others.
//   skip: ranks 0 and 1 call all_reduce on world; ranks 2 and 3 never do (busy outside MPI for 40 s), so the
//       watchdog of ranks 0 and 1 must name ranks 2 and 3 as the ones that have not reached it.
// Run by expect_watchdog.sh; exits 0 only if the collectives completed or the job outlived the watchdog (a bug).
#include <mpi.h>

#include <chrono>
#include <string>
#include <thread>

#include "hsdp/comm/mpi.hpp"
#include "hsdp/comm/topology.hpp"
#include "hsdp/core/log.hpp"

int main(int argc, char** argv) {
  using namespace hsdp;
  using namespace hsdp::comm;
  MpiEnvironment mpi(&argc, &argv);
  const Logger logger(mpi.world_rank(), host_name());
  const std::string mode = argc > 1 ? argv[1] : "mismatched";
  const Topology topology = detect_topology(MPI_COMM_WORLD, TopologyOptions{});
  const CommOptions options{2.0};
  MpiCommunicator world(MpiComm(MPI_COMM_WORLD), "world", topology.node_of_rank, options, logger);
  const auto other = world.split(0, mpi.world_rank(), "probe_other");
  world.barrier();  // sequence #1 on world: the hanging all_reduce is #2
  float value = 1.0f;
  if (mode == "skip") {
    if (mpi.world_rank() >= 2) {
      // Not in MPI at all: the side channel must be read without this rank's participation.
      std::this_thread::sleep_for(std::chrono::seconds(40));
      logger.any_rank("watchdog_probe: rank ", mpi.world_rank(), " outlived the watchdog of ranks 0 and 1");
      MpiEnvironment::abort_job(0);
    }
    world.all_reduce(&value, &value, 1, DType::f32, ReduceOp::sum);
  } else {
    MpiCommunicator& mine = mpi.world_rank() == 0 ? *other : world;
    mine.all_reduce(&value, &value, 1, DType::f32, ReduceOp::sum);
  }
  logger.any_rank("watchdog_probe: the all_reduce completed; the watchdog never fired");
  return 0;
}
