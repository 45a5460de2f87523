#pragma once
// Byte-level text encoding: each byte of the input is one token, so the vocabulary is exactly 256 and
// any file (UTF-8 or not) encodes losslessly.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace hsdp::data {

inline constexpr int kByteVocab = 256;

std::vector<std::uint16_t> encode_bytes(std::string_view text);

// `input` whole: a data Error names the file when it is not a regular file, cannot be read or is empty.
std::string read_text_file(const std::filesystem::path& input);

// Reads `input` whole and encodes it; a data Error names the file when it cannot be read or is empty, or holds more
// bytes than a token file holds tokens (checked before reading).
std::vector<std::uint16_t> encode_text_file(const std::filesystem::path& input);

}  // namespace hsdp::data
