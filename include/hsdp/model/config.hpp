#pragma once
// GptConfig: the shape of a GPT-style model: GPT-2 (nanoGPT's GPTConfig plus llm.c's padded vocabulary) or the
// Llama family (Hugging Face's LlamaConfig: RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases).
#include <cstdint>
#include <string>
#include <string_view>

namespace hsdp::model {

// The largest shapes hsdp accepts (the deck's limits; checked again for a shape read from a file: an llm.c header,
// a Hugging Face config.json, a checkpoint's /meta).
inline constexpr int kMaxLayers = 1024, kMaxHeads = 1024, kMaxEmbd = 65536, kMaxBlockSize = 1 << 20,
                     kMaxVocab = 1 << 24;

enum class Arch { gpt2, llama };
const char* arch_name(Arch arch);
// "gpt2" or "llama"; a config Error naming model.arch otherwise.
Arch parse_arch(std::string_view name);

// Llama's MLP width when model.ffn_dim is 0: Meta's rule, 2/3 of 4 C rounded up to a multiple of 256
// (C = 4096 gives 11008, Llama 2 7B's).
int default_ffn_dim(int n_embd);

struct GptConfig {
  int n_layer = 12;
  int n_head = 12;
  int n_embd = 768;
  int block_size = 1024;               // the longest sequence (rows of wpe)
  int vocab_size = 50257;              // real tokens: logits beyond it never enter the loss
  int padded_vocab_size = 50304;       // rows of wte as stored (>= vocab_size, e.g. a multiple of 64)
  Arch arch = Arch::gpt2;
  // Llama only (validate() requires their defaults for GPT-2):
  int n_kv_head = 0;            // key/value heads (grouped-query attention); must divide n_head. 0 = n_head
  int ffn_dim = 0;              // SwiGLU hidden width; 0 = default_ffn_dim(n_embd)
  double rope_theta = 10000.0;  // RoPE base
  double norm_eps = 1e-5;       // RMSNorm epsilon
  bool tie_embeddings = false;  // the LM head reads embed_tokens (GPT-2: always tied)
  // How the GPU computes attention (model.attention): fused keeps no T x T scores (hsdp/model/cuda/layers.hpp);
  // the CPU always runs its one attention. Not part of the model's shape: checkpoints neither record nor compare it.
  bool fused_attention = false;
  // Whether the GPU runs a matmul's neighbours in cuBLASLt's GEMM epilogue (model.gemm_epilogue=fused): GELU and its
  // gradient, the residual adds. Not part of the model's shape either.
  bool fused_epilogues = false;

  // Throws a config Error naming the offending key (model.<key>) if the shape is impossible or beyond the limits.
  void validate() const;

  int head_size() const { return n_embd / n_head; }
  bool llama() const { return arch == Arch::llama; }
  // Llama's key/value heads and MLP width with the defaults resolved; GPT-2: n_head and 4 C.
  int kv_heads() const;
  int ffn() const;
  // The LM head is the token embedding (GPT-2 always; Llama with tie_embeddings).
  bool tied_head() const { return !llama() || tie_embeddings; }

  // GPT-2 124M with llm.c's padding of 50257 to 50304.
  static GptConfig gpt2_124m() { return {}; }
};

// Dimensions the activation formula needs. F is the MLP's hidden width (GPT-2: 4 C); K the key/value width
// (n_kv_head * head size; Llama only).
struct ActivationShape {
  Arch arch = Arch::gpt2;
  std::int64_t n_layer = 0, n_embd = 0, n_head = 0, ffn = 0, padded_vocab = 0, kv_width = 0;
  bool fused_attention = false;  // the GPU arena's (the CPU formula has one attention)
  bool fused_epilogues = false;  // the GPU arena's: model.gemm_epilogue=fused
};
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
// A Llama (K = n_kv_head * head size, F its MLP width):
//   4 [ (L+1) C                       residual stream
//     + s (5 C + 2 K + 3 F + 2 + H T)   per block: ln1, q, atty, res2, ln2; k, v; gate, up, swiglu;
//                                     two RMSNorms' rstd; attention probabilities
//     + 6 C + 2 K + 3 F + 2 + Vp ]    branch_out, lnf, dresidual, dln, dq, datty; dk, dv; dgate, dup, dswiglu;
//                                     lnf rstd, losses; logits
//   + 8
std::int64_t activation_bytes_per_token(const ActivationShape& shape, std::int64_t seq_len, bool checkpointing);
std::int64_t activation_bytes(const ActivationShape& shape, std::int64_t micro_batch, std::int64_t seq_len,
                              bool checkpointing);

}  // namespace hsdp::model
