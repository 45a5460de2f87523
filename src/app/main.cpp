// hsdp-train: parse the deck, build the mesh, train. Every rank runs this.
#include <iostream>

#include "hsdp/app/agree.hpp"
#include "hsdp/app/options.hpp"
#include "hsdp/comm/mesh.hpp"
#include "hsdp/comm/mpi.hpp"
#include "hsdp/comm/topology.hpp"
#include "hsdp/core/log.hpp"

namespace {

using hsdp::app::CommandLine;
using hsdp::app::ConfigDeck;

hsdp::comm::TopologyOptions topology_options(const ConfigDeck& deck) {
  hsdp::comm::TopologyOptions options;
  options.ranks_per_node = static_cast<int>(deck.get_int("topology.ranks_per_node"));
  options.placement = hsdp::comm::parse_placement(deck.get("topology.placement"));
  return options;
}

int run(int argc, char** argv, const hsdp::Logger& log) {
  CommandLine cli;
  ConfigDeck deck;
  hsdp::app::agree(MPI_COMM_WORLD, [&] { deck = ConfigDeck::parse(argc, argv, cli); });
  if (cli.help) {
    log.info(hsdp::app::help_text("hsdp-train"));
    return hsdp::kExitOk;
  }
  if (cli.version) {
    log.info("hsdp-train ", HSDP_VERSION);
    return hsdp::kExitOk;
  }
  if (cli.print_config) {
    log.info(deck.to_ini());
    return hsdp::kExitOk;
  }

  hsdp::comm::CommOptions comm_options;
  comm_options.timeout_s = deck.get_real("comm.timeout_s");
  hsdp::comm::Topology topology;
  hsdp::app::agree(MPI_COMM_WORLD,
                   [&] { topology = hsdp::comm::detect_topology(MPI_COMM_WORLD, topology_options(deck)); });
  hsdp::comm::MpiCommunicator world(hsdp::comm::MpiComm(MPI_COMM_WORLD), "world", topology.node_of_rank,
                                    comm_options, log);
  const auto sharding = hsdp::comm::parse_sharding(deck.get("parallel.sharding"));
  std::unique_ptr<hsdp::comm::ProcessMesh> mesh;
  hsdp::app::agree(MPI_COMM_WORLD,
                   [&] { mesh = std::make_unique<hsdp::comm::ProcessMesh>(world, topology, sharding); });
  if (cli.print_mesh) {
    const std::string text = mesh->describe();
    log.info(text);
    return hsdp::kExitOk;
  }
  log.info("hsdp-train: training is not built yet in this version (use --print-mesh or --print-config)");
  return hsdp::kExitInternal;
}

}  // namespace

int main(int argc, char** argv) {
  hsdp::comm::MpiEnvironment mpi(&argc, &argv);
  const hsdp::Logger log(mpi.world_rank(), hsdp::host_name());
  try {
    return run(argc, argv, log);
  } catch (const hsdp::app::AgreedError& e) {
    // Every rank has this error; rank 0 says it once.
    if (log.is_root()) std::cerr << "hsdp-train: " << hsdp::to_string(e.kind()) << " error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const hsdp::Error& e) {
    // Only this rank knows: say where, and end every rank so none waits forever.
    log.error(hsdp::to_string(e.kind()), ": ", e.what());
    hsdp::comm::MpiEnvironment::abort_job(e.exit_code());
  } catch (const std::exception& e) {
    log.error("internal: ", e.what());
    hsdp::comm::MpiEnvironment::abort_job(hsdp::kExitInternal);
  }
}
