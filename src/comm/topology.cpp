#include "hsdp/comm/topology.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>

#include "hsdp/comm/mpi.hpp"
#include "hsdp/core/error.hpp"

namespace hsdp::comm {

int Topology::num_nodes() const {
  if (node_of_rank.empty()) return 0;
  return *std::max_element(node_of_rank.begin(), node_of_rank.end()) + 1;
}

int Topology::local_rank_of(int world) const {
  const int node_id = node_of_rank.at(static_cast<std::size_t>(world));
  return static_cast<int>(std::count(node_of_rank.begin(), node_of_rank.begin() + world, node_id));
}

std::vector<int> Topology::ranks_on_node(int node_id) const {
  std::vector<int> ranks;
  for (std::size_t r = 0; r < node_of_rank.size(); ++r) {
    if (node_of_rank[r] == node_id) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

bool Topology::nodes_equal_size() const {
  const int nodes = num_nodes();
  for (int id = 1; id < nodes; ++id) {
    if (node_size(id) != node_size(0)) return false;
  }
  return true;
}

Topology Topology::from_node_ids(int world_rank, std::vector<int> node_ids) {
  if (world_rank < 0 || static_cast<std::size_t>(world_rank) >= node_ids.size()) {
    throw_internal("topology: rank " + std::to_string(world_rank) + " outside a world of " +
                   std::to_string(node_ids.size()) + " ranks");
  }
  // Renumber 0..N-1 in order of first appearance, which is the order of each node's lowest rank.
  std::map<int, int> renumbered;
  for (int& id : node_ids) {
    const auto [it, inserted] = renumbered.try_emplace(id, static_cast<int>(renumbered.size()));
    id = it->second;
  }
  Topology t;
  t.world_rank = world_rank;
  t.world_size = static_cast<int>(node_ids.size());
  t.node_of_rank = std::move(node_ids);
  return t;
}

Topology Topology::emulate(int world_rank, int world_size, int ranks_per_node, Placement placement) {
  if (ranks_per_node < 1) {
    throw_config("topology.ranks_per_node must be at least 1 to emulate nodes (got " + std::to_string(ranks_per_node) +
                 "; 0 means real nodes)");
  }
  const int nodes = (world_size + ranks_per_node - 1) / ranks_per_node;
  std::vector<int> ids(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    ids[static_cast<std::size_t>(r)] = placement == Placement::block ? r / ranks_per_node : r % nodes;
  }
  Topology t = from_node_ids(world_rank, std::move(ids));
  t.emulated = true;
  t.placement = placement;
  t.ranks_per_node = ranks_per_node;
  return t;
}

void check_slurm_world_size(int world_size) {
  if (std::getenv("OMPI_MCA_orte_hnp_uri") != nullptr) return;
  const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS");
  if (tasks == nullptr) tasks = std::getenv("SLURM_NTASKS");
  if (tasks == nullptr || *tasks == '\0') return;
  char* end = nullptr;
  const long count = std::strtol(tasks, &end, 10);
  if (*end != '\0') return;  // not a number: not ours to judge
  if (count != world_size) {
    throw_config("Slurm allocated " + std::to_string(count) + " tasks but MPI sees a world of " +
                 std::to_string(world_size) +
                 " ranks: the job was probably started without srun's MPI plugin (singleton start); launch with "
                 "`srun --mpi=pmix hsdp-train ...`");
  }
}

Topology detect_topology(MPI_Comm world, const TopologyOptions& options) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  check_slurm_world_size(size);
  if (options.ranks_per_node > 0) return Topology::emulate(rank, size, options.ranks_per_node, options.placement);

  MPI_Comm shared_raw = MPI_COMM_NULL;
  if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared_raw) != MPI_SUCCESS) {
    throw Error(ErrorKind::comm, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed on rank " + std::to_string(rank));
  }
  const MpiComm shared(shared_raw);
  // A node is named by its leader, the lowest world rank on it (shared rank 0, since the key is the world rank).
  int leader = rank;
  MPI_Bcast(&leader, 1, MPI_INT, 0, shared.get());
  std::vector<int> leaders(static_cast<std::size_t>(size));
  MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, world);
  return Topology::from_node_ids(rank, std::move(leaders));
}

int ranks_on_host(MPI_Comm world) {
  MPI_Comm host = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
  int size = 1;
  MPI_Comm_size(host, &size);
  MPI_Comm_free(&host);
  return size;
}

Placement parse_placement(const std::string& text) {
  if (text == "block") return Placement::block;
  if (text == "cyclic") return Placement::cyclic;
  throw_config("topology.placement: unknown value '" + text + "' (allowed: block|cyclic)");
}

const char* to_string(Placement p) {
  switch (p) {
    case Placement::block: return "block";
    case Placement::cyclic: return "cyclic";
  }
  return "?";
}

}  // namespace hsdp::comm
