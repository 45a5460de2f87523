#pragma once
// ProcessMesh: the communicators a sharding strategy needs, built from the Topology.
//   world       all ranks
//   node        the ranks of this rank's node
//   cross_node  the ranks with this rank's local rank, one per node
//   shard       the ranks one unit's parameters are split over
//   replicate   the ranks that hold the same shard
//   node_gather the node's ranks again: no_shard's hierarchical all-gather runs on it while its reduce-scatters run
//               on node (nonblocking collectives on one communicator must be issued in the same order on every
//               rank; two independent streams of them need two communicators)
//   hpz         hpZ secondary group: k consecutive local ranks of this node (only when hpz k > 0)
//   island      with MeshOptions::islands = N > 1, the world splits into N islands of whole nodes (consecutive node
//               ids, so equal numbers of nodes); every group above is then built inside the island, over the
//               island's topology, exactly as for a world of the island's size (topology() is the island's)
//   outer       the ranks with this rank's place in its island, one per island: they hold the same shard (DiLoCo's
//               outer step averages over it; shard/outer.hpp)
// The shard group's scope comes from the strategy (hsdp/shard/strategy.hpp): world (replicate = self), node
// (replicate = cross_node; needs nodes of equal size) or self (replicate = world).
// Every group is an MPI communicator (a split of world); what carries its collectives over the engine's memory is
// MeshOptions::carry's choice (MPI itself by default; staged through host buffers with comm.stage=host).
#include <functional>
#include <memory>
#include <string>

#include "hsdp/comm/mpi.hpp"
#include "hsdp/comm/topology.hpp"

namespace hsdp::comm {

// The ranks one unit's parameters are split over.
enum class ShardScope { self, node, world };
const char* to_string(ShardScope s);

// What carries a group's collectives, given its MPI communicator (which the mesh keeps, and which outlives what this
// returns).
using MeshCarrier = std::function<std::unique_ptr<Communicator>(MpiCommunicator& group)>;

struct MeshOptions {
  ShardScope shard_scope = ShardScope::self;
  // hpZ secondary group of k consecutive local ranks: 0 = none; else k must divide the ranks of every node (k = 1:
  // each rank is its own group, so the backward gather is a local copy).
  int hpz_size = 0;
  // Who asked for this mesh, for error messages (e.g. "parallel.sharding=hybrid_shard").
  std::string requested_by = "the process mesh";
  // What carries each group's collectives (empty: the MPI communicator itself). Not applied to world, the caller's,
  // nor to island and outer (host memory: the outer step's).
  MeshCarrier carry = {};
  // parallel.islands: groups of whole nodes that train apart between outer steps (1: the world is one island).
  int islands = 1;
};

// A carrier for MeshOptions::carry: every group's collectives staged through host buffers by `staging`
// (staged.hpp).
class HostStaging;
MeshCarrier staged_carrier(std::shared_ptr<HostStaging> staging);

class ProcessMesh {
 public:
  // Collective over `world`. Config errors (nodes of unequal size for a node scope, k not dividing a node, islands
  // not dividing the nodes) are thrown on every rank before the first split.
  ProcessMesh(MpiCommunicator& world, const Topology& topology, const MeshOptions& options);

  // The groups as the engine sees them: collectives and counters (communicator.hpp), whatever carries them.
  Communicator& world() { return world_; }
  Communicator& node() { return node_.carried(); }
  Communicator& cross_node() { return cross_node_.carried(); }
  Communicator& node_gather() { return node_gather_.carried(); }
  Communicator& shard() { return shard_.carried(); }
  Communicator& replicate() { return replicate_.carried(); }
  const Communicator& shard() const { return shard_.carried(); }
  const Communicator& replicate() const { return replicate_.carried(); }
  bool has_hpz() const { return hpz_.mpi != nullptr; }
  Communicator& hpz() { return hpz_.carried(); }
  // The MPI communicator behind world, for what only MPI does (the watchdog's side channel, MPI_Abort).
  MpiCommunicator& mpi_world() { return world_; }
  // The world again (a duplicate), carried like the other groups: for collectives over the engine's memory (the
  // step's norm and overflow flag). Left out of total_counters, as world is.
  Communicator& engine_world() { return engine_world_.carried(); }
  // The island's topology (the world's with one island): what the strategy's groups were built from.
  const Topology& topology() const { return topology_; }
  const Topology& world_topology() const { return world_topology_; }
  int islands() const { return islands_; }
  int island_index() const { return island_index_; }
  // The island's ranks (the world with one island), and the outer group (only with islands > 1: an internal Error
  // otherwise).
  MpiCommunicator& island() { return island_ ? *island_ : world_; }
  MpiCommunicator& outer();
  ShardScope shard_scope() const { return shard_scope_; }

  // Sum of the counters of every communicator of the mesh except world (world is the caller's and may carry
  // set-up traffic); each collective is counted once, on the communicator it ran on.
  ByteCounters total_counters() const;
  void reset_counters();

  // A readable description of the whole mesh, assembled on rank 0 (collective; other ranks get "").
  std::string describe();

 private:
  MpiCommunicator& world_;
  Topology world_topology_;
  Topology topology_;
  int islands_ = 1;
  int island_index_ = 0;
  std::unique_ptr<MpiCommunicator> island_;
  std::unique_ptr<MpiCommunicator> outer_;
  ShardScope shard_scope_;
  std::string requested_by_;
  // A group: its MPI communicator and, where MeshOptions::carry gave one, what carries its collectives.
  struct Group {
    std::unique_ptr<MpiCommunicator> mpi;
    std::unique_ptr<Communicator> carrier;
    Communicator& carried() const { return carrier ? *carrier : *mpi; }
  };
  void carry(Group& group, const MeshOptions& options);

  Group engine_world_;
  Group node_;
  Group cross_node_;
  Group node_gather_;
  // shard and replicate are communicators of their own (splits with the same membership as world, node,
  // cross_node or self) so that counters and watchdog messages name the role they play.
  Group shard_;
  Group replicate_;
  Group hpz_;
};

}  // namespace hsdp::comm
