#include "hsdp/data/byte_encoder.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "hsdp/core/error.hpp"
#include "hsdp/core/files.hpp"

namespace hsdp::data {

std::vector<std::uint16_t> encode_bytes(std::string_view text) {
  std::vector<std::uint16_t> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::vector<std::uint16_t> encode_text_file(const std::filesystem::path& input) {
  require_regular_input(input.string(), "encode");  // a FIFO would block the read forever
  std::ifstream in(input, std::ios::binary);
  if (!in) throw_data("encode: cannot open '" + input.string() + "': " + std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw_data("encode: cannot read '" + input.string() + "'");
  if (text.empty()) throw_data("encode: '" + input.string() + "' is empty: nothing to encode");
  return encode_bytes(text);
}

}  // namespace hsdp::data
