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
}

ActivationShape activation_shape(const GptConfig& config) {
  return {config.n_layer, config.n_embd, config.n_head, 4 * std::int64_t{config.n_embd}, config.padded_vocab_size};
}

std::int64_t activation_bytes_per_token(const ActivationShape& a, std::int64_t seq_len, bool checkpointing) {
  const std::int64_t sets = checkpointing ? 1 : a.n_layer;
  const std::int64_t c = a.n_embd, f = a.ffn, h = a.n_head;
  const std::int64_t floats =
      (a.n_layer + 1) * c + sets * (7 * c + 2 * f + 4 + h * seq_len) + 8 * c + 2 * f + 3 + a.padded_vocab + h;
  return 4 * floats + 8;
}

std::int64_t activation_bytes(const ActivationShape& shape, std::int64_t micro_batch, std::int64_t seq_len,
                              bool checkpointing) {
  return micro_batch * seq_len * activation_bytes_per_token(shape, seq_len, checkpointing);
}

}  // namespace hsdp::model
