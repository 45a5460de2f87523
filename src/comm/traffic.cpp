#include "hsdp/comm/traffic.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "hsdp/core/error.hpp"

namespace hsdp::comm {
namespace {

// Comm ranks in ring order: node-major, by (node id, comm rank).
std::vector<int> ring_order(std::span<const int> node_of_rank) {
  std::vector<int> order(node_of_rank.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return node_of_rank[static_cast<std::size_t>(a)] < node_of_rank[static_cast<std::size_t>(b)];
  });
  return order;
}

std::size_t ring_position(int rank, const std::vector<int>& order) {
  const auto it = std::find(order.begin(), order.end(), rank);
  if (it == order.end()) {
    throw_internal("traffic model: rank " + std::to_string(rank) + " is not in a group of " +
                   std::to_string(order.size()) + " ranks");
  }
  return static_cast<std::size_t>(it - order.begin());
}

}  // namespace

int ring_successor(int rank, std::span<const int> node_of_rank) {
  const auto order = ring_order(node_of_rank);
  return order[(ring_position(rank, order) + 1) % order.size()];
}

int ring_predecessor(int rank, std::span<const int> node_of_rank) {
  const auto order = ring_order(node_of_rank);
  return order[(ring_position(rank, order) + order.size() - 1) % order.size()];
}

LinkBytes traffic_bytes(Collective c, std::size_t count, std::size_t elem_bytes, int rank,
                        std::span<const int> node_of_rank, int root) {
  const std::size_t n = node_of_rank.size();
  LinkBytes bytes;
  if (n <= 1) return bytes;
  const int my_node = node_of_rank[static_cast<std::size_t>(rank)];
  const auto add_to = [&](int peer, std::uint64_t amount) {
    if (node_of_rank[static_cast<std::size_t>(peer)] == my_node) bytes.intra += amount;
    else bytes.inter += amount;
  };
  const std::uint64_t b = elem_bytes;
  switch (c) {
    case Collective::all_reduce:
      add_to(ring_successor(rank, node_of_rank), 2 * (n - 1) * shard_count(count, n) * b);
      break;
    case Collective::reduce_scatter:
    case Collective::all_gather:
      add_to(ring_successor(rank, node_of_rank), (n - 1) * count * b);
      break;
    case Collective::all_to_all:
      for (std::size_t peer = 0; peer < n; ++peer) {
        if (static_cast<int>(peer) != rank) add_to(static_cast<int>(peer), count * b);
      }
      break;
    case Collective::broadcast:
      // The chain starts at the root and ends at the root's ring predecessor, which sends nothing.
      if (rank != ring_predecessor(root, node_of_rank)) add_to(ring_successor(rank, node_of_rank), count * b);
      break;
    case Collective::barrier:
      break;
  }
  return bytes;
}

double bus_factor(Collective c, int n) {
  if (n < 1) return 0.0;
  const double nd = n;
  switch (c) {
    case Collective::all_reduce: return 2.0 * (nd - 1.0) / nd;
    case Collective::reduce_scatter:
    case Collective::all_gather:
    case Collective::all_to_all: return (nd - 1.0) / nd;
    case Collective::broadcast: return 1.0;
    case Collective::barrier: return 0.0;
  }
  return 0.0;
}

}  // namespace hsdp::comm
