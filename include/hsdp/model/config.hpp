#pragma once
// GptConfig: the shape of a GPT-2 model, as nanoGPT's GPTConfig plus llm.c's padded vocabulary.
#include <cstdint>

namespace hsdp::model {

struct GptConfig {
  int n_layer = 12;
  int n_head = 12;
  int n_embd = 768;
  int block_size = 1024;               // the longest sequence (rows of wpe)
  int vocab_size = 50257;              // real tokens: logits beyond it never enter the loss
  int padded_vocab_size = 50304;       // rows of wte as stored (>= vocab_size, e.g. a multiple of 64)

  // Throws a config Error naming the offending key (model.<key>) if the shape is impossible.
  void validate() const;

  int head_size() const { return n_embd / n_head; }

  // GPT-2 124M with llm.c's padding of 50257 to 50304.
  static GptConfig gpt2_124m() { return {}; }
};

}  // namespace hsdp::model
