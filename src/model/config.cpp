#include "hsdp/model/config.hpp"

#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp::model {
namespace {

void require_positive(const char* key, int value) {
  if (value <= 0) throw_config(std::string(key) + " (" + std::to_string(value) + ") must be positive");
}

}  // namespace

void GptConfig::validate() const {
  require_positive("model.n_layer", n_layer);
  require_positive("model.n_head", n_head);
  require_positive("model.n_embd", n_embd);
  require_positive("model.block_size", block_size);
  require_positive("model.vocab_size", vocab_size);
  require_positive("model.padded_vocab_size", padded_vocab_size);
  if (n_embd % n_head != 0) {
    throw_config("model.n_embd (" + std::to_string(n_embd) + ") must be divisible by model.n_head (" +
                 std::to_string(n_head) + ")");
  }
  if (padded_vocab_size < vocab_size) {
    throw_config("model.padded_vocab_size (" + std::to_string(padded_vocab_size) +
                 ") must be >= model.vocab_size (" + std::to_string(vocab_size) + ")");
  }
}

}  // namespace hsdp::model
