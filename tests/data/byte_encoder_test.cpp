#include "hsdp/data/byte_encoder.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <vector>

#include "../temp_dir.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/data/token_file.hpp"

namespace hsdp::data {
namespace {

TEST(ByteEncoder, EachByteIsOneToken_IncludingNonAscii) {
  const std::string text = "Hi\n\xc3\xa9\xff";
  EXPECT_EQ(encode_bytes(text), (std::vector<std::uint16_t>{'H', 'i', '\n', 0xc3, 0xa9, 0xff}));
}

TEST(ByteEncoder, TextFileEncodesAndRoundTripsThroughTokenFile) {
  testing::TempDir dir;
  std::ofstream(dir / "in.txt", std::ios::binary) << "hello, world";
  const auto tokens = encode_text_file(dir / "in.txt");
  write_token_file(dir / "out.bin", tokens);
  const TokenFile file(dir / "out.bin");
  EXPECT_NO_THROW(file.validate_vocab(kByteVocab));
  std::string decoded;
  for (const auto token : file.read(0, file.size())) decoded += static_cast<char>(token);
  EXPECT_EQ(decoded, "hello, world");
}

TEST(ByteEncoder, MissingOrEmptyInput_IsDataErrorNamingFile) {
  testing::TempDir dir;
  std::ofstream(dir / "empty.txt");
  for (const char* name : {"absent.txt", "empty.txt"}) {
    try {
      encode_text_file(dir / name);
      ADD_FAILURE() << name << " did not throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::data);
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace hsdp::data
