// main of the MPI test suite: MPI, the emulated mesh from the command line, one ProcessMesh per strategy,
// then GoogleTest on every rank. Rank 0 prints gtest's output; other ranks print only their own failures.
// Every rank exits non-zero when any rank had a failure.
//   comm_mpi_test --topology.ranks_per_node=N --topology.placement=block|cyclic [--comm.ring_min_bytes=N]
//                 [--comm.stage=direct|host|deferred] [gtest flags]
// --comm.stage: the meshes' groups (all but world) run their collectives on MPI directly, or staged through host
// buffers (staged.hpp) with memcpy copies (host, as hsdp-train's comm.stage=host) or with copies that land late and
// in another order on every rank (deferred, deferred_staging.hpp).
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>

#include "../mpi_gtest.hpp"
#include "deferred_staging.hpp"
#include "hsdp/comm/staged.hpp"
#include "hsdp/core/error.hpp"
#include "mpi_test_context.hpp"

namespace hsdp::comm::testing {
namespace {

MpiTestContext*& context_slot() {
  static MpiTestContext* slot = nullptr;
  return slot;
}

// Removes `--topology.<key>=value`, `--comm.ring_min_bytes=N` and `--comm.stage=S` arguments (gtest would reject
// them) and returns what they said.
TopologyOptions take_topology_args(int& argc, char** argv, std::size_t& ring_min_bytes, std::string& stage) {
  TopologyOptions options;
  options.ranks_per_node = 4;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    constexpr std::string_view kRpn = "--topology.ranks_per_node=";
    constexpr std::string_view kPlacement = "--topology.placement=";
    constexpr std::string_view kRing = "--comm.ring_min_bytes=";
    constexpr std::string_view kStage = "--comm.stage=";
    if (arg.starts_with(kStage)) {
      stage = std::string(arg.substr(kStage.size()));
    } else if (arg.starts_with(kRing)) {
      ring_min_bytes = std::stoull(std::string(arg.substr(kRing.size())));
    } else if (arg.starts_with(kRpn)) {
      options.ranks_per_node = std::stoi(std::string(arg.substr(kRpn.size())));
    } else if (arg.starts_with(kPlacement)) {
      options.placement = parse_placement(std::string(arg.substr(kPlacement.size())));
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  argv[argc] = nullptr;
  return options;
}

int run(int& argc, char** argv, const MpiEnvironment& mpi) {
  CommOptions comm_options;
  // Generous: 4 ranks share 2 cores here, and a hang should still end the run long before ctest's timeout.
  comm_options.timeout_s = 60.0;
  std::string stage = "direct";
  const TopologyOptions options = take_topology_args(argc, argv, comm_options.ring_min_bytes, stage);
  Logger logger(mpi.world_rank(), host_name());
  const Topology topology = detect_topology(MPI_COMM_WORLD, options);
  MpiCommunicator world(MpiComm(MPI_COMM_WORLD), "world", topology.node_of_rank, comm_options, logger);
  MpiTestContext context{world, topology, MeshSpec{mpi.world_size(), options.ranks_per_node, options.placement},
                         logger, {}, {}};
  if (stage == "host") {
    context.carry = staged_carrier(make_memcpy_staging());
  } else if (stage == "deferred") {
    context.carry = staged_carrier(std::make_shared<DeferredStaging>(1000 + static_cast<std::uint64_t>(mpi.world_rank())));
  } else if (stage != "direct") {
    throw_config("--comm.stage=" + stage + ": allowed direct|host|deferred");
  }
  for (const ShardScope s : kScopes) {
    if (s == ShardScope::node && !topology.nodes_equal_size()) continue;
    context.meshes.emplace(s, std::make_unique<ProcessMesh>(world, topology, context.staged(MeshOptions{s})));
  }
  context_slot() = &context;

  ::testing::InitGoogleTest(&argc, argv);
  logger.info("comm_mpi_test: ", mpi.world_size(), " ranks, --topology.ranks_per_node=", options.ranks_per_node,
              " --topology.placement=", to_string(options.placement),
              " --comm.ring_min_bytes=", comm_options.ring_min_bytes, " --comm.stage=", stage);
  const int failures = hsdp::testing::run_all_tests_on_every_rank(MPI_COMM_WORLD);
  context_slot() = nullptr;
  if (failures > 0) logger.error("comm_mpi_test: ", failures, " failure(s) summed over all ranks");
  return failures > 0 ? 1 : 0;
}

}  // namespace

MpiTestContext& context() { return *context_slot(); }

}  // namespace hsdp::comm::testing

int main(int argc, char** argv) {
  hsdp::comm::MpiEnvironment mpi(&argc, &argv);
  try {
    return hsdp::comm::testing::run(argc, argv, mpi);
  } catch (const hsdp::Error& e) {
    std::cerr << "[rank " << mpi.world_rank() << "] comm_mpi_test: " << e.what() << std::endl;
    hsdp::comm::MpiEnvironment::abort_job(e.exit_code());
  } catch (const std::exception& e) {
    std::cerr << "[rank " << mpi.world_rank() << "] comm_mpi_test: " << e.what() << std::endl;
    hsdp::comm::MpiEnvironment::abort_job(hsdp::kExitInternal);
  }
}
