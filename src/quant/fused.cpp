#include "hsdp/quant/fused.hpp"

#include <string>
#include <vector>

#include "block_kernels.hpp"
#include "hsdp/core/error.hpp"

namespace hsdp::quant {

namespace {

// All inputs hold `count` elements with the same block and bits.
void check_inputs(std::span<const QuantizedView> inputs, std::size_t count, std::string_view operation) {
  if (inputs.empty()) throw_internal(std::string(operation) + ": no inputs");
  const QuantSpec& first = inputs.front().spec;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    detail::check_layout(inputs[k], count, operation);
    if (inputs[k].spec.block != first.block || inputs[k].spec.bits != first.bits) {
      throw_internal(std::string(operation) + ": input " + std::to_string(k) + " is " +
                     std::string(to_string(inputs[k].spec.bits)) + " in blocks of " +
                     std::to_string(inputs[k].spec.block) + ", input 0 is " + std::string(to_string(first.bits)) +
                     " in blocks of " + std::to_string(first.block));
    }
  }
}

// sum[i] = d_0[i] + d_1[i] + ... over block b, left to right, in fp32.
void sum_block(std::span<const QuantizedView> inputs, std::size_t b, std::size_t begin, std::size_t len, float* sum) {
  const Bits bits = inputs.front().spec.bits;
  const std::size_t offset = detail::packed_offset(begin, bits);
  detail::dequantize_values(inputs[0].packed.data() + offset, len, bits, inputs[0].scales[b], sum);
  for (std::size_t k = 1; k < inputs.size(); ++k) {
    detail::accumulate_values(inputs[k].packed.data() + offset, len, bits, inputs[k].scales[b], sum);
  }
}

}  // namespace

void reduce_requantize(std::span<const QuantizedView> inputs, QuantizedSpan out) {
  check_inputs(inputs, out.count, "reduce_requantize");
  detail::check_layout(out, out.count, "reduce_requantize");
  const std::size_t block = inputs.front().spec.block;
  if (out.spec.block != block) {
    throw_internal("reduce_requantize: output block " + std::to_string(out.spec.block) + " differs from input block " +
                   std::to_string(block));
  }
  const Bits bits = out.spec.bits;
  const std::size_t bad = detail::for_each_block(
      out.count, block, block, [&](std::size_t b, std::size_t begin, std::size_t len, float* sum) {
        sum_block(inputs, b, begin, len, sum);
        return detail::quantize_block(sum, len, bits, out.packed.data() + detail::packed_offset(begin, bits),
                                      out.scales[b]);
      });
  if (bad != detail::kNoBlock) {
    // Only on the error path: recompute the failing block's sum to name the element.
    const std::size_t begin = bad * block;
    const std::size_t len = std::min(block, out.count - begin);
    std::vector<float> sum(len);
    sum_block(inputs, bad, begin, len, sum.data());
    std::size_t i = 0;
    while (i < len && detail::abs_max_bits(&sum[i], 1) < detail::kInfBits) ++i;
    detail::throw_non_finite("reduce_requantize (sum of dequantized inputs)", begin + i, out.count);
  }
}

void reduce_dequantize(std::span<const QuantizedView> inputs, std::span<float> out) {
  check_inputs(inputs, out.size(), "reduce_dequantize");
  detail::for_each_block(out.size(), inputs.front().spec.block, 0,
                         [&](std::size_t b, std::size_t begin, std::size_t len, float*) {
                           sum_block(inputs, b, begin, len, out.data() + begin);
                           return true;
                         });
}

}  // namespace hsdp::quant
