#include "plan/mesh_groups.hpp"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "hsdp/core/error.hpp"
#include "hsdp/shard/strategy.hpp"

namespace hsdp::plan {
namespace {

// The MPI_Comm_split group of `t.world_rank`: ranks with its color, ordered by (key, world rank).
shard::GroupView split(const comm::Topology& t, const std::function<int(int)>& color,
                       const std::function<int(int)>& key) {
  const int me = t.world_rank;
  const int my_color = color(me);
  std::vector<int> members;
  for (int r = 0; r < t.world_size; ++r) {
    if (color(r) == my_color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return key(a) < key(b); });
  shard::GroupView g;
  g.node_of_rank.clear();
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (members[i] == me) g.rank = static_cast<int>(i);
    g.node_of_rank.push_back(t.node_of_rank[static_cast<std::size_t>(members[i])]);
  }
  return g;
}

std::string node_sizes_text(const comm::Topology& t) {
  std::string text;
  for (int id = 0; id < t.num_nodes(); ++id) {
    if (id > 0) text += ", ";
    text += "node " + std::to_string(id) + ": " + std::to_string(t.node_size(id));
  }
  return text;
}

}  // namespace

shard::MeshGroups mesh_groups(const comm::Topology& t, shard::Sharding strategy, int hpz) {
  const comm::ShardScope scope = shard::strategy(strategy).shard_scope;
  if (scope == comm::ShardScope::node && !t.nodes_equal_size()) {
    throw_config(std::string(shard::to_string(strategy)) + " needs nodes with equal numbers of ranks (" +
                 node_sizes_text(t) + ")");
  }
  if (hpz > 0) {
    for (int id = 0; id < t.num_nodes(); ++id) {
      if (t.node_size(id) % hpz != 0) {
        throw_config("zeropp.hpz_partition_size=" + std::to_string(hpz) + " must divide the ranks of every node (" +
                     node_sizes_text(t) + ")");
      }
    }
  }
  const auto node = [&](int r) { return t.node_of_rank[static_cast<std::size_t>(r)]; };
  std::vector<int> local_of(static_cast<std::size_t>(t.world_size));
  for (int r = 0; r < t.world_size; ++r) local_of[static_cast<std::size_t>(r)] = t.local_rank_of(r);
  const auto local = [&](int r) { return local_of[static_cast<std::size_t>(r)]; };
  const auto self = [](int r) { return r; };
  const auto zero = [](int) { return 0; };
  shard::MeshGroups g;
  g.node = split(t, node, self);
  g.cross_node = split(t, local, node);
  g.nodes_equal_size = t.nodes_equal_size();
  switch (scope) {
    case comm::ShardScope::world:
      g.shard = split(t, zero, self);
      g.replicate = split(t, self, zero);
      break;
    case comm::ShardScope::node:
      g.shard = split(t, node, self);
      g.replicate = split(t, local, node);
      break;
    case comm::ShardScope::self:
      g.shard = split(t, self, zero);
      g.replicate = split(t, zero, self);
      break;
  }
  if (hpz > 0) {
    g.hpz = split(
        t, [&](int r) { return node(r) * t.world_size + local(r) / hpz; }, self);
  }
  return g;
}

comm::Topology emulated_topology(int rank, int nodes, int ranks_per_node, comm::Placement placement) {
  if (nodes < 1) throw_config("--nodes must be at least 1 (got " + std::to_string(nodes) + ")");
  if (ranks_per_node < 1) {
    throw_config("--ranks-per-node must be at least 1 (got " + std::to_string(ranks_per_node) + ")");
  }
  return comm::Topology::emulate(rank, nodes * ranks_per_node, ranks_per_node, placement);
}

bool spans_nodes(const shard::GroupView& group) {
  const auto& n = group.node_of_rank;
  return std::any_of(n.begin(), n.end(), [&](int id) { return id != n.front(); });
}

}  // namespace hsdp::plan
