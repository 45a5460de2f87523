#pragma once
// What hsdp-bench-train-cpu and hsdp-bench-train-gpu share: the FLOPs a training step of a GPT does, the
// model-shape options of their command lines, and the fields that say the shape in their JSON lines.
#include <boost/program_options.hpp>
#include <cstdint>

#include "hsdp/core/json.hpp"
#include "hsdp/model/config.hpp"
#include "hsdp/model/flops.hpp"

namespace hsdp::bench {

// FLOPs per step = tokens * (6 * P_matmul + 6 * L * T * C), where
//   P_matmul = L * 12 * C^2 (c_attn, attn.c_proj, c_fc, mlp.c_proj weights) + V * C (the tied LM head over the
//              real vocabulary); excluded: wpe (a lookup), biases and LayerNorm (elementwise), the padded rows of
//              wte (never multiplied);
//   6 * L * T * C = causal attention, QK^T and AV at 2 * T * C FLOPs per token each over the full T x T, halved
//              for causality, times 3 for forward + backward (PaLM's 12 * L * T * C, halved).
inline double step_flops(const model::GptConfig& c, std::int64_t tokens, int seq_len) {
  return model::train_flops(c, tokens, seq_len);
}

// --n_layer, --n_head, --n_embd, --block_size, --vocab_size, --padded_vocab_size into `model` (defaults: its values).
inline void add_model_options(boost::program_options::options_description& desc, model::GptConfig& model) {
  namespace po = boost::program_options;
  // clang-format off
  desc.add_options()
      ("n_layer", po::value(&model.n_layer)->default_value(model.n_layer), "transformer blocks")
      ("n_head", po::value(&model.n_head)->default_value(model.n_head), "attention heads")
      ("n_embd", po::value(&model.n_embd)->default_value(model.n_embd), "embedding width C")
      ("block_size", po::value(&model.block_size)->default_value(model.block_size), "rows of wpe")
      ("vocab_size", po::value(&model.vocab_size)->default_value(model.vocab_size), "real vocabulary V")
      ("padded_vocab_size", po::value(&model.padded_vocab_size)->default_value(model.padded_vocab_size),
       "stored rows of wte Vp");
  // clang-format on
}

// n_layer, n_embd, n_head, vocab_size, padded_vocab_size, params (as stored), batch, seq_len.
inline JsonLine& add_model_fields(JsonLine& json, const model::GptConfig& model, std::uint64_t params, int batch,
                                  int seq_len) {
  return json.add("n_layer", model.n_layer)
      .add("n_embd", model.n_embd)
      .add("n_head", model.n_head)
      .add("vocab_size", model.vocab_size)
      .add("padded_vocab_size", model.padded_vocab_size)
      .add("params", params)
      .add("batch", batch)
      .add("seq_len", seq_len);
}

}  // namespace hsdp::bench
