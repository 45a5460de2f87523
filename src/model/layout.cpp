#include "hsdp/model/layout.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "hsdp/core/error.hpp"

namespace hsdp::model {
namespace {

constexpr double kInitStd = 0.02;

std::size_t product(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (const std::int64_t d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

}  // namespace

std::size_t ParamInfo::logical_numel() const { return product(logical_shape); }

ModelLayout::ModelLayout(const GptConfig& config) : config_(config) {
  config_.validate();
  if (config_.llama()) {
    add_llama();
  } else {
    add_gpt2();
  }
}

void ModelLayout::add_gpt2() {
  const std::int64_t C = config_.n_embd;
  const std::int64_t L = config_.n_layer;
  // GPT-2 scales the two projections that write into the residual stream by 1/sqrt(2 * n_layer).
  const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(L));

  add_unit("embedding");
  add_param("transformer.wte.weight", {config_.padded_vocab_size, C}, {config_.vocab_size, C}, true,
            ParamInit::normal, kInitStd);
  add_param("transformer.wpe.weight", {config_.block_size, C}, {config_.block_size, C}, true,
            ParamInit::normal, kInitStd);

  for (std::int64_t i = 0; i < L; ++i) {
    add_unit("block." + std::to_string(i));
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    const auto vec = [&](const std::string& name, std::int64_t n, ParamInit init) {
      add_param(p + name, {n}, {n}, false, init, 0.0);
    };
    const auto mat = [&](const std::string& name, std::int64_t out, std::int64_t in, double std) {
      add_param(p + name, {out, in}, {out, in}, true, ParamInit::normal, std);
    };
    vec("ln_1.weight", C, ParamInit::ones);
    vec("ln_1.bias", C, ParamInit::zeros);
    mat("attn.c_attn.weight", 3 * C, C, kInitStd);
    vec("attn.c_attn.bias", 3 * C, ParamInit::zeros);
    mat("attn.c_proj.weight", C, C, residual_std);
    vec("attn.c_proj.bias", C, ParamInit::zeros);
    vec("ln_2.weight", C, ParamInit::ones);
    vec("ln_2.bias", C, ParamInit::zeros);
    mat("mlp.c_fc.weight", 4 * C, C, kInitStd);
    vec("mlp.c_fc.bias", 4 * C, ParamInit::zeros);
    mat("mlp.c_proj.weight", C, 4 * C, residual_std);
    vec("mlp.c_proj.bias", C, ParamInit::zeros);
  }

  add_unit("final_norm");
  add_param("transformer.ln_f.weight", {C}, {C}, false, ParamInit::ones, 0.0);
  add_param("transformer.ln_f.bias", {C}, {C}, false, ParamInit::zeros, 0.0);

  embedding_offsets_ = {offset_in_unit(0, "transformer.wte.weight"), offset_in_unit(0, "transformer.wpe.weight")};
  const auto block = [&](std::string_view suffix) {
    return offset_in_unit(block_unit(0), "transformer.h.0." + std::string(suffix));
  };
  block_offsets_ = {block("ln_1.weight"),        block("ln_1.bias"),       block("attn.c_attn.weight"),
                    block("attn.c_attn.bias"),   block("attn.c_proj.weight"), block("attn.c_proj.bias"),
                    block("ln_2.weight"),        block("ln_2.bias"),       block("mlp.c_fc.weight"),
                    block("mlp.c_fc.bias"),      block("mlp.c_proj.weight"), block("mlp.c_proj.bias")};
  final_norm_offsets_ = {offset_in_unit(final_norm_unit(), "transformer.ln_f.weight"),
                         offset_in_unit(final_norm_unit(), "transformer.ln_f.bias")};
}

// Initialisation as GPT-2's: N(0, 0.02) for every matrix, the two projections into the residual stream (o_proj,
// down_proj) scaled by 1/sqrt(2 L) as torchtitan's depth-scaled init does; norms start at one.
void ModelLayout::add_llama() {
  const std::int64_t C = config_.n_embd;
  const std::int64_t L = config_.n_layer;
  const std::int64_t K = std::int64_t{config_.kv_heads()} * config_.head_size();
  const std::int64_t F = config_.ffn();
  const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(L));

  add_unit("embedding");
  add_param("model.embed_tokens.weight", {config_.padded_vocab_size, C}, {config_.vocab_size, C}, true,
            ParamInit::normal, kInitStd);
  for (std::int64_t i = 0; i < L; ++i) {
    add_unit("block." + std::to_string(i));
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const auto norm = [&](const std::string& name) { add_param(p + name, {C}, {C}, false, ParamInit::ones, 0.0); };
    const auto mat = [&](const std::string& name, std::int64_t out, std::int64_t in, double std) {
      add_param(p + name, {out, in}, {out, in}, true, ParamInit::normal, std);
    };
    norm("input_layernorm.weight");
    mat("self_attn.q_proj.weight", C, C, kInitStd);
    mat("self_attn.k_proj.weight", K, C, kInitStd);
    mat("self_attn.v_proj.weight", K, C, kInitStd);
    mat("self_attn.o_proj.weight", C, C, residual_std);
    norm("post_attention_layernorm.weight");
    mat("mlp.gate_proj.weight", F, C, kInitStd);
    mat("mlp.up_proj.weight", F, C, kInitStd);
    mat("mlp.down_proj.weight", C, F, residual_std);
  }
  add_unit("final_norm");
  add_param("model.norm.weight", {C}, {C}, false, ParamInit::ones, 0.0);
  if (!config_.tie_embeddings) {
    add_param("lm_head.weight", {config_.padded_vocab_size, C}, {config_.vocab_size, C}, true, ParamInit::normal,
              kInitStd);
  }

  embedding_offsets_ = {offset_in_unit(0, "model.embed_tokens.weight"), kNoOffset};
  const auto block = [&](std::string_view suffix) {
    return offset_in_unit(block_unit(0), "model.layers.0." + std::string(suffix));
  };
  llama_block_offsets_ = {block("input_layernorm.weight"),   block("self_attn.q_proj.weight"),
                          block("self_attn.k_proj.weight"),  block("self_attn.v_proj.weight"),
                          block("self_attn.o_proj.weight"),  block("post_attention_layernorm.weight"),
                          block("mlp.gate_proj.weight"),     block("mlp.up_proj.weight"),
                          block("mlp.down_proj.weight")};
  final_norm_offsets_ = {offset_in_unit(final_norm_unit(), "model.norm.weight"), kNoOffset,
                         config_.tie_embeddings ? kNoOffset : offset_in_unit(final_norm_unit(), "lm_head.weight")};
}

void ModelLayout::add_unit(std::string name) {
  UnitInfo u;
  u.name = std::move(name);
  u.first_param = params_.size();
  units_.push_back(std::move(u));
}

void ModelLayout::add_param(std::string name, std::vector<std::int64_t> shape,
                            std::vector<std::int64_t> logical_shape, bool weight_decay, ParamInit init,
                            double init_std) {
  UnitInfo& u = units_.back();
  ParamInfo p;
  p.name = std::move(name);
  p.unit = static_cast<int>(units_.size()) - 1;
  p.offset = u.numel;
  p.numel = product(shape);
  p.shape = std::move(shape);
  p.logical_shape = std::move(logical_shape);
  p.weight_decay = weight_decay;
  p.init = init;
  p.init_std = init_std;
  u.numel += p.numel;
  ++u.param_count;
  params_.push_back(std::move(p));
}

const UnitInfo& ModelLayout::unit(int index) const {
  if (index < 0 || index >= num_units()) {
    throw_internal("unit index " + std::to_string(index) + " out of range [0, " + std::to_string(num_units()) +
                   ")");
  }
  return units_[static_cast<std::size_t>(index)];
}

std::vector<const ParamInfo*> ModelLayout::unit_params(int index) const {
  const UnitInfo& u = unit(index);
  std::vector<const ParamInfo*> out;
  out.reserve(u.param_count);
  for (std::size_t i = 0; i < u.param_count; ++i) out.push_back(&params_[u.first_param + i]);
  return out;
}

const ParamInfo* ModelLayout::find_param(std::string_view name) const {
  for (const ParamInfo& p : params_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const ParamInfo& ModelLayout::param(std::string_view name) const {
  const ParamInfo* p = find_param(name);
  if (p == nullptr) throw_internal("model has no parameter named '" + std::string(name) + "'");
  return *p;
}

std::size_t ModelLayout::offset_in_unit(int unit_index, std::string_view name) const {
  const ParamInfo& p = param(name);
  if (p.unit != unit_index) throw_internal("parameter '" + std::string(name) + "' is not in the expected unit");
  return p.offset;
}

std::size_t ModelLayout::total_numel() const {
  std::size_t n = 0;
  for (const UnitInfo& u : units_) n += u.numel;
  return n;
}

std::size_t ModelLayout::logical_numel() const {
  std::size_t n = 0;
  for (const ParamInfo& p : params_) n += p.logical_numel();
  return n;
}

}  // namespace hsdp::model
