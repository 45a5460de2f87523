#pragma once
// The models hsdp-plan knows: GPT-2 shapes (exact: hsdp's ModelLayout) and Llama shapes (a synthetic layout of
// units with Llama's parameter counts), and the activation memory hsdp's Gpt<float> allocates for them.
//
// A model is, for planning, its units in hsdp's order: unit 0 the embedding, then L equal blocks, then the final
// unit. GPT-2's LM head is tied to the embedding (the embedding unit is gathered again for the head); a Llama's
// head is its own matrix, planned as part of the final unit (final norm + lm_head: gathered once, kept from the
// head's forward to its backward, like hsdp's final norm).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hsdp/model/config.hpp"

namespace hsdp::plan {

// Dimensions the activation formula needs. F is the MLP's hidden width (GPT-2: 4 C).
struct ActivationShape {
  std::int64_t n_layer = 0, n_embd = 0, n_head = 0, ffn = 0, padded_vocab = 0;
};

struct PlanModel {
  std::string name;                     // "gpt2-124m", "llama-70b", "deck" (the --config deck's [model])
  std::optional<model::GptConfig> gpt;  // set for GPT-2 shapes: plan with ModelLayout and the library formulas
  std::vector<std::size_t> unit_numel;  // embedding, blocks..., final unit
  bool tied_head = true;                // the embedding unit is gathered a second time for the LM head
  ActivationShape activation;

  std::size_t params() const;  // sum of the units (as stored: GPT-2's padded vocabulary rows included)
  int blocks() const { return static_cast<int>(unit_numel.size()) - 2; }
};

// "gpt2-124m", "gpt2-350m", "gpt2-1.5b", "llama-7b", "llama-13b", "llama-70b"; config Error otherwise.
PlanModel named_model(const std::string& name);
const char* kModelChoices();
PlanModel gpt_model(const model::GptConfig& config, std::string name);

// A Llama shape: L blocks of attention (q, o: C x C; k, v: C x kv_width), SwiGLU MLP (3 C F) and two RMSNorms (2 C);
// embedding V C; final unit: norm C + untied lm_head V C.
struct LlamaShape {
  int n_layer, n_embd, n_head, kv_width, ffn, vocab;
};
PlanModel llama_model(const LlamaShape& shape, std::string name);
// The shape of "llama-7b", "llama-13b", "llama-70b"; config Error otherwise.
LlamaShape llama_shape(const std::string& name);

// Bytes of activations and backward scratch Gpt<float> allocates for a micro-batch of B sequences of T tokens
// (Gpt<float>::activation_bytes()). Per token, with s = L sets of block activations (1 with checkpointing):
//   4 [ (L+1) C                      residual stream x_0..x_L
//     + s (7 C + 2 F + 4 + H T)      per block: ln1, qkv (3C), atty, res2, ln2; fch, fch_gelu (F each);
//                                    two LayerNorms' mean and rstd; attention probabilities (H x T per token)
//     + 8 C + 2 F + 3 + Vp + H ]     branch_out, lnf, dresidual, dln, dqkv (3C), datty; dfch, dfch_gelu;
//                                    lnf mean/rstd, losses; logits [Vp]; the attention backward row (H)
//   + 8                              token and target ids (int32)
// Every term is per token (B H T^2 = B T x H T), so the total is B T times this, exactly.
std::int64_t activation_bytes_per_token(const ActivationShape& shape, std::int64_t seq_len, bool checkpointing);
std::int64_t activation_bytes(const ActivationShape& shape, std::int64_t micro_batch, std::int64_t seq_len,
                              bool checkpointing);

}  // namespace hsdp::plan
