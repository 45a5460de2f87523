#include "tokens.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>

#include "hsdp/core/error.hpp"
#include "hsdp/data/byte_encoder.hpp"

namespace hsdp::sample_tool {

std::vector<std::int32_t> parse_token_ids(std::string_view text) {
  std::vector<std::int32_t> ids;
  std::size_t at = 0;
  while (at <= text.size()) {
    while (at < text.size() && text[at] == ' ') ++at;
    const std::size_t end = std::min(text.find(',', at), text.size());
    std::int64_t id = 0;
    const auto [stop, ec] = std::from_chars(text.data() + at, text.data() + end, id);
    std::size_t after = static_cast<std::size_t>(stop - text.data());
    while (after < end && text[after] == ' ') ++after;
    if (ec != std::errc() || after != end || id < 0 || id > INT32_MAX) {
      throw_config("--prompt-ids must be token ids separated by commas (e.g. 12,7,0), got '" + std::string(text) + "'");
    }
    ids.push_back(static_cast<std::int32_t>(id));
    at = end + 1;
  }
  return ids;
}

std::vector<std::int32_t> encode_text(std::string_view text) {
  const std::vector<std::uint16_t> bytes = data::encode_bytes(text);
  return {bytes.begin(), bytes.end()};
}

void check_vocabulary(const std::vector<std::int32_t>& tokens, int vocab_size, const std::string& what) {
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      throw_data(what + ": token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                 " is outside the model's vocabulary [0, " + std::to_string(vocab_size) + ")");
    }
  }
}

std::string decode_bytes(const std::vector<std::int32_t>& tokens) {
  std::string text;
  text.reserve(tokens.size());
  for (const std::int32_t t : tokens) text += static_cast<char>(static_cast<unsigned char>(t));
  return text;
}

std::string join_ids(const std::vector<std::int32_t>& tokens) {
  std::string text;
  for (std::size_t i = 0; i < tokens.size(); ++i) text += (i ? "," : "") + std::to_string(tokens[i]);
  return text;
}

}  // namespace hsdp::sample_tool
