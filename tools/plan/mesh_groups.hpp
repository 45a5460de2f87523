#pragma once
// The groups ProcessMesh (src/comm/mesh.cpp) would build, computed without MPI from a Topology: the same colors and
// keys of MPI_Comm_split (members ordered by key, then by world rank), each member named by its node id.
//   node        color node id,                     key world rank
//   cross_node  color local rank,                  key node id
//   shard       the strategy's shard scope (strategy.hpp): world (key world rank), node, or self
//   replicate   scope world: self; node: color local rank, key node id; self: world
//   hpz (k>0)   color node id x world + local / k, key world rank;  size 1 when k = 0
#include "hsdp/comm/mesh.hpp"
#include "hsdp/comm/topology.hpp"
#include "hsdp/shard/formulas.hpp"

namespace hsdp::plan {

// The groups of topology.world_rank. Throws the config Errors ProcessMesh throws (hybrid strategies on nodes of
// unequal size; an hpZ partition that does not divide every node).
shard::MeshGroups mesh_groups(const comm::Topology& topology, shard::Sharding strategy, int hpz_partition_size);

// Emulated nodes as hsdp-train's --topology.ranks_per_node builds them: nodes x ranks_per_node ranks.
comm::Topology emulated_topology(int rank, int nodes, int ranks_per_node, comm::Placement placement);

// True when the group's members are on more than one node.
bool spans_nodes(const shard::GroupView& group);

}  // namespace hsdp::plan
