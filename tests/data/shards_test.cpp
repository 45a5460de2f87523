// TokenShards (hsdp/data/shards.hpp): which files a data key names, in which order, and the sampler and evaluation
// over several of them against an independent enumeration of every file's windows.
#include "hsdp/data/shards.hpp"

#include <gtest/gtest.h>

#include <array>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "../temp_dir.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/data/sampler.hpp"

namespace hsdp::data {
namespace {

constexpr int kSeqLen = 8;
using Windows = std::set<std::pair<int, int>>;

std::string data_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::data) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no Error was thrown";
  return {};
}

// File k's token at position p is 1000 k + p: a window's first input names its file and its start.
void write_shard(const std::filesystem::path& path, int k, std::size_t tokens, bool wide) {
  std::vector<std::uint32_t> t(tokens);
  for (std::size_t p = 0; p < tokens; ++p) t[p] = static_cast<std::uint32_t>(1000 * k + static_cast<int>(p));
  if (wide) {
    write_token_file(path, std::span<const std::uint32_t>(t));
  } else {
    const std::vector<std::uint16_t> narrow(t.begin(), t.end());
    write_token_file(path, std::span<const std::uint16_t>(narrow));
  }
}

TEST(TokenShards, AGlobIsSortedByName_AListKeepsItsOrder_AndBadItemsAreNamed) {
  testing::TempDir dir;
  for (const char* name : {"train_002.bin", "train_000.bin", "train_001.bin", "val.bin"}) write_shard(dir / name, 0, 9, false);
  const std::string glob = (dir / "train_*.bin").string();
  const auto paths = TokenShards::expand(glob, "data.train");
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_EQ(paths[0].filename(), "train_000.bin");
  EXPECT_EQ(paths[2].filename(), "train_002.bin");
  const auto listed = TokenShards::expand((dir / "val.bin").string() + ", " + glob, "data.train");
  ASSERT_EQ(listed.size(), 4u);
  EXPECT_EQ(listed[0].filename(), "val.bin");
  EXPECT_EQ(listed[1].filename(), "train_000.bin");

  std::string m = data_error_of([&] { TokenShards::expand((dir / "fineweb_*.bin").string(), "data.train"); });
  EXPECT_NE(m.find("data.train: the glob '"), std::string::npos) << m;
  EXPECT_NE(m.find("fineweb_*.bin' matches no file"), std::string::npos) << m;
  m = data_error_of([&] { TokenShards::expand(glob + ",,", "data.val"); });
  EXPECT_NE(m.find("an empty item in the list"), std::string::npos) << m;
  m = data_error_of([&] { TokenShards::open((dir / "train_000.bin").string() + "," + (dir / "gone.bin").string(), "data.train"); });
  EXPECT_NE(m.find("data.train: cannot open '"), std::string::npos) << m;
  EXPECT_NE(m.find("gone.bin"), std::string::npos) << m;
  // A file whose name holds a glob's characters is that file, not the names its pattern matches.
  write_shard(dir / "run[1].bin", 0, 9, false);
  write_shard(dir / "run1.bin", 0, 9, false);
  const auto literal = TokenShards::expand((dir / "run[1].bin").string(), "data.train");
  ASSERT_EQ(literal.size(), 1u);
  EXPECT_EQ(literal[0].filename(), "run[1].bin");
}

// Three files (uint16, uint32, uint16; the last one's tail shorter than a window): every window of an epoch is read
// once, each inside one file, and the set of windows is exactly the one enumerated file by file; 1 and 4 ranks read
// the same global order, and a sampler restored on 2 ranks continues it.
TEST(TokenShards, TheSamplerReadsEveryFilesWindowsOncePerEpoch_NeverAcrossAFilesEnd) {
  testing::TempDir dir;
  const std::vector<std::size_t> sizes = {5 * kSeqLen + 1, 3 * kSeqLen + 1, 4 * kSeqLen + 5};
  for (int k = 0; k < 3; ++k) {
    write_shard(dir / ("part_" + std::to_string(k) + ".bin"), k, sizes[static_cast<std::size_t>(k)], k == 1);
  }
  const TokenShards data = TokenShards::open((dir / "part_*.bin").string(), "data.train");
  EXPECT_EQ(data.count(), 3u);
  EXPECT_EQ(data.tokens(), sizes[0] + sizes[1] + sizes[2]);
  Windows expected;  // (file, first token) of every window, enumerated file by file
  for (int k = 0; k < 3; ++k) {
    for (std::size_t w = 0; w < (sizes[static_cast<std::size_t>(k)] - 1) / kSeqLen; ++w) {
      expected.emplace(k, static_cast<int>(w) * kSeqLen);
    }
  }
  ASSERT_EQ(expected.size(), 12u);

  const auto read_epoch = [&](int ranks, int batch) {
    std::vector<std::pair<int, int>> order;
    std::vector<Sampler> samplers;
    for (int r = 0; r < ranks; ++r) samplers.emplace_back(data, batch, kSeqLen, r, ranks, 7);
    const std::size_t steps = 12 / static_cast<std::size_t>(ranks * batch);
    for (std::size_t s = 0; s < steps; ++s) {
      for (Sampler& sampler : samplers) {
        std::vector<std::int32_t> in(static_cast<std::size_t>(batch * kSeqLen)), out(in.size());
        sampler.next(in, out);
        for (int b = 0; b < batch; ++b) {
          const std::int32_t* x = &in[static_cast<std::size_t>(b * kSeqLen)];
          const std::int32_t* y = &out[static_cast<std::size_t>(b * kSeqLen)];
          for (int i = 0; i < kSeqLen; ++i) {
            EXPECT_EQ(x[i], x[0] + i);  // consecutive tokens of one file
            EXPECT_EQ(y[i], x[i] + 1);
          }
          order.emplace_back(x[0] / 1000, x[0] % 1000);
        }
      }
    }
    return order;
  };
  // The job's windows of a global batch of 4, fingerprinted the same however ranks and micro-batches split it.
  const auto fingerprint = [&](int ranks, int batch, int calls) {
    std::vector<Sampler> samplers;
    for (int r = 0; r < ranks; ++r) samplers.emplace_back(data, batch, kSeqLen, r, ranks, 7);
    std::vector<std::int32_t> in(static_cast<std::size_t>(batch * kSeqLen)), out(in.size());
    for (int c = 0; c < calls; ++c) {
      for (Sampler& s : samplers) s.next(in, out);
    }
    const std::uint64_t f = samplers.front().take_fingerprint();
    for (std::size_t r = 1; r < samplers.size(); ++r) EXPECT_EQ(samplers[r].take_fingerprint(), f);  // every rank's
    return f;
  };
  EXPECT_EQ(fingerprint(1, 2, 2), fingerprint(1, 4, 1));
  EXPECT_EQ(fingerprint(2, 2, 1), fingerprint(1, 4, 1));
  EXPECT_EQ(fingerprint(4, 1, 1), fingerprint(1, 4, 1));
  EXPECT_NE(fingerprint(1, 4, 2), fingerprint(1, 4, 1));

  const auto one = read_epoch(1, 4);
  EXPECT_EQ(Windows(one.begin(), one.end()), expected);
  EXPECT_EQ(one.size(), expected.size());
  EXPECT_EQ(read_epoch(4, 1), one);  // the same global order on 4 ranks

  // Rank 1 of 2 stopped after two steps and restored continues as the uninterrupted one does.
  Sampler straight(data, 2, kSeqLen, 1, 2, 7);
  std::vector<std::int32_t> in(2 * kSeqLen), out(in.size());
  straight.next(in, out);
  straight.next(in, out);
  Sampler resumed(data, 2, kSeqLen, 1, 2, 11);
  resumed = Sampler(data, 2, kSeqLen, 1, 2, 7);
  resumed.restore(straight.state());
  EXPECT_EQ(resumed.peek_windows(), straight.peek_windows());
  std::vector<std::int32_t> in2(in.size()), out2(in.size());
  straight.next(in, out);
  resumed.next(in2, out2);
  EXPECT_EQ(in, in2);
  EXPECT_EQ(out, out2);
}

TEST(TokenShards, EvaluationReadsTheFirstWindowsInTheFilesOrder) {
  testing::TempDir dir;
  write_shard(dir / "a.bin", 1, 2 * kSeqLen + 1, false);
  write_shard(dir / "b.bin", 2, 2 * kSeqLen + 1, true);
  const TokenShards data = TokenShards::open((dir / "a.bin").string() + "," + (dir / "b.bin").string(), "data.val");
  EvalLoader eval(data, 4, kSeqLen, 0, 1, 3 * kSeqLen);
  std::vector<std::int32_t> in(4 * kSeqLen), out(in.size());
  EXPECT_EQ(eval.next(in, out), 3u);
  EXPECT_EQ(in[0], 1000);
  EXPECT_EQ(in[kSeqLen], 1000 + kSeqLen);
  EXPECT_EQ(in[2 * kSeqLen], 2000);  // the third window is b's first
  const std::string m = data_error_of([&] { EvalLoader(data, 1, kSeqLen, 0, 1, 5 * kSeqLen); });
  EXPECT_NE(m.find("2 files '"), std::string::npos) << m;
}

// Beyond 2^31 tokens: two sparse files of 2^31 - 1 uint16 tokens each (4 GiB apiece by their size, a few KB on
// disk), 4294967294 tokens in all, more than an int32 counts. The second file's last window (4294964224 bytes into
// it) holds tokens written there, which come back exactly; the windows of both are counted.
TEST(TokenShards, MoreThan2To31Tokens_InSparseFiles_AreAddressedExactly) {
  testing::TempDir dir;
  constexpr std::int32_t kMax = 2147483647;
  constexpr std::size_t kSeq = 1024;
  const std::uint64_t windows = (static_cast<std::uint64_t>(kMax) - 1) / kSeq;  // per file
  const std::uint64_t last_start = (windows - 1) * kSeq;                         // tokens into the second file
  for (const char* name : {"big_0.bin", "big_1.bin"}) {
    std::array<std::int32_t, 256> header{};
    header[0] = kTokenFileMagic;
    header[1] = kTokenFileVersion;
    header[2] = kMax;
    {
      std::ofstream out(dir / name, std::ios::binary);
      out.write(reinterpret_cast<const char*>(header.data()), sizeof header);
    }
    std::filesystem::resize_file(dir / name, kTokenFileHeaderBytes + 2 * static_cast<std::uintmax_t>(kMax));
  }
  {
    std::fstream f(dir / "big_1.bin", std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(kTokenFileHeaderBytes + 2 * last_start));
    for (std::uint16_t t = 0; t <= kSeq; ++t) {
      const std::uint16_t v = static_cast<std::uint16_t>(1000 + t);
      f.write(reinterpret_cast<const char*>(&v), sizeof v);
    }
  }
  const TokenShards data = TokenShards::open((dir / "big_*.bin").string(), "data.train");
  EXPECT_EQ(data.tokens(), 2 * static_cast<std::uint64_t>(kMax));
  const std::vector<std::uint64_t> starts = data.window_starts(kSeq);
  ASSERT_EQ(starts.size(), 3u);
  EXPECT_EQ(starts[2], 2 * windows);
  std::vector<std::uint32_t> out(kSeq + 1);
  data.copy_window(starts, starts[1] + windows - 1, kSeq, out.data());
  for (std::size_t i = 0; i <= kSeq; ++i) ASSERT_EQ(out[i], 1000 + i) << i;
  data.copy_window(starts, windows - 1, kSeq, out.data());  // the first file's last window: never written, zeros
  EXPECT_EQ(out[kSeq], 0u);
  const Sampler sampler(data, 2, static_cast<int>(kSeq), 0, 1, 5);
  EXPECT_EQ(sampler.window_count(), 2 * windows);
}

}  // namespace
}  // namespace hsdp::data
