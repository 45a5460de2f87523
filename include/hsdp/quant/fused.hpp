#pragma once
// Fused dequantize-reduce(-requantize): the reduction step of a quantized reduce-scatter (ZeRO++ qgZ)
// without materialising m fp32 copies. For m quantized inputs of the same count, block and bits:
//   sum[i] = d_0[i] + d_1[i] + ... + d_{m-1}[i]    in fp32, left to right, d_k = dequantize(inputs[k])
// and then either requantize the sum (int8 or int4, the output's bits may differ from the inputs') or
// write it as fp32 (the final reduce). The result equals, bit for bit, the unfused sequence
// dequantize-each-to-fp32, sum in the same order, quantize (the tests memcmp the two).
// A sum that overflows to Inf makes reduce_requantize throw, exactly as quantize would; reduce_dequantize
// writes the Inf, as the unfused fp32 sum would. `out` must not overlap the inputs.
#include <span>

#include "hsdp/quant/blockwise.hpp"

namespace hsdp::quant {

// inputs: m >= 1 views with equal count, block and bits. out: out.count equal to theirs and
// out.spec.block equal to their block; out.spec.bits is free.
void reduce_requantize(std::span<const QuantizedView> inputs, QuantizedSpan out);

// inputs as above; out.size() equals their count.
void reduce_dequantize(std::span<const QuantizedView> inputs, std::span<float> out);

}  // namespace hsdp::quant
