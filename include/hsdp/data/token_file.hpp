#pragma once
// Token files in llm.c's .bin format: a header of 256 int32 (magic 20240520, version, token count), then the tokens,
// little-endian: version 1 uint16 (GPT-2's 50257 ids), version 2 uint32 (llm.c's Llama 3 files, larger vocabularies).
// TokenFile maps a file read-only and validates it on opening. A file holds at most 2^31 - 1 tokens (the header's
// int32); data beyond that comes as several files (TokenShards, shards.hpp).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace hsdp::data {

inline constexpr std::int32_t kTokenFileMagic = 20240520;
inline constexpr std::int32_t kTokenFileVersion = 1;        // uint16 tokens
inline constexpr std::int32_t kTokenFileVersionWide = 2;    // uint32 tokens
inline constexpr std::size_t kTokenFileHeaderInts = 256;
inline constexpr std::size_t kTokenFileHeaderBytes = kTokenFileHeaderInts * sizeof(std::int32_t);

class TokenFile {
 public:
  // Opens and validates `path`: readable regular file, full header, magic, version (1 or 2), and a size equal to
  // header + 2 (version 1) or 4 (version 2) bytes per token. `what` names the file's role in messages (e.g. "data.train"); every
  // failure is a data Error naming `what`, the path and what was found.
  explicit TokenFile(const std::filesystem::path& path, std::string what = "data");
  ~TokenFile();
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  // Throws a data Error naming the file, the position and the id of the first token >= vocab_size.
  void validate_vocab(int vocab_size) const;

  // tokens [first, first + count) into `out`. Where the file was cut shorter under the running job (cp over it),
  // a data Error naming it instead of the SIGBUS a read of the mapping gets: training reads through this.
  void copy_tokens(std::size_t first, std::size_t count, std::uint32_t* out) const;
  std::vector<std::uint32_t> read(std::size_t first, std::size_t count) const;
  // The tokens' bytes in the mapping, [first, first + count) (a read past a truncation is a SIGBUS: for checks at
  // opening, and tools).
  std::span<const std::byte> bytes(std::size_t first, std::size_t count) const;
  std::uint32_t largest_token() const;
  std::size_t size() const { return token_count_; }
  int version() const { return token_bytes_ == 2 ? kTokenFileVersion : kTokenFileVersionWide; }
  std::size_t token_bytes() const { return token_bytes_; }
  const std::filesystem::path& path() const { return path_; }
  const std::string& what() const { return what_; }

 private:
  void unmap() noexcept;

  std::filesystem::path path_;
  std::string what_;
  void* mapping_ = nullptr;
  std::size_t mapping_bytes_ = 0;
  const std::byte* tokens_ = nullptr;
  std::size_t token_count_ = 0;
  std::size_t token_bytes_ = 2;
};

// Writes `tokens` to `path` in the format above (uint16: version 1; uint32: version 2): to "<path>.tmp" first, then
// renamed over `path`, so a reader never sees a partial file. Throws a data Error naming the path on any I/O failure.
void write_token_file(const std::filesystem::path& path, std::span<const std::uint16_t> tokens);
void write_token_file(const std::filesystem::path& path, std::span<const std::uint32_t> tokens);

}  // namespace hsdp::data
