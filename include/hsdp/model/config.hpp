#pragma once
// GptConfig: the shape of a GPT-2 model, as nanoGPT's GPTConfig plus llm.c's padded vocabulary.
#include <cstdint>

namespace hsdp::model {

// The largest shapes hsdp accepts (the deck's limits; checked again for a shape read from a file: an llm.c header,
// a Hugging Face config.json, a checkpoint's /meta).
inline constexpr int kMaxLayers = 1024, kMaxHeads = 1024, kMaxEmbd = 65536, kMaxBlockSize = 1 << 20,
                     kMaxVocab = 1 << 24;

struct GptConfig {
  int n_layer = 12;
  int n_head = 12;
  int n_embd = 768;
  int block_size = 1024;               // the longest sequence (rows of wpe)
  int vocab_size = 50257;              // real tokens: logits beyond it never enter the loss
  int padded_vocab_size = 50304;       // rows of wte as stored (>= vocab_size, e.g. a multiple of 64)

  // Throws a config Error naming the offending key (model.<key>) if the shape is impossible or beyond the limits.
  void validate() const;

  int head_size() const { return n_embd / n_head; }

  // GPT-2 124M with llm.c's padding of 50257 to 50304.
  static GptConfig gpt2_124m() { return {}; }
};

// Dimensions the activation formula needs. F is the MLP's hidden width (GPT-2: 4 C).
struct ActivationShape {
  std::int64_t n_layer = 0, n_embd = 0, n_head = 0, ffn = 0, padded_vocab = 0;
};
// The shape of a GPT-2 config (F = 4 C).
ActivationShape activation_shape(const GptConfig& config);

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

}  // namespace hsdp::model
