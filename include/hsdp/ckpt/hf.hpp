#pragma once
// A Hugging Face transformers directory, from (and to) hsdp's unit buffers. A Llama (model.arch=llama):
//   DIR/config.json        LlamaConfig: model_type llama, architectures [LlamaForCausalLM], hidden_size,
//                          intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
//                          max_position_embeddings = block_size, rms_norm_eps, rope_theta, rope_scaling null,
//                          tie_word_embeddings, hidden_act silu, no biases, vocab_size (not padded)
//   DIR/model.safetensors  LlamaForCausalLM's names (hsdp's own: model.embed_tokens.weight, model.layers.<i>.self_attn.
//                          q_proj.weight, ..., lm_head.weight unless tied), nn.Linear [out, in] as hsdp's; q_proj and
//                          k_proj need no permutation: hsdp's RoPE is transformers' rotate_half layout already (the
//                          permutation transformers' convert_llama_weights_to_hf applies to Meta's interleaved
//                          checkpoints produces that layout)
// so that LlamaForCausalLM.from_pretrained(DIR) loads it. A GPT-2:
//   DIR/config.json        GPT2Config: model_type gpt2, architectures [GPT2LMHeadModel], vocab_size (not padded),
//                          n_positions = n_ctx = block_size, n_embd, n_layer, n_head, activation_function gelu_new
//                          (hsdp's tanh GELU), layer_norm_epsilon 1e-5, tie_word_embeddings true, dropouts 0
//                          (hsdp trains without dropout)
//   DIR/model.safetensors  GPT2LMHeadModel's state_dict names (transformer.wte.weight, transformer.h.<i>.attn.c_attn.
//                          weight, ...), F32, metadata {"format": "pt", "hsdp_padded_vocab_size": "<Vp>"}
// so that GPT2LMHeadModel.from_pretrained(DIR) loads it. Differences from the nanoGPT export: GPT-2's Conv1D layers
// (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) store their weight as [in, out], the transpose of hsdp's Linear
// [out, in]; wte is [vocab_size, C] (padded rows cut); lm_head.weight is not written (tied to wte, which
// transformers re-ties on load). The files depend on the weights and the shape only, so exporting the same weights
// again gives the same bytes.
#include <string>
#include <vector>

#include "hsdp/core/buffer.hpp"
#include "hsdp/model/layout.hpp"

namespace hsdp::ckpt {

inline constexpr const char* kHfConfigFile = "config.json";
inline constexpr const char* kHfWeightsFile = "model.safetensors";

// config.json for `config` (keys sorted, as transformers writes them).
std::string hf_config_json(const model::GptConfig& config);

// Creates `dir` if missing and writes both files (each through .tmp and a rename); a checkpoint Error names the file.
void write_hf(const std::string& dir, const model::ModelLayout& layout, const std::vector<Buffer<float>>& unit_params);

// The tokenizer files of a SentencePiece model beside them, for AutoTokenizer.from_pretrained(dir):
// tokenizer.model (the model file's bytes) and tokenizer_config.json (LlamaTokenizer, transformers' wrapper of a
// SentencePiece model; no BOS or EOS added, as hsdp's token files have none).
inline constexpr const char* kHfTokenizerFile = "tokenizer.model";
inline constexpr const char* kHfTokenizerConfigFile = "tokenizer_config.json";
std::string hf_tokenizer_config_json(int model_max_length);
void write_hf_tokenizer(const std::string& dir, const std::string& model_bytes, int model_max_length);

struct HfModel {
  model::GptConfig config;
  std::vector<Buffer<float>> unit_params;  // one per unit of ModelLayout(config); padded wte rows zero
};
// Reads a Llama directory (model_type llama: the keys above; transformers' defaults for absent rms_norm_eps 1e-6,
// rope_theta 1e4, untied head) or a GPT-2 directory written by write_hf or by transformers' save_pretrained (names
// with or without the
// "transformer." prefix; the attention-mask buffers attn.bias / attn.masked_bias of older files are skipped;
// lm_head.weight, if present, must equal wte). padded_vocab_size: 0 takes the file's hsdp_padded_vocab_size, else
// vocab_size rounded up to a multiple of 128 (hsdp-train's default). A checkpoint Error names the file and the key
// or tensor when the directory is not a GPT-2 hsdp can run (another activation, epsilon, n_inner, untied head,
// a missing, extra or misshapen tensor, a dtype other than F32).
HfModel read_hf(const std::string& dir, int padded_vocab_size = 0);

}  // namespace hsdp::ckpt
