#include "hsdp/data/byte_encoder.hpp"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <system_error>
#include <string>

#include "hsdp/core/error.hpp"
#include "hsdp/core/files.hpp"

namespace hsdp::data {

std::vector<std::uint16_t> encode_bytes(std::string_view text) {
  std::vector<std::uint16_t> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string read_text_file(const std::filesystem::path& input) {
  require_regular_input(input.string(), "encode");  // a FIFO would block the read forever
  std::ifstream in(input, std::ios::binary);
  if (!in) throw_data("encode: cannot open '" + input.string() + "': " + std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw_data("encode: cannot read '" + input.string() + "'");
  if (text.empty()) throw_data("encode: '" + input.string() + "' is empty: nothing to encode");
  return text;
}

std::vector<std::uint16_t> encode_text_file(const std::filesystem::path& input) {
  require_regular_input(input.string(), "encode");
  // One byte is one token, and a token file counts its tokens in llm.c's int32 header: a larger text is refused
  // before it is read (a 3 GiB text was read whole, with its tokens 9 GiB of memory, before its write was refused;
  // with less memory that was std::bad_alloc).
  std::error_code ec;
  const std::uintmax_t bytes = std::filesystem::file_size(input, ec);
  constexpr auto kMaxTokens = static_cast<std::uintmax_t>(std::numeric_limits<std::int32_t>::max());
  if (!ec && bytes > kMaxTokens) {
    throw_data("encode: '" + input.string() + "' has " + std::to_string(bytes) + " bytes, more than the " +
               std::to_string(kMaxTokens) + " tokens a token file holds (llm.c's header counts them in 32 bits): "
               "split the text and encode each part");
  }
  return encode_bytes(read_text_file(input));
}

}  // namespace hsdp::data
