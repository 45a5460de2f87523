#include "hsdp/shard/zeropp.hpp"

#include <string>

#include "hsdp/core/error.hpp"

#include "hsdp/stream/device_ops.hpp"

// Derivation of the qgZ bound in zeropp.hpp: quantization with scale s changes an element by at most s/2, and
// s = absmax/qmax rounded up by at most 2^-16 relative. Hop 1 adds, for each rank i of a node, at most
// a_i/(2 q1) (1 + 2^-16). The node's partial sum of the block then has absmax at most
// A_node = sum_i a_i (1 + 1/(2 q1)), and requantizing it adds at most A_node/(2 q2) (1 + 2^-16). The final fp32
// additions of `nodes` terms add rounding far below these (relative 2^-24 per addition), covered by using
// (1 + 2^-15) instead of (1 + 2^-16).

namespace hsdp::shard {

void validate(Sharding s, const ZeroPPOptions& z) {
  quant::validate({z.grad_bits, z.block});
  if (!z.any()) return;
  const Strategy& st = strategy(s);
  if (!st.zeropp) {
    std::string allowed;
    for (const Strategy& t : all_strategies()) {
      if (t.zeropp) allowed += (allowed.empty() ? "" : " or ") + std::string(t.name);
    }
    throw_config("zeropp: ZeRO++ works with parallel.sharding=" + allowed + ", not " + st.name);
  }
  if (z.hpz_partition_size > 0 && st.shard_scope != comm::ShardScope::world) {
    throw_config("zeropp.hpz_partition_size=" + std::to_string(z.hpz_partition_size) +
                 ": hpZ keeps the backward gathers inside the node instead of across nodes, but with "
                 "parallel.sharding=" + std::string(st.name) +
                 " the shard group is the node already, so it would change nothing; use it with full_shard or set it "
                 "to 0");
  }
}

void qgz_quantize_slices(DeviceOps& device, const float* full, std::size_t s, quant::QuantSpec spec,
                         const std::vector<std::vector<int>>& shard_rank_at, std::uint8_t* out) {
  const std::size_t m = message_bytes(s, spec);
  const std::size_t nodes = shard_rank_at.size();
  const std::size_t p = shard_rank_at.front().size();
  for (std::size_t l = 0; l < p; ++l) {
    for (std::size_t j = 0; j < nodes; ++j) {
      const float* slice = full + static_cast<std::size_t>(shard_rank_at[j][l]) * s;
      device.quantize(slice, s, spec, out + (l * nodes + j) * m);
    }
  }
}

void qgz_requantize(DeviceOps& device, const std::uint8_t* received, std::size_t s, quant::QuantSpec spec, std::size_t p,
                    std::size_t nodes, std::uint8_t* out) {
  const std::size_t m = message_bytes(s, spec);
  std::vector<const std::uint8_t*> parts;
  for (std::size_t j = 0; j < nodes; ++j) {
    parts.clear();
    for (std::size_t sender = 0; sender < p; ++sender) parts.push_back(received + (sender * nodes + j) * m);
    device.reduce_requantize(parts, s, spec, out + j * m);
  }
}

void qgz_sum(DeviceOps& device, const std::uint8_t* received, std::size_t parts_count, std::size_t s,
             quant::QuantSpec spec, float* slice_sum) {
  const std::size_t m = message_bytes(s, spec);
  std::vector<const std::uint8_t*> parts;
  for (std::size_t j = 0; j < parts_count; ++j) parts.push_back(received + j * m);
  device.reduce_dequantize(parts, s, spec, slice_sum);
}

void qgz_one_hop(DeviceOps& device, std::span<const float> full, std::span<float> slice_sum, quant::QuantSpec spec,
                 comm::Communicator& group) {
  const std::size_t s = slice_sum.size();
  const std::size_t m = message_bytes(s, spec);
  const auto p = static_cast<std::size_t>(group.size());
  auto send = device.array<std::uint8_t>(p * m, MemCategory::comm_buffers);
  auto recv = device.array<std::uint8_t>(p * m, MemCategory::comm_buffers);
  qgz_quantize_slices(device, full.data(), s, spec, qgz_one_node(group.size()), send.data());
  group.all_to_all(send.data(), recv.data(), m, DType::u8);
  qgz_sum(device, recv.data(), p, s, spec, slice_sum.data());
}

std::vector<std::vector<int>> qgz_one_node(int ranks) {
  std::vector<std::vector<int>> at(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) at[static_cast<std::size_t>(r)] = {r};
  return at;
}

void qgz_two_hop(DeviceOps& device, std::span<const float> full, std::span<float> slice_sum, quant::QuantSpec spec,
                 comm::Communicator& node, comm::Communicator& cross_node,
                 const std::vector<std::vector<int>>& shard_rank_at) {
  const std::size_t s = slice_sum.size();
  const std::size_t m = message_bytes(s, spec);
  const auto p = static_cast<std::size_t>(node.size());
  const auto nodes = static_cast<std::size_t>(cross_node.size());
  auto hop2_send = device.array<std::uint8_t>(nodes * m, MemCategory::comm_buffers);
  auto hop2_recv = device.array<std::uint8_t>(nodes * m, MemCategory::comm_buffers);
  if (p == 1) {
    qgz_quantize_slices(device, full.data(), s, spec, shard_rank_at, hop2_send.data());
  } else {
    auto send = device.array<std::uint8_t>(p * nodes * m, MemCategory::comm_buffers);
    auto recv = device.array<std::uint8_t>(p * nodes * m, MemCategory::comm_buffers);
    qgz_quantize_slices(device, full.data(), s, spec, shard_rank_at, send.data());
    node.all_to_all(send.data(), recv.data(), nodes * m, DType::u8);
    qgz_requantize(device, recv.data(), s, spec, p, nodes, hop2_send.data());
  }
  cross_node.all_to_all(hop2_send.data(), hop2_recv.data(), m, DType::u8);
  qgz_sum(device, hop2_recv.data(), nodes, s, spec, slice_sum.data());
}

}  // namespace hsdp::shard
