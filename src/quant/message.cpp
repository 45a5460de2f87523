#include "hsdp/quant/message.hpp"

namespace hsdp::quant {
namespace {

std::size_t packed_region(std::size_t count, Bits bits) {
  return (packed_bytes(count, bits) + 3) / 4 * 4;
}

}  // namespace

std::size_t message_bytes(std::size_t count, QuantSpec spec) {
  return packed_region(count, spec.bits) + sizeof(float) * scale_count(count, spec.block);
}

QuantizedSpan message_span(std::uint8_t* out, std::size_t count, QuantSpec spec) {
  const std::size_t packed = packed_bytes(count, spec.bits);
  auto* scales = reinterpret_cast<float*>(out + packed_region(count, spec.bits));
  return {std::span<std::uint8_t>(out, packed), std::span<float>(scales, scale_count(count, spec.block)), count, spec};
}

QuantizedView message_view(const std::uint8_t* in, std::size_t count, QuantSpec spec) {
  return message_span(const_cast<std::uint8_t*>(in), count, spec);
}

void pack_message(std::span<const float> values, QuantSpec spec, std::uint8_t* out) {
  quantize(values, message_span(out, values.size(), spec));
}

}  // namespace hsdp::quant
