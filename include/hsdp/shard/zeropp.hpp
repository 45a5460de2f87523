#pragma once
// ZeRO++: its options, and qgZ's two-hop quantized reduce-scatter over DeviceOps and the mesh's groups. Messages
// are quant/message.hpp's.
//
// qgZ, the quantized gradient reduce-scatter, for a shard group of `nodes` x `p` ranks (equal nodes), unit
// gradient G of Pp = n S elements, shard rank r = (node j, local l) owning slice r = G[r S, (r+1) S):
//   hop 1 (inside the node, all_to_all): to local rank l' go the slices of every rank with local rank l', one
//          quantized message of S elements per node j (so each slice keeps its own blocks).
//   reduce: for each node j, dequantize the p messages received for slice (j, l), sum in fp32 in rank order and
//          requantize (the fused kernel): the node's partial sum of slice (j, l).
//   hop 2 (across nodes, all_to_all over the ranks with local rank l): the partial sum of slice (j, l) goes to node j.
//   final: dequantize the `nodes` partial sums of this rank's own slice and add them in fp32, in node order.
// With p == 1 hop 1 moves nothing: the hop-2 messages are this rank's slices quantized once.
// Error bound per element (derivation in zeropp.cpp): with a_i the absmax of rank i's block holding the element,
//   |qgZ - exact sum| <= sum_nodes [ sum_{i in node} a_i / (2 q1) + A_node / (2 q2) ] (1 + 2^-15)
// where A_node = sum_{i in node} a_i (1 + 1/(2 q1)) bounds the partial sum's block absmax and q1, q2 are the
// qmax of the two quantizations (hop 1 is skipped when p == 1: then only the q2 term, with A_node = a_i).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "hsdp/comm/communicator.hpp"
#include "hsdp/quant/blockwise.hpp"
#include "hsdp/quant/message.hpp"
#include "hsdp/shard/strategy.hpp"

namespace hsdp::stream {
class DeviceOps;
}  // namespace hsdp::stream

namespace hsdp::shard {

using stream::DeviceOps;

struct ZeroPPOptions {
  bool quantized_weights = false;    // qwZ: int8 forward all-gather
  int hpz_partition_size = 0;        // hpZ: k > 0 keeps a secondary weight shard in groups of k ranks of a node
  bool quantized_gradients = false;  // qgZ: two-hop quantized all-to-all instead of the reduce-scatter
  quant::Bits grad_bits = quant::Bits::int4;
  std::size_t block = quant::kDefaultBlock;
  bool any() const { return quantized_weights || hpz_partition_size > 0 || quantized_gradients; }
};

// Config errors naming the keys: ZeRO++ with a strategy it does not work with, hpZ where the shard group is the node
// already (hybrid_shard: it would change nothing), the gradient block or bits quant rejects. For hsdp-train's deck
// checks and the engine alike.
void validate(Sharding s, const ZeroPPOptions& z);

using quant::message_bytes;
using quant::message_span;
using quant::message_view;
using quant::pack_message;

// qgZ across nodes (full_shard): `full` holds n S elements (n = nodes x p shard ranks); on return `slice_sum` holds the
// sum over all ranks of this rank's slice (not averaged). `node` has this node's p ranks in local-rank order,
// `cross_node` the ranks with this local rank in node order; shard_rank_at[node][local] maps to shard ranks.
// `device` quantizes, reduces and holds the messages; the hops are blocking all-to-alls.
void qgz_two_hop(DeviceOps& device, std::span<const float> full, std::span<float> slice_sum, quant::QuantSpec spec,
                 comm::Communicator& node, comm::Communicator& cross_node,
                 const std::vector<std::vector<int>>& shard_rank_at);
// The steps of both, which the engine enqueues with the hops as nonblocking collectives between them (m =
// message_bytes(s, spec)):
//   quantize_slices  the message of slice shard_rank_at[j][l] to (l * nodes + j) * m of `out`, for every local rank l
//                    and node j (p = shard_rank_at[0].size(): with p == 1 these are the hop-2 messages)
//   requantize       hop 1's p x nodes received messages into the node's partial sums, message j at j * m of `out`
//   sum              the fp32 sum of `parts` received messages, in order, into slice_sum [s]
void qgz_quantize_slices(DeviceOps& device, const float* full, std::size_t s, quant::QuantSpec spec,
                         const std::vector<std::vector<int>>& shard_rank_at, std::uint8_t* out);
void qgz_requantize(DeviceOps& device, const std::uint8_t* received, std::size_t s, quant::QuantSpec spec, std::size_t p,
                    std::size_t nodes, std::uint8_t* out);
void qgz_sum(DeviceOps& device, const std::uint8_t* received, std::size_t parts, std::size_t s, quant::QuantSpec spec,
             float* slice_sum);
// One group seen as `ranks` nodes of one rank (qgZ inside one group: slice l to rank l).
std::vector<std::vector<int>> qgz_one_node(int ranks);
// qgZ inside one group (hybrid_shard's node): one quantized all-to-all; rank l receives slice l.
void qgz_one_hop(DeviceOps& device, std::span<const float> full, std::span<float> slice_sum, quant::QuantSpec spec,
                 comm::Communicator& group);

}  // namespace hsdp::shard
