#pragma once
// A quantized message: what collectives move for qwZ and qgZ, one byte buffer per block-quantized span: the packed
// values (int8: n bytes, int4: ceil(n/2)), padded to a multiple of 4 bytes, then the fp32 block scales. Collectives
// move messages as uint8.
#include <cstddef>
#include <cstdint>
#include <span>

#include "hsdp/quant/blockwise.hpp"

namespace hsdp::quant {

std::size_t message_bytes(std::size_t count, QuantSpec spec);
// Quantizes `values` into the message at `out` (message_bytes(values.size(), spec) bytes).
void pack_message(std::span<const float> values, QuantSpec spec, std::uint8_t* out);
// A view of the message at `in` holding `count` elements.
QuantizedView message_view(const std::uint8_t* in, std::size_t count, QuantSpec spec);
QuantizedSpan message_span(std::uint8_t* out, std::size_t count, QuantSpec spec);

}  // namespace hsdp::quant
