#pragma once
// The traffic model behind hsdp's byte counters: how many bytes ONE rank sends in one collective, and over
// which link class. It is the standard model of bandwidth-optimal algorithms (what NCCL and the ZeRO papers
// count), not a trace of what a particular MPI library does internally:
//
//   Let n = group size, b = bytes per element, and order the group's ranks node-major ("the ring": all
//   ranks of the first node in rank order, then the next node, ...), as a topology-aware ring does.
//   Each rank sends to its ring successor; those bytes are inter-node when the successor is on another node.
//
//   all_reduce(count)           ring reduce-scatter + all-gather over n chunks of c = ceil(count/n) elements:
//                               2 (n-1) c b bytes, all to the successor.
//   reduce_scatter(recv_count)  (n-1) recv_count b, to the successor.
//   all_gather(send_count)      (n-1) send_count b, to the successor.
//   all_to_all(per_peer)        per_peer b to every other rank; each block is intra or inter by its target.
//   broadcast(count)            pipelined chain along the ring starting at the root: every rank except the
//                               root's ring predecessor sends count b to its successor.
//   barrier                     0 bytes.
//   n == 1: every collective sends 0 bytes.
//
// Padding rule: reduce_scatter and all_gather move equal blocks per rank. A caller whose total does not
// divide by n pads it to shard_count(total, n) * n elements with zeros (zeros add nothing to a sum) and
// ignores the padding; the padded size is what the counters see. all_reduce pads internally (the ceil).
#include <cstddef>
#include <cstdint>
#include <span>

#include "hsdp/comm/types.hpp"

namespace hsdp::comm {

// Elements per rank when `total` elements are split over n ranks with padding: ceil(total / n).
constexpr std::size_t shard_count(std::size_t total, std::size_t n) { return (total + n - 1) / n; }
constexpr std::size_t padded_count(std::size_t total, std::size_t n) { return shard_count(total, n) * n; }

// The ring successor (a comm rank) of `rank` in the node-major ring over `node_of_rank`.
int ring_successor(int rank, std::span<const int> node_of_rank);
int ring_predecessor(int rank, std::span<const int> node_of_rank);

// Bytes rank `rank` sends in collective `c`; `count` is as in the table above; `root` for broadcast.
LinkBytes traffic_bytes(Collective c, std::size_t count, std::size_t elem_bytes, int rank,
                        std::span<const int> node_of_rank, int root = 0);

// nccl-tests bus-bandwidth factor: busbw = algbw * factor.
double bus_factor(Collective c, int n);

}  // namespace hsdp::comm
