#include "hsdp/comm/mesh.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "hsdp/core/error.hpp"
#include "hsdp/comm/staged.hpp"
#include "hsdp/core/log.hpp"

namespace hsdp::comm {
namespace {

std::string node_sizes_text(const Topology& t) {
  std::string text;
  for (int id = 0; id < t.num_nodes(); ++id) {
    if (id > 0) text += ", ";
    text += "node " + std::to_string(id) + ": " + std::to_string(t.node_size(id));
  }
  return text;
}

// Each rank's place in one group, gathered to rank 0 to list the groups.
struct Membership {
  int leader = -1;  // lowest world rank of the group: names it
  int rank = 0;
  int size = 0;
};

Membership membership_of(const MpiCommunicator* group, int world_rank) {
  if (group == nullptr) return {};
  Membership m{world_rank, group->rank(), group->size()};
  // Raw MPI: describing the mesh is not traffic the counters should see.
  MPI_Allreduce(&world_rank, &m.leader, 1, MPI_INT, MPI_MIN, group->raw());
  return m;
}

// Islands are groups of whole nodes, consecutive in node order, of equal shape: each island's nodes have the same
// numbers of ranks as every other's, so that the ranks at the same place in their islands hold the same shard.
void check_islands(const Topology& t, int islands) {
  const int nodes = t.num_nodes();
  if (nodes % islands != 0) {
    throw_config("parallel.islands=" + std::to_string(islands) + " must divide the job's " + std::to_string(nodes) +
                 " node(s) (islands are groups of whole nodes; " + node_sizes_text(t) +
                 "): use a divisor of the node count, or parallel.islands=1");
  }
  const int per_island = nodes / islands;
  for (int id = per_island; id < nodes; ++id) {
    if (t.node_size(id) != t.node_size(id % per_island)) {
      throw_config("parallel.islands=" + std::to_string(islands) + ": the islands' nodes differ in size (" +
                   node_sizes_text(t) + "); islands must have the same shape: place the same number of ranks on "
                   "every node");
    }
  }
}

// The topology of island `island` (nodes [island * per_island, (island + 1) * per_island)) as a world of its own.
Topology island_topology(const Topology& t, int island, int per_island) {
  std::vector<int> node_ids;
  int my_rank = 0;
  for (int r = 0; r < t.world_size; ++r) {
    const int node = t.node_of_rank[static_cast<std::size_t>(r)];
    if (node / per_island != island) continue;
    if (r == t.world_rank) my_rank = static_cast<int>(node_ids.size());
    node_ids.push_back(node);
  }
  Topology island_t = Topology::from_node_ids(my_rank, std::move(node_ids));
  island_t.emulated = t.emulated;
  island_t.placement = t.placement;
  island_t.ranks_per_node = t.ranks_per_node;
  return island_t;
}

}  // namespace

const char* to_string(ShardScope s) {
  switch (s) {
    case ShardScope::self: return "self";
    case ShardScope::node: return "node";
    case ShardScope::world: return "world";
  }
  return "?";
}

ProcessMesh::ProcessMesh(MpiCommunicator& world, const Topology& world_topology, const MeshOptions& options)
    : world_(world),
      world_topology_(world_topology),
      topology_(world_topology),
      islands_(options.islands),
      shard_scope_(options.shard_scope),
      requested_by_(options.requested_by) {
  // The islands first: every group below is built inside this rank's island, over its topology.
  if (islands_ > 1) {
    check_islands(world_topology, islands_);
    const int nodes_per_island = world_topology.num_nodes() / islands_;
    island_index_ = world_topology.node() / nodes_per_island;
    topology_ = island_topology(world_topology, island_index_, nodes_per_island);
  }
  const Topology& topology = topology_;
  const int hpz_size = options.hpz_size;
  // Every check comes before the first split, and the topology is the same on every rank, so all ranks throw
  // together and none is left in a collective.
  if (shard_scope_ == ShardScope::node && !topology.nodes_equal_size()) {
    throw_config(options.requested_by + " needs nodes with equal numbers of ranks, but the " + std::to_string(topology.num_nodes()) +
                 " nodes have (" + node_sizes_text(topology) + ") ranks; use full_shard or change the placement");
  }
  if (hpz_size > 0) {
    for (int id = 0; id < topology.num_nodes(); ++id) {
      if (topology.node_size(id) % hpz_size != 0) {
        throw_config("zeropp.hpz_partition_size=" + std::to_string(hpz_size) +
                     " must divide the ranks of every node (" + node_sizes_text(topology) + ")");
      }
    }
  }
  if (islands_ > 1) {
    island_ = world.split(island_index_, world_topology.world_rank, "island");
    outer_ = world.split(island_->rank(), island_index_, "outer");
  }
  MpiCommunicator& base = island();  // the splits below are the island's
  const int me = topology.world_rank;
  const int node_id = topology.node();
  const int local = topology.local_rank();
  engine_world_.mpi = base.split(0, me, "world");
  node_.mpi = base.split(node_id, me, "node");
  cross_node_.mpi = base.split(local, node_id, "cross_node");
  node_gather_.mpi = base.split(node_id, me, "node_gather");
  switch (shard_scope_) {
    case ShardScope::world:
      shard_.mpi = base.split(0, me, "shard");
      replicate_.mpi = base.split(me, 0, "replicate");
      break;
    case ShardScope::node:
      shard_.mpi = base.split(node_id, me, "shard");
      replicate_.mpi = base.split(local, node_id, "replicate");
      break;
    case ShardScope::self:
      shard_.mpi = base.split(me, 0, "shard");
      replicate_.mpi = base.split(0, me, "replicate");
      break;
  }
  if (hpz_size > 0) hpz_.mpi = base.split(node_id * topology.world_size + local / hpz_size, me, "hpz");
  for (Group* g : {&engine_world_, &node_, &cross_node_, &node_gather_, &shard_, &replicate_, &hpz_}) carry(*g, options);
}

MpiCommunicator& ProcessMesh::outer() {
  if (!outer_) throw_internal("the process mesh has no outer group: it was built with one island");
  return *outer_;
}

void ProcessMesh::carry(Group& group, const MeshOptions& options) {
  if (group.mpi && options.carry) group.carrier = options.carry(*group.mpi);
}

MeshCarrier staged_carrier(std::shared_ptr<HostStaging> staging) {
  return [staging = std::move(staging)](MpiCommunicator& group) -> std::unique_ptr<Communicator> {
    return std::make_unique<StagedCommunicator>(group, staging);
  };
}

ByteCounters ProcessMesh::total_counters() const {
  ByteCounters total;
  for (const Group* g : {&node_, &node_gather_, &cross_node_, &shard_, &replicate_, &hpz_}) {
    if (g->mpi) total += g->carried().counters();
  }
  if (outer_) total += outer_->counters();
  return total;
}

void ProcessMesh::reset_counters() {
  for (const Group* g : {&node_, &node_gather_, &cross_node_, &shard_, &replicate_, &hpz_}) {
    if (g->mpi) g->carried().reset_counters();
  }
  if (outer_) outer_->reset_counters();
}

std::string ProcessMesh::describe() {
  const Topology& topology = world_topology_;
  const int me = topology.world_rank;
  const int world_size = topology.world_size;
  const MPI_Comm world = world_.raw();

  const std::array<Membership, 5> mine = {membership_of(shard_.mpi.get(), me), membership_of(replicate_.mpi.get(), me),
                                          membership_of(hpz_.mpi.get(), me), membership_of(island_.get(), me),
                                          membership_of(outer_.get(), me)};
  std::vector<int> row;
  for (const auto& m : mine) row.insert(row.end(), {m.leader, m.rank, m.size});
  constexpr int kRow = 15;
  constexpr int kHostChars = 64;
  std::array<char, kHostChars> host{};
  const std::string my_host = host_name();
  std::copy_n(my_host.begin(), std::min<std::size_t>(my_host.size(), kHostChars - 1), host.begin());

  std::vector<int> rows(me == 0 ? static_cast<std::size_t>(world_size * kRow) : 0);
  std::vector<char> hosts(me == 0 ? static_cast<std::size_t>(world_size * kHostChars) : 0);
  MPI_Gather(row.data(), kRow, MPI_INT, rows.data(), kRow, MPI_INT, 0, world);
  MPI_Gather(host.data(), kHostChars, MPI_CHAR, hosts.data(), kHostChars, MPI_CHAR, 0, world);
  if (me != 0) return "";

  const auto at = [&](int r, int role) {
    const auto base = static_cast<std::size_t>(r * kRow + role * 3);
    return Membership{rows[base], rows[base + 1], rows[base + 2]};
  };
  const auto host_of = [&](int r) { return std::string(&hosts[static_cast<std::size_t>(r * kHostChars)]); };
  // Each distinct group once, members in group-rank order, groups ordered by their lowest rank.
  const auto groups_text = [&](int role) {
    std::map<int, std::vector<std::pair<int, int>>> groups;
    for (int r = 0; r < world_size; ++r) groups[at(r, role).leader].emplace_back(at(r, role).rank, r);
    std::string text;
    for (auto& [leader, members] : groups) {
      std::sort(members.begin(), members.end());
      text += text.empty() ? "{" : " {";
      for (std::size_t i = 0; i < members.size(); ++i) {
        if (i > 0) text += ' ';
        text += std::to_string(members[i].second);
      }
      text += "}";
    }
    return text;
  };

  std::ostringstream out;
  const int nodes = topology.num_nodes();
  out << "mesh: " << world_size << " ranks on " << nodes << " node" << (nodes == 1 ? "" : "s");
  if (topology.nodes_equal_size()) out << " x " << topology.node_size(0) << " ranks";
  else out << " of unequal size (" << node_sizes_text(topology) << ")";
  if (topology.emulated) {
    out << " (emulated with --topology.ranks_per_node=" << topology.ranks_per_node << ", placement "
        << to_string(topology.placement) << ")";
  } else {
    out << " (real nodes from MPI_COMM_TYPE_SHARED)";
  }
  out << "; " << requested_by_ << ", shard groups of scope " << to_string(shard_scope_);
  if (islands_ > 1) out << " inside each of " << islands_ << " islands of " << topology_.world_size << " ranks";
  out << "\n";
  for (int id = 0; id < nodes; ++id) {
    const auto ranks = topology.ranks_on_node(id);
    out << "  node " << id;
    if (!topology.emulated) out << " (" << host_of(ranks.front()) << ")";
    out << ": ranks";
    for (const int r : ranks) out << " " << r;
    out << "\n";
  }
  out << "  shard groups (a unit's parameters are split over):  " << groups_text(0) << "\n";
  out << "  replicate groups (hold the same shard):             " << groups_text(1) << "\n";
  if (hpz_.mpi) out << "  hpz groups (secondary copy of the weights):         " << groups_text(2) << "\n";
  if (island_) {
    out << "  islands (train apart between outer steps):          " << groups_text(3) << "\n";
    out << "  outer groups (the same shard in every island):      " << groups_text(4) << "\n";
  }
  for (int r = 0; r < world_size; ++r) {
    out << "  rank " << r << ": host " << host_of(r) << "  node " << topology.node_of_rank[static_cast<std::size_t>(r)]
        << "  local " << topology.local_rank_of(r) << "  shard " << at(r, 0).rank << "/" << at(r, 0).size
        << "  replicate " << at(r, 1).rank << "/" << at(r, 1).size;
    if (hpz_.mpi) out << "  hpz " << at(r, 2).rank << "/" << at(r, 2).size;
    if (island_) out << "  island place " << at(r, 3).rank << "/" << at(r, 3).size;
    out << "\n";
  }
  return out.str();
}

}  // namespace hsdp::comm
