// Pieces of the checkpoint layer that need no MPI: the checksum, retention, and the model file formats.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "../temp_dir.hpp"
#include "fixtures.hpp"
#include "hsdp/ckpt/checksum.hpp"
#include "hsdp/ckpt/commit.hpp"
#include "hsdp/ckpt/export.hpp"
#include "hsdp/ckpt/hf.hpp"
#include "hsdp/core/error.hpp"
#include "safetensors.hpp"

namespace hsdp::ckpt::testing {
namespace {

namespace fs = std::filesystem;

std::vector<float> sample(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value_at(0, 1, i, 3);
  return v;
}

TEST(Checksum, SumOfRangeChecksums_EqualsTheWholeChecksum) {
  const std::vector<float> v = sample(1000);
  const std::uint64_t whole = checksum_range(v, 0);
  for (const std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{333}, std::size_t{999}}) {
    const std::span<const float> all(v);
    EXPECT_EQ(checksum_range(all.first(cut), 0) + checksum_range(all.subspan(cut), cut), whole) << cut;
  }
}

TEST(Checksum, AnySingleBitFlip_ChangesTheChecksum) {
  std::vector<float> v = sample(64);
  const std::uint64_t original = checksum_range(v, 0);
  for (std::size_t i = 0; i < v.size(); i += 7) {
    for (int bit = 0; bit < 32; ++bit) {
      const float keep = v[i];
      v[i] = std::bit_cast<float>(std::bit_cast<std::uint32_t>(keep) ^ (1u << bit));
      EXPECT_NE(checksum_range(v, 0), original) << "element " << i << " bit " << bit;
      v[i] = keep;
    }
  }
}

TEST(Checksum, SwappedElements_ChangeTheChecksum) {
  std::vector<float> v = sample(16);
  const std::uint64_t original = checksum_range(v, 0);
  std::swap(v[2], v[9]);
  EXPECT_NE(checksum_range(v, 0), original);
}

TEST(Retention, KeepsNewestMilestonesAndLatest) {
  const std::vector<std::int64_t> steps = {1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(steps_to_delete(steps, 7, 2, 3), (std::vector<std::int64_t>{1, 2, 4, 5}));
  EXPECT_EQ(steps_to_delete(steps, 7, 3, 0), (std::vector<std::int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(steps_to_delete(steps, 7, 0, 0), (std::vector<std::int64_t>{}));
  EXPECT_EQ(steps_to_delete(steps, 7, 100, 0), (std::vector<std::int64_t>{}));
  // After a restart from step 3, `latest` names 4 while 5..7 of the abandoned continuation are still on disk: the run's
  // own newest two (3, 4) stay, and the higher steps are neither deleted nor allowed to push them out.
  EXPECT_EQ(steps_to_delete(steps, 4, 2, 0), (std::vector<std::int64_t>{1, 2}));
}

// Another run's checkpoints in the same directory (steps 200, 300) never make retention delete this run's: with
// keep = 2 the run at step 20 keeps 10 and 20.
TEST(Retention, NeverDeletesThisRunsCheckpointsWhileKeepingAnotherRunsHigherOnes) {
  EXPECT_EQ(steps_to_delete({10, 20, 200, 300}, 20, 2, 0), (std::vector<std::int64_t>{}));
  EXPECT_EQ(steps_to_delete({5, 10, 20, 200, 300}, 20, 2, 0), (std::vector<std::int64_t>{5}));
}

TEST(Retention, FileNamesParseToSteps) {
  EXPECT_EQ(step_of_file_name("step_12.h5"), std::optional<std::int64_t>(12));
  EXPECT_EQ(step_of_file_name("step_0.h5"), std::optional<std::int64_t>(0));
  EXPECT_EQ(step_of_file_name("step_12.h5.tmp"), std::nullopt);
  EXPECT_EQ(step_of_file_name("step_.h5"), std::nullopt);
  EXPECT_EQ(step_of_file_name("step_1x.h5"), std::nullopt);
  EXPECT_EQ(step_of_file_name("latest"), std::nullopt);
}

using hsdp::testing::TempDir;

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<Buffer<float>> unit_values(const model::ModelLayout& layout) {
  std::vector<Buffer<float>> units;
  for (int u = 0; u < layout.num_units(); ++u) {
    units.emplace_back(layout.unit(u).numel);
    for (std::size_t i = 0; i < units.back().size(); ++i) units.back()[i] = value_at(0, u, i, 1);
  }
  const model::ParamInfo& wte = layout.param("transformer.wte.weight");
  std::fill(units[0].begin() + static_cast<std::ptrdiff_t>(wte.logical_numel()),
            units[0].begin() + static_cast<std::ptrdiff_t>(wte.numel), 0.0f);
  return units;
}

TEST(Llmc, WriteThenRead_GivesTheSameConfigValuesAndBytes) {
  TempDir tmp;
  const model::ModelLayout layout(tiny_config());
  const std::vector<Buffer<float>> units = unit_values(layout);
  write_llmc(tmp / "a.bin", layout, units);
  const std::string bytes = file_bytes(tmp / "a.bin");
  ASSERT_EQ(bytes.size(), 1024 + 4 * layout.total_numel());
  std::int32_t header[8];
  std::memcpy(header, bytes.data(), sizeof header);
  EXPECT_EQ(header[0], 20240326);
  EXPECT_EQ(header[1], 3);
  EXPECT_EQ(header[2], 8);   // maxT
  EXPECT_EQ(header[3], 50);  // V
  EXPECT_EQ(header[4], 2);   // L
  EXPECT_EQ(header[5], 2);   // NH
  EXPECT_EQ(header[6], 16);  // C
  EXPECT_EQ(header[7], 64);  // Vp
  // llm.c's order: wte, wpe, then ln1w of every layer: the first float after wpe is layer 0's ln_1.weight[0].
  float ln1w0 = 0;
  std::memcpy(&ln1w0, bytes.data() + 1024 + 4 * (64 * 16 + 8 * 16), 4);
  EXPECT_EQ(ln1w0, units[1][layout.block_offsets().ln_1_weight]);

  const LlmcModel back = read_llmc(tmp / "a.bin");
  EXPECT_EQ(back.config.n_layer, 2);
  EXPECT_EQ(back.nonzero_padding, 0u);
  write_llmc(tmp / "b.bin", layout, back.unit_params);
  EXPECT_EQ(file_bytes(tmp / "b.bin"), bytes);
}

TEST(Llmc, BadMagicVersionOrSize_AreCheckpointErrorsNamingTheFile) {
  TempDir tmp;
  const model::ModelLayout layout(tiny_config());
  write_llmc(tmp / "a.bin", layout, unit_values(layout));
  std::string bytes = file_bytes(tmp / "a.bin");
  const auto expect_error = [&](const std::string& content, const std::string& words) {
    std::ofstream(tmp / "bad.bin", std::ios::binary) << content;
    try {
      read_llmc(tmp / "bad.bin");
      ADD_FAILURE() << "no error for " << words;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::checkpoint);
      EXPECT_NE(std::string(e.what()).find(tmp / "bad.bin"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_error(bytes.substr(0, bytes.size() - 4), "bytes but its header describes");
  std::string version5 = bytes;
  version5[4] = 5;
  expect_error(version5, "version 5 holds bf16");
  std::string magic = bytes;
  magic[0] = 0;
  expect_error(magic, "not an llm.c model file");
  expect_error("short", "header");
}

TEST(Safetensors, HeaderIsAlignedJsonWithContiguousOffsets) {
  TempDir tmp;
  const model::ModelLayout layout(tiny_config());
  write_safetensors(tmp / "m.safetensors", layout, unit_values(layout), {true, {{"step", "1"}}});
  const std::string bytes = file_bytes(tmp / "m.safetensors");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_NE(header.find("\"__metadata__\":{\"step\":\"1\"}"), std::string::npos);
  EXPECT_NE(header.find("\"transformer.wte.weight\":{\"dtype\":\"F32\",\"shape\":[50,16],\"data_offsets\":[0,3200]}"),
            std::string::npos);
  EXPECT_NE(header.find("\"lm_head.weight\""), std::string::npos);
  // Every logical parameter plus the lm_head copy.
  EXPECT_EQ(bytes.size(), 8 + n + 4 * (layout.logical_numel() + 50 * 16));
}

// A safetensors file of the given header text (not padded) and `data_bytes` bytes of data.
std::string safetensors_bytes(const std::string& header, std::size_t data_bytes) {
  const std::uint64_t n = header.size();
  std::string bytes(reinterpret_cast<const char*>(&n), 8);
  return bytes + header + std::string(data_bytes, '\x01');
}

// The layout as the format defines it: a header length 1 or 2 bytes short (the spaces that pad it to 8 bytes read
// as data: every tensor shifted), trailing bytes, overlapping or gapped data_offsets, a name twice, a dtype's size.
TEST(Safetensors, LayoutIsCheckedExactly_ShiftedOverlappingOrTrailingDataIsRefused) {
  TempDir tmp;
  const auto refuses = [&](const std::string& bytes, const std::string& words) {
    std::ofstream(tmp / "x.safetensors", std::ios::binary) << bytes;
    try {
      safetensors::File file(tmp / "x.safetensors");
      ADD_FAILURE() << "accepted; expected an error saying '" << words << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::checkpoint);
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  const model::ModelLayout layout(tiny_config());
  write_safetensors(tmp / "m.safetensors", layout, unit_values(layout), {true, {{"step", "1"}}});
  const std::string good = file_bytes(tmp / "m.safetensors");
  std::uint64_t n = 0;
  std::memcpy(&n, good.data(), 8);
  ASSERT_EQ(good.substr(8 + n - 2, 2), "  ") << "the writer pads this header: the shifted cases below need it";
  EXPECT_NO_THROW(safetensors::File(tmp / "m.safetensors"));
  for (const std::uint64_t short_by : {1u, 2u}) {
    std::string shifted = good;
    const std::uint64_t wrong = n - short_by;
    std::memcpy(shifted.data(), &wrong, 8);
    refuses(shifted, "belong to no tensor (a wrong header length");
  }
  refuses(good + std::string(4, '\0'), "belong to no tensor (a wrong header length, or trailing bytes)");

  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  EXPECT_NO_THROW(std::ofstream(tmp / "ok.safetensors", std::ios::binary) << safetensors_bytes("{" + a + "}", 8));
  EXPECT_NO_THROW(safetensors::File(tmp / "ok.safetensors"));
  refuses(safetensors_bytes("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
          "tensor 'b's data_offsets [4, 12) overlap tensor 'a's");
  refuses(safetensors_bytes("{" + a + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})", 16),
          "bytes [8, 12) of the data section belong to no tensor");
  refuses(safetensors_bytes("{" + a + "," + a + "}", 8), "tensor 'a' appears twice");
  refuses(safetensors_bytes(R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,8]}})", 8),
          "holds 8 bytes, its shape [2] of BF16 needs 4");
  refuses(safetensors_bytes(R"({"a":{"dtype":"F13","shape":[2],"data_offsets":[0,8]}})", 8), "not a safetensors dtype");
  refuses(safetensors_bytes(R"( {"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
          "does not start with '{'");
}

// 100,000 nested '[' once overflowed the JSON parser's stack (a segfault of hsdp-ckpt import --format hf).
TEST(ModelFiles, DeeplyNestedJson_IsRefusedBeforeParsing) {
  TempDir tmp;
  const std::string deep(100000, '[');
  fs::create_directories(tmp / "hf");
  std::ofstream(tmp / "hf/config.json") << deep;
  std::ofstream(tmp / "hf/model.safetensors") << "unused";
  try {
    read_hf(tmp / "hf");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::checkpoint);
    EXPECT_NE(std::string(e.what()).find("JSON nested deeper than 64 levels (at byte 64)"), std::string::npos)
        << e.what();
  }
  std::ofstream(tmp / "deep.safetensors", std::ios::binary) << safetensors_bytes("{\"a\":" + deep, 0);
  try {
    safetensors::File file(tmp / "deep.safetensors");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("JSON nested deeper than 64 levels"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hsdp::ckpt::testing
