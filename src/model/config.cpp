#include "hsdp/model/config.hpp"

#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp::model {
namespace {

void require_positive(const char* key, int value, int most) {
  if (value <= 0) throw_config(std::string(key) + " (" + std::to_string(value) + ") must be positive");
  if (value > most) throw_config(std::string(key) + " (" + std::to_string(value) + ") exceeds " + std::to_string(most));
}

}  // namespace

const char* arch_name(Arch arch) { return arch == Arch::llama ? "llama" : "gpt2"; }

Arch parse_arch(std::string_view name) {
  if (name == "gpt2") return Arch::gpt2;
  if (name == "llama") return Arch::llama;
  throw_config("model.arch '" + std::string(name) + "' is not one of: gpt2, llama");
}

int default_ffn_dim(int n_embd) {
  const std::int64_t hidden = 2 * (4 * std::int64_t{n_embd}) / 3;
  return static_cast<int>((hidden + 255) / 256 * 256);
}

int GptConfig::kv_heads() const { return llama() && n_kv_head > 0 ? n_kv_head : n_head; }

int GptConfig::ffn() const {
  if (!llama()) return 4 * n_embd;
  return ffn_dim > 0 ? ffn_dim : default_ffn_dim(n_embd);
}

void GptConfig::validate() const {
  require_positive("model.n_layer", n_layer, kMaxLayers);
  require_positive("model.n_head", n_head, kMaxHeads);
  require_positive("model.n_embd", n_embd, kMaxEmbd);
  require_positive("model.block_size", block_size, kMaxBlockSize);
  require_positive("model.vocab_size", vocab_size, kMaxVocab);
  require_positive("model.padded_vocab_size", padded_vocab_size, kMaxVocab);
  if (n_embd % n_head != 0) {
    throw_config("model.n_embd (" + std::to_string(n_embd) + ") must be divisible by model.n_head (" +
                 std::to_string(n_head) + ")");
  }
  if (padded_vocab_size < vocab_size) {
    throw_config("model.padded_vocab_size (" + std::to_string(padded_vocab_size) +
                 ") must be >= model.vocab_size (" + std::to_string(vocab_size) + ")");
  }
  if (!llama()) {
    if (n_kv_head != 0 || ffn_dim != 0 || tie_embeddings || rope_theta != GptConfig{}.rope_theta ||
        norm_eps != GptConfig{}.norm_eps) {
      throw_config("model.n_kv_head, model.ffn_dim, model.rope_theta, model.norm_eps and model.tie_embeddings "
                   "apply to model.arch=llama only (GPT-2 has none of them)");
    }
    return;
  }
  if (n_kv_head < 0 || n_kv_head > n_head || n_head % kv_heads() != 0) {
    throw_config("model.n_kv_head (" + std::to_string(n_kv_head) + ") must divide model.n_head (" +
                 std::to_string(n_head) + "); 0 = n_head");
  }
  if (head_size() % 2 != 0) {
    throw_config("model.n_embd / model.n_head (" + std::to_string(head_size()) +
                 ") must be even: RoPE turns channel pairs");
  }
  if (ffn_dim < 0 || ffn_dim > 16 * kMaxEmbd) {
    throw_config("model.ffn_dim (" + std::to_string(ffn_dim) + ") must be 0 (the default) or in [1, " +
                 std::to_string(16 * kMaxEmbd) + "]");
  }
  if (!(rope_theta > 1.0) || !(rope_theta < 1e12)) {
    throw_config("model.rope_theta (" + std::to_string(rope_theta) + ") must be in (1, 1e12)");
  }
  if (!(norm_eps > 0.0) || !(norm_eps < 1.0)) {
    throw_config("model.norm_eps (" + std::to_string(norm_eps) + ") must be in (0, 1)");
  }
}

ActivationShape activation_shape(const GptConfig& config) {
  return {config.arch,
          config.n_layer,
          config.n_embd,
          config.n_head,
          config.ffn(),
          config.padded_vocab_size,
          std::int64_t{config.kv_heads()} * config.head_size(),
          config.fused_attention,
          config.fused_epilogues};
}

std::int64_t activation_bytes_per_token(const ActivationShape& a, std::int64_t seq_len, bool checkpointing) {
  const std::int64_t sets = checkpointing ? 1 : a.n_layer;
  const std::int64_t c = a.n_embd, f = a.ffn, h = a.n_head, k = a.kv_width;
  if (a.arch == Arch::llama) {
    const std::int64_t floats = (a.n_layer + 1) * c + sets * (5 * c + 2 * k + 3 * f + 2 + h * seq_len) + 6 * c +
                                2 * k + 3 * f + 2 + a.padded_vocab;
    return 4 * floats + 8;
  }
  const std::int64_t floats =
      (a.n_layer + 1) * c + sets * (7 * c + 2 * f + 4 + h * seq_len) + 8 * c + 2 * f + 3 + a.padded_vocab + h;
  return 4 * floats + 8;
}

std::int64_t activation_bytes(const ActivationShape& shape, std::int64_t micro_batch, std::int64_t seq_len,
                              bool checkpointing) {
  return micro_batch * seq_len * activation_bytes_per_token(shape, seq_len, checkpointing);
}

}  // namespace hsdp::model
