#pragma once
// What every test of comm_mpi_test shares: the emulated mesh given on the command line, the topology, the world
// communicator and one ProcessMesh per shard scope. Built once by main (collectively) before the tests run.
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "hsdp/comm/mesh.hpp"
#include "hsdp/comm/mpi.hpp"
#include "hsdp/comm/topology.hpp"
#include "hsdp/comm/traffic.hpp"

namespace hsdp::comm::testing {

inline constexpr ShardScope kScopes[] = {ShardScope::self, ShardScope::node, ShardScope::world};

// The mesh as given by --topology.ranks_per_node and --topology.placement, and the node layout it means,
// computed here from those two numbers alone (independently of Topology) for the closed-form expectations.
struct MeshSpec {
  int world_size = 4;
  int ranks_per_node = 4;
  Placement placement = Placement::block;

  int nodes() const { return (world_size + ranks_per_node - 1) / ranks_per_node; }
  int node_of(int rank) const { return placement == Placement::block ? rank / ranks_per_node : rank % nodes(); }
  int local_of(int rank) const { return placement == Placement::block ? rank % ranks_per_node : rank / nodes(); }
  int rank_at(int node, int local) const {
    return placement == Placement::block ? node * ranks_per_node + local : local * nodes() + node;
  }
};

struct MpiTestContext {
  MpiCommunicator& world;
  const Topology& topology;
  MeshSpec spec;
  Logger& logger;
  std::map<ShardScope, std::unique_ptr<ProcessMesh>> meshes;  // node: only on nodes of equal size
  // --comm.stage: "direct" (MPI on the buffers), "host" (staged, memcpy) or "deferred" (staged, late copies).
  MeshCarrier carry;  // MeshOptions::carry for that stage

  // `options` with this run's staging: every mesh a test builds carries its groups as the harness's meshes do.
  MeshOptions staged(MeshOptions options) const {
    options.carry = carry;
    return options;
  }
};

// Set by main for the lifetime of RUN_ALL_TESTS (gtest offers no other way to hand objects to TEST_P bodies).
MpiTestContext& context();

// World ranks of the members of `comm`, in comm-rank order (raw MPI: not counted).
inline std::vector<int> members_of(const Communicator& group) {
  const MpiCommunicator& comm = as_mpi(group);
  const int me = context().topology.world_rank;
  std::vector<int> members(static_cast<std::size_t>(comm.size()));
  MPI_Allgather(&me, 1, MPI_INT, members.data(), 1, MPI_INT, comm.raw());
  return members;
}

}  // namespace hsdp::comm::testing
