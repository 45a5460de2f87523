#pragma once
// Parameter initialisation as nanoGPT's _init_weights: Linear and Embedding weights N(0, 0.02), the two
// residual projections N(0, 0.02 / sqrt(2 * n_layer)), biases 0, LayerNorm weight 1 and bias 0. The padded
// rows of wte are 0. Values are drawn in double from the parameter's own stream (rng.hpp) and rounded to T,
// so a float model is the rounded double model and no value depends on the unit layout or rank.
#include <cstdint>
#include <span>

#include "hsdp/model/layout.hpp"

namespace hsdp::model {

// `values` has p.numel elements.
template <typename T>
void init_param(const ParamInfo& p, std::span<T> values, std::uint64_t seed);

// `unit_buffer` has layout.unit(unit).numel elements.
template <typename T>
void init_unit(const ModelLayout& layout, int unit, std::span<T> unit_buffer, std::uint64_t seed);

}  // namespace hsdp::model
