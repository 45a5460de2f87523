#include "hsdp/data/token_file.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "../temp_dir.hpp"
#include "hsdp/core/error.hpp"

namespace hsdp::data {
namespace {

using testing::TempDir;

void write_raw(const std::filesystem::path& path, std::array<std::int32_t, 256> header, std::size_t token_bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), sizeof header);
  const std::vector<char> body(token_bytes, 1);
  out.write(body.data(), static_cast<std::streamsize>(body.size()));
}

std::array<std::int32_t, 256> good_header(std::int32_t tokens) {
  std::array<std::int32_t, 256> header{};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = tokens;
  return header;
}

// Runs `open`, expects a data Error, and returns its message.
template <typename Fn>
std::string data_error_of(Fn&& open) {
  try {
    open();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::data) << e.what();
    EXPECT_EQ(e.exit_code(), kExitBadInput);
    return e.what();
  }
  ADD_FAILURE() << "no Error was thrown";
  return {};
}

TEST(TokenFile, WriteThenRead_RoundTripsTokensAndLeavesNoTemporary) {
  TempDir dir;
  const std::vector<std::uint16_t> tokens = {0, 1, 2, 65535, 300, 7};
  write_token_file(dir / "t.bin", tokens);
  EXPECT_FALSE(std::filesystem::exists(dir / "t.bin.tmp"));
  EXPECT_EQ(std::filesystem::file_size(dir / "t.bin"), kTokenFileHeaderBytes + 2 * tokens.size());
  const TokenFile file(dir / "t.bin", "data.train");
  ASSERT_EQ(file.size(), tokens.size());
  EXPECT_EQ(file.read(0, tokens.size()), std::vector<std::uint32_t>(tokens.begin(), tokens.end()));
  EXPECT_EQ(file.version(), 1);
  EXPECT_EQ(file.largest_token(), 65535u);
  const TokenFile moved = TokenFile(dir / "t.bin");
  EXPECT_EQ(moved.read(3, 1)[0], 65535u);
}

// llm.c's version 2: uint32 ids (Llama 3's 128256-token vocabulary), 4 bytes a token.
TEST(TokenFile, VersionTwo_HoldsUint32Ids_AndRoundTrips) {
  TempDir dir;
  const std::vector<std::uint32_t> tokens = {0, 65536, 128255, 7, 4294967295u};
  write_token_file(dir / "w.bin", tokens);
  EXPECT_EQ(std::filesystem::file_size(dir / "w.bin"), kTokenFileHeaderBytes + 4 * tokens.size());
  const TokenFile file(dir / "w.bin", "data.train");
  EXPECT_EQ(file.version(), 2);
  EXPECT_EQ(file.token_bytes(), 4u);
  EXPECT_EQ(file.read(0, tokens.size()), tokens);
  EXPECT_EQ(file.largest_token(), 4294967295u);
  const auto message = data_error_of([&] { file.validate_vocab(128256); });
  EXPECT_NE(message.find("token 4294967295 at position 4 is >= vocab size 128256"), std::string::npos) << message;
}

TEST(TokenFile, MissingFile_IsDataErrorNamingRoleAndPath) {
  TempDir dir;
  const auto message = data_error_of([&] { TokenFile(dir / "absent.bin", "data.train"); });
  EXPECT_NE(message.find("data.train: cannot open '"), std::string::npos) << message;
  EXPECT_NE(message.find("absent.bin"), std::string::npos) << message;
  EXPECT_NE(message.find("No such file"), std::string::npos) << message;
}

TEST(TokenFile, FileShorterThanHeader_IsDataErrorNamingFile) {
  TempDir dir;
  std::ofstream(dir / "short.bin") << "tiny";
  const auto message = data_error_of([&] { TokenFile(dir / "short.bin", "data.val"); });
  EXPECT_NE(message.find("short.bin"), std::string::npos) << message;
  EXPECT_NE(message.find("4 bytes"), std::string::npos) << message;
}

TEST(TokenFile, WrongMagic_IsDataErrorNamingFileAndFoundMagic) {
  TempDir dir;
  auto header = good_header(4);
  header[0] = 12345;
  write_raw(dir / "magic.bin", header, 8);
  const auto message = data_error_of([&] { TokenFile(dir / "magic.bin"); });
  EXPECT_NE(message.find("magic.bin"), std::string::npos) << message;
  EXPECT_NE(message.find("12345"), std::string::npos) << message;
  EXPECT_NE(message.find("20240520"), std::string::npos) << message;
}

TEST(TokenFile, WrongVersion_IsDataErrorNamingFileAndVersion) {
  TempDir dir;
  auto header = good_header(4);
  header[1] = 3;
  write_raw(dir / "v3.bin", header, 8);
  const auto message = data_error_of([&] { TokenFile(dir / "v3.bin"); });
  EXPECT_NE(message.find("v3.bin"), std::string::npos) << message;
  EXPECT_NE(message.find("version 3, expected 1 (uint16 tokens) or 2 (uint32 tokens)"), std::string::npos) << message;
}

TEST(TokenFile, TruncatedFile_IsDataErrorWithExpectedAndActualBytes) {
  TempDir dir;
  write_raw(dir / "cut.bin", good_header(100), 150);
  const auto message = data_error_of([&] { TokenFile(dir / "cut.bin", "data.train"); });
  EXPECT_NE(message.find("cut.bin"), std::string::npos) << message;
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(kTokenFileHeaderBytes + 200)), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(kTokenFileHeaderBytes + 150)), std::string::npos) << message;
}

TEST(TokenFile, TrailingBytes_IsDataErrorNamingFile) {
  TempDir dir;
  write_raw(dir / "long.bin", good_header(2), 7);
  const auto message = data_error_of([&] { TokenFile(dir / "long.bin"); });
  EXPECT_NE(message.find("long.bin"), std::string::npos) << message;
  EXPECT_NE(message.find("3 bytes after"), std::string::npos) << message;
}

TEST(TokenFile, Directory_IsDataErrorNamingPath) {
  TempDir dir;
  const auto message = data_error_of([&] { TokenFile(dir.path(), "data.train"); });
  EXPECT_NE(message.find(dir.path().string()), std::string::npos) << message;
}

TEST(TokenFile, TokenAtOrAboveVocab_IsDataErrorNamingFilePositionAndId) {
  TempDir dir;
  write_token_file(dir / "v.bin", std::vector<std::uint16_t>{1, 2, 63, 64, 5});
  const TokenFile file(dir / "v.bin", "data.train");
  EXPECT_NO_THROW(file.validate_vocab(65));
  const auto message = data_error_of([&] { file.validate_vocab(64); });
  EXPECT_NE(message.find("data.train"), std::string::npos) << message;
  EXPECT_NE(message.find("v.bin"), std::string::npos) << message;
  EXPECT_NE(message.find("token 64 at position 3"), std::string::npos) << message;
  EXPECT_NE(message.find("vocab size 64"), std::string::npos) << message;
}

}  // namespace
}  // namespace hsdp::data
