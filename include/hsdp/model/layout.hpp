#pragma once
// ModelLayout: the named offset table of a GPT's parameters. Parameters are grouped into units, one flat
// buffer each, so the sharding engine can gather and free them one at a time. GPT-2:
//   unit 0        "embedding"   transformer.wte.weight, transformer.wpe.weight
//   unit 1 + i    "block.<i>"   transformer.h.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}
//   unit L + 1    "final_norm"  transformer.ln_f.{weight, bias}
// Names, order and shapes are nanoGPT's state_dict (Linear weights are [out, in]). The LM head is tied to
// wte and has no entry of its own (nanoGPT's lm_head.weight is the same tensor). A Llama (model.arch=llama), with
// Hugging Face's LlamaForCausalLM names:
//   unit 0        "embedding"   model.embed_tokens.weight
//   unit 1 + i    "block.<i>"   model.layers.<i>.{input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm,
//                               mlp.{gate,up,down}_proj}.weight
//   unit L + 1    "final_norm"  model.norm.weight, lm_head.weight (absent with tie_embeddings: the head reads
//                               embed_tokens, as GPT-2's)
// Parameters are packed back to back inside a unit without padding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hsdp/model/config.hpp"

namespace hsdp::model {

enum class ParamInit { normal, zeros, ones };

struct ParamInfo {
  std::string name;                         // e.g. "transformer.h.0.attn.c_attn.weight"
  int unit = 0;
  std::size_t offset = 0;                   // elements from the start of the unit's flat buffer
  std::size_t numel = 0;                    // elements as stored
  std::vector<std::int64_t> shape;          // as stored: wte is [padded_vocab_size, C]
  std::vector<std::int64_t> logical_shape;  // as exported: wte is [vocab_size, C]; others equal `shape`
  // AdamW weight decay applies to every parameter with two or more dimensions, as in nanoGPT's
  // configure_optimizers: all Linear weights AND the embeddings wte and wpe. Biases and LayerNorm: no.
  bool weight_decay = false;
  ParamInit init = ParamInit::zeros;
  double init_std = 0.0;                    // for ParamInit::normal

  std::size_t logical_numel() const;
};

struct UnitInfo {
  std::string name;
  std::size_t numel = 0;
  std::size_t first_param = 0;  // index into ModelLayout::params()
  std::size_t param_count = 0;
};

// Offsets (in elements, within the unit) of the parameters the kernels read.
inline constexpr std::size_t kNoOffset = static_cast<std::size_t>(-1);  // a parameter this architecture lacks
struct EmbeddingOffsets {
  std::size_t wte, wpe;  // Llama: embed_tokens, and no wpe (kNoOffset)
};
struct BlockOffsets {
  std::size_t ln_1_weight, ln_1_bias, c_attn_weight, c_attn_bias, attn_proj_weight, attn_proj_bias;
  std::size_t ln_2_weight, ln_2_bias, c_fc_weight, c_fc_bias, mlp_proj_weight, mlp_proj_bias;
};
struct LlamaBlockOffsets {
  std::size_t input_norm, q_proj, k_proj, v_proj, o_proj, post_norm, gate_proj, up_proj, down_proj;
};
// GPT-2: weight and bias of ln_f, no head. Llama: model.norm's weight, no bias (kNoOffset), and lm_head.weight
// [padded_vocab_size, C] (kNoOffset when tied).
struct FinalNormOffsets {
  std::size_t weight, bias, head = kNoOffset;
};

class ModelLayout {
 public:
  explicit ModelLayout(const GptConfig& config);  // validates the config

  const GptConfig& config() const { return config_; }
  const std::vector<UnitInfo>& units() const { return units_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  const UnitInfo& unit(int index) const;

  static constexpr int embedding_unit() { return 0; }
  static constexpr int block_unit(int block) { return 1 + block; }
  int final_norm_unit() const { return config_.n_layer + 1; }

  // The parameters of one unit, in storage order.
  std::vector<const ParamInfo*> unit_params(int unit) const;
  // Throws an internal Error if there is no parameter of that name.
  const ParamInfo& param(std::string_view name) const;
  const ParamInfo* find_param(std::string_view name) const;

  std::size_t total_numel() const;    // as stored (wte padded)
  std::size_t logical_numel() const;  // as exported (wte [vocab_size, C])

  const EmbeddingOffsets& embedding_offsets() const { return embedding_offsets_; }
  const BlockOffsets& block_offsets() const { return block_offsets_; }  // the same in every block (GPT-2)
  const LlamaBlockOffsets& llama_block_offsets() const { return llama_block_offsets_; }  // (Llama)
  const FinalNormOffsets& final_norm_offsets() const { return final_norm_offsets_; }

 private:
  void add_unit(std::string name);
  void add_param(std::string name, std::vector<std::int64_t> shape, std::vector<std::int64_t> logical_shape,
                 bool weight_decay, ParamInit init, double init_std);
  std::size_t offset_in_unit(int unit, std::string_view name) const;
  void add_gpt2();
  void add_llama();

  GptConfig config_;
  std::vector<UnitInfo> units_;
  std::vector<ParamInfo> params_;
  EmbeddingOffsets embedding_offsets_{};
  BlockOffsets block_offsets_{};
  LlamaBlockOffsets llama_block_offsets_{};
  FinalNormOffsets final_norm_offsets_{};
};

}  // namespace hsdp::model
