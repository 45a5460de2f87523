#include "hsdp/shard/zeropp.hpp"

#include "hsdp/core/buffer.hpp"
#include "hsdp/quant/fused.hpp"

// Derivation of the qgZ bound in zeropp.hpp: quantization with scale s changes an element by at most s/2, and
// s = absmax/qmax rounded up by at most 2^-16 relative. Hop 1 adds, for each rank i of a node, at most
// a_i/(2 q1) (1 + 2^-16). The node's partial sum of the block then has absmax at most
// A_node = sum_i a_i (1 + 1/(2 q1)), and requantizing it adds at most A_node/(2 q2) (1 + 2^-16). The final fp32
// additions of `nodes` terms add rounding far below these (relative 2^-24 per addition), covered by using
// (1 + 2^-15) instead of (1 + 2^-16).

namespace hsdp::shard {

namespace {
std::size_t packed_region(std::size_t count, quant::Bits bits) { return (quant::packed_bytes(count, bits) + 3) / 4 * 4; }
}  // namespace

std::size_t message_bytes(std::size_t count, quant::QuantSpec spec) {
  return packed_region(count, spec.bits) + sizeof(float) * quant::scale_count(count, spec.block);
}

quant::QuantizedSpan message_span(std::uint8_t* out, std::size_t count, quant::QuantSpec spec) {
  const std::size_t packed = quant::packed_bytes(count, spec.bits);
  auto* scales = reinterpret_cast<float*>(out + packed_region(count, spec.bits));
  return {std::span<std::uint8_t>(out, packed), std::span<float>(scales, quant::scale_count(count, spec.block)), count,
          spec};
}

quant::QuantizedView message_view(const std::uint8_t* in, std::size_t count, quant::QuantSpec spec) {
  return message_span(const_cast<std::uint8_t*>(in), count, spec);
}

void pack_message(std::span<const float> values, quant::QuantSpec spec, std::uint8_t* out) {
  quant::quantize(values, message_span(out, values.size(), spec));
}

void qgz_one_hop(std::span<const float> full, std::span<float> slice_sum, quant::QuantSpec spec,
                 comm::Communicator& group) {
  const std::size_t s = slice_sum.size();
  const std::size_t m = message_bytes(s, spec);
  const auto p = static_cast<std::size_t>(group.size());
  Buffer<std::uint8_t> send(p * m), recv(p * m);
  for (std::size_t l = 0; l < p; ++l) pack_message(full.subspan(l * s, s), spec, send.data() + l * m);
  group.all_to_all(send.data(), recv.data(), m, DType::u8);
  std::vector<quant::QuantizedView> parts;
  for (std::size_t l = 0; l < p; ++l) parts.push_back(message_view(recv.data() + l * m, s, spec));
  quant::reduce_dequantize(parts, slice_sum);
}

void qgz_two_hop(std::span<const float> full, std::span<float> slice_sum, quant::QuantSpec spec,
                 comm::Communicator& node, comm::Communicator& cross_node,
                 const std::vector<std::vector<int>>& shard_rank_at) {
  const std::size_t s = slice_sum.size();
  const std::size_t m = message_bytes(s, spec);
  const auto p = static_cast<std::size_t>(node.size());
  const auto nodes = static_cast<std::size_t>(cross_node.size());
  auto slice = [&](std::size_t j, std::size_t l) {
    return full.subspan(static_cast<std::size_t>(shard_rank_at[j][l]) * s, s);
  };
  Buffer<std::uint8_t> hop2_send(nodes * m), hop2_recv(nodes * m);
  if (p == 1) {
    for (std::size_t j = 0; j < nodes; ++j) pack_message(slice(j, 0), spec, hop2_send.data() + j * m);
  } else {
    Buffer<std::uint8_t> send(p * nodes * m), recv(p * nodes * m);
    for (std::size_t l = 0; l < p; ++l) {
      for (std::size_t j = 0; j < nodes; ++j) pack_message(slice(j, l), spec, send.data() + (l * nodes + j) * m);
    }
    node.all_to_all(send.data(), recv.data(), nodes * m, DType::u8);
    for (std::size_t j = 0; j < nodes; ++j) {
      std::vector<quant::QuantizedView> parts;
      for (std::size_t sender = 0; sender < p; ++sender) {
        parts.push_back(message_view(recv.data() + (sender * nodes + j) * m, s, spec));
      }
      quant::reduce_requantize(parts, message_span(hop2_send.data() + j * m, s, spec));
    }
  }
  cross_node.all_to_all(hop2_send.data(), hop2_recv.data(), m, DType::u8);
  std::vector<quant::QuantizedView> parts;
  for (std::size_t j = 0; j < nodes; ++j) parts.push_back(message_view(hop2_recv.data() + j * m, s, spec));
  quant::reduce_dequantize(parts, slice_sum);
}

}  // namespace hsdp::shard
