#pragma once
// The prompt and the output of hsdp-sample as tokens: text through hsdp-data encode's byte encoder (each byte one
// token, data/byte_encoder.hpp) or token ids written as "1,2,3".
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hsdp::sample_tool {

// "12,7,0" (spaces allowed after commas) -> ids; a config Error naming --prompt-ids on anything else.
std::vector<std::int32_t> parse_token_ids(std::string_view text);
// Each byte of `text` is one token, exactly as `hsdp-data encode` writes a text file.
std::vector<std::int32_t> encode_text(std::string_view text);
// A data Error naming `what`, the position and the id of the first token outside [0, vocab_size).
void check_vocabulary(const std::vector<std::int32_t>& tokens, int vocab_size, const std::string& what);
// The bytes of byte tokens (every id < 256).
std::string decode_bytes(const std::vector<std::int32_t>& tokens);
// "12,7,0"
std::string join_ids(const std::vector<std::int32_t>& tokens);

}  // namespace hsdp::sample_tool
