#pragma once
// Topology: which node every world rank is on. Real nodes come from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED);
// emulated nodes (tests, a laptop) group `ranks_per_node` ranks, by block (ranks 0..N-1 on node 0, as
// `mpirun --map-by core`) or cyclic (rank r on node r % nodes, as `mpirun --map-by node`). Groups are always
// built from this membership, never from the assumption that a node's ranks are contiguous.
#include <mpi.h>

#include <string>
#include <vector>

namespace hsdp::comm {

enum class Placement { block, cyclic };

struct TopologyOptions {
  int ranks_per_node = 0;  // 0: real nodes
  Placement placement = Placement::block;
};

struct Topology {
  int world_rank = 0;
  int world_size = 1;
  std::vector<int> node_of_rank;  // node id by world rank, ids 0..num_nodes-1 ordered by lowest member rank
  bool emulated = false;
  Placement placement = Placement::block;
  int ranks_per_node = 0;  // as given to emulate() (0 for real nodes); for cyclic, node sizes may differ from it

  int node() const { return node_of_rank[static_cast<std::size_t>(world_rank)]; }
  int num_nodes() const;
  // Rank within its node, in world-rank order.
  int local_rank() const { return local_rank_of(world_rank); }
  int local_rank_of(int world) const;
  std::vector<int> ranks_on_node(int node_id) const;
  int node_size(int node_id) const { return static_cast<int>(ranks_on_node(node_id).size()); }
  bool nodes_equal_size() const;

  // Pure constructors (unit-testable without MPI).
  static Topology from_node_ids(int world_rank, std::vector<int> node_ids);
  static Topology emulate(int world_rank, int world_size, int ranks_per_node, Placement placement);
};

// Detects the topology over `world` (collective). Checks the Slurm singleton-start mistake: under Slurm,
// a world size that differs from the step's task count is a config Error that says to use srun --mpi=pmix.
Topology detect_topology(MPI_Comm world, const TopologyOptions& options);
// That check alone (reads the environment only): SLURM_STEP_NUM_TASKS, else SLURM_NTASKS, against world_size.
// Skipped when mpirun (ORTE) started the ranks: under an allocation its daemons' step has one task per node.
void check_slurm_world_size(int world_size);
// The ranks of `world` that share this rank's host and its memory (MPI_COMM_TYPE_SHARED), whatever nodes are
// emulated: what divides a host's memory among its ranks. Collective over `world`.
int ranks_on_host(MPI_Comm world);

Placement parse_placement(const std::string& text);
const char* to_string(Placement p);

}  // namespace hsdp::comm
