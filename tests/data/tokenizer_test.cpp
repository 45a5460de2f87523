// data::Tokenizer (hsdp/data/tokenizer.hpp): bytes and SentencePiece models trained here on a generated text.
#include "hsdp/data/tokenizer.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "../temp_dir.hpp"
#include "hsdp/core/error.hpp"

namespace hsdp::data {
namespace {

// A text of a few hundred lines from a small word list, the same every time.
std::filesystem::path write_corpus(const testing::TempDir& dir) {
  const std::vector<std::string> words = {"shard", "gather", "reduce", "scatter", "the", "rank", "node", "gradient",
                                          "checkpoint", "resume", "of", "a", "step", "island", "stream"};
  std::ofstream out(dir / "corpus.txt");
  std::uint64_t x = 12345;
  for (int line = 0; line < 600; ++line) {
    for (int w = 0; w < 12; ++w) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      out << (w ? " " : "") << words[(x >> 33) % words.size()];
    }
    out << (line % 7 == 6 ? "\n\n" : "\n");
  }
  return dir / "corpus.txt";
}

std::string config_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitBadInput) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no Error was thrown";
  return {};
}

TEST(Tokenizer, Bytes_AreTheDefault_AndRoundTripAnyBytes) {
  const Tokenizer bytes = Tokenizer::from_key("");
  EXPECT_TRUE(bytes.is_bytes());
  EXPECT_EQ(bytes.vocab_size(), 256);
  EXPECT_EQ(bytes.identity(), "bytes");
  const std::string text = "h\xC3\xA9llo\n\x01";
  const std::vector<std::uint32_t> ids = bytes.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[1], 0xC3u);
  const std::vector<std::int32_t> signed_ids(ids.begin(), ids.end());
  EXPECT_EQ(bytes.decode(signed_ids), text);
}

TEST(Tokenizer, SentencePieceBpeAndUnigram_RoundTripTextTheyNeverSaw_AndTrainTheSameTwice) {
  testing::TempDir dir;
  const auto corpus = write_corpus(dir);
  // Unigram needs candidate pieces beyond the characters: this small text has room for 290.
  for (const auto& [type, vocab] : std::vector<std::pair<std::string, int>>{{"bpe", 400}, {"unigram", 290}}) {
    SentencePieceSpec spec{{corpus}, dir / (type + "_a"), vocab, type, 1};
    train_sentencepiece(spec);
    spec.prefix = dir / (type + "_b");
    train_sentencepiece(spec);
    const auto read = [](const std::filesystem::path& p) {
      std::ifstream in(p);
      return std::string(std::istreambuf_iterator<char>(in), {});
    };
    // The same model wherever it is written (it records no output path).
    EXPECT_EQ(read(dir / (type + "_a.vocab")), read(dir / (type + "_b.vocab"))) << type;
    EXPECT_EQ(read(dir / (type + "_a.model")), read(dir / (type + "_b.model"))) << type;
    const Tokenizer t = Tokenizer::load(dir / (type + "_a.model"));
    EXPECT_FALSE(t.is_bytes());
    EXPECT_EQ(t.vocab_size(), vocab) << type;
    EXPECT_EQ(t.identity().rfind("sentencepiece:", 0), 0u) << t.identity();
    EXPECT_EQ(t.identity(), Tokenizer::load(dir / (type + "_a.model")).identity());
    // Words it learnt become fewer pieces than bytes; characters it never saw (é, an emoji) come back through byte
    // fallback.
    // Not normalised: newlines, a tab, runs of spaces and a full-width letter (NFKC would fold it to "A") come back
    // as they were.
    const std::string seen = "the gradient of the shard", unseen = "caf\xC3\xA9 \xF0\x9F\x99\x82 shard",
                      layout = "the rank\n\n  node\tstep   of a\n\xEF\xBC\xA1\n";
    EXPECT_LT(t.encode(seen).size(), seen.size()) << type;
    for (const std::string& text : {seen, unseen, layout}) {
      const std::vector<std::uint32_t> ids = t.encode(text);
      for (const std::uint32_t id : ids) EXPECT_LT(id, static_cast<std::uint32_t>(vocab));
      EXPECT_EQ(t.decode(std::vector<std::int32_t>(ids.begin(), ids.end())), text) << type;
    }
  }
}

TEST(Tokenizer, BadInput_IsOneErrorNamingWhat) {
  testing::TempDir dir;
  std::ofstream(dir / "not_a_model") << "hello";
  std::string m = config_error_of([&] { Tokenizer::load(dir / "not_a_model"); });
  EXPECT_NE(m.find("is not a SentencePiece model"), std::string::npos) << m;
  m = config_error_of([&] { Tokenizer::load(dir / "absent.model"); });
  EXPECT_NE(m.find("cannot read '"), std::string::npos) << m;
  m = config_error_of([&] { train_sentencepiece({{write_corpus(dir)}, dir / "x", 320, "wordpiece", 1}); });
  EXPECT_NE(m.find("--type must be bpe or unigram"), std::string::npos) << m;
  m = config_error_of([&] { train_sentencepiece({{write_corpus(dir)}, dir / "x", 100, "bpe", 1}); });
  EXPECT_NE(m.find("--vocab-size must be in [260"), std::string::npos) << m;
  m = config_error_of([&] { train_sentencepiece({{write_corpus(dir)}, dir / "x", 400, "bpe", 1ull << 32}); });
  EXPECT_NE(m.find("--seed must be below 2^32"), std::string::npos) << m;
  // A text of lines SentencePiece skips (over 16 KiB each) is said as such, not as its internal check.
  std::ofstream(dir / "one_line.txt") << std::string(20000, 'a') << '\n' << std::string(17000, 'b');
  m = config_error_of([&] { train_sentencepiece({{dir / "one_line.txt"}, dir / "x", 400, "bpe", 1}); });
  EXPECT_NE(m.find("every one of the 2 lines is longer than 16384 bytes"), std::string::npos) << m;
  // A FIFO as the model is refused without opening it (the open would block until a writer came).
  ASSERT_EQ(::mkfifo((dir / "fifo.model").c_str(), 0600), 0);
  m = config_error_of([&] { Tokenizer::load(dir / "fifo.model"); });
  EXPECT_NE(m.find("is a FIFO, not a regular file"), std::string::npos) << m;
}

// Paths with spaces (SentencePiece's command line splits at them); a training that fails leaves the tokenizer at
// its prefix as it was and no temporary file.
TEST(Tokenizer, PathsWithSpaces_AndAFailedTrainingKeepsTheEarlierModel) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir / "my text");
  std::filesystem::rename(write_corpus(dir), dir / "my text" / "a corpus.txt");
  const std::filesystem::path prefix = dir / "my tokenizers" / "a tok";
  train_sentencepiece({{dir / "my text" / "a corpus.txt"}, prefix, 400, "bpe", 1});
  const auto read = [](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string model = read(prefix.string() + ".model"), vocab = read(prefix.string() + ".vocab");
  EXPECT_EQ(Tokenizer::load(prefix.string() + ".model").vocab_size(), 400);
  // More pieces than this text holds: SentencePiece refuses, after its work.
  try {
    train_sentencepiece({{dir / "my text" / "a corpus.txt"}, prefix, 100000, "bpe", 1});
    ADD_FAILURE() << "a vocabulary larger than the text allows was trained";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SentencePiece training failed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read(prefix.string() + ".model"), model);
  EXPECT_EQ(read(prefix.string() + ".vocab"), vocab);
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(prefix.parent_path())) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a tok.model", "a tok.vocab"}));
}

// The tools' choice for a checkpoint: --tokenizer, else the deck's data.tokenizer; the identity must match.
TEST(Tokenizer, OfRun_TakesTheDecksFile_AndRefusesAnotherModel) {
  testing::TempDir dir;
  const auto corpus = write_corpus(dir);
  train_sentencepiece({{corpus}, dir / "a", 320, "bpe", 1});
  train_sentencepiece({{corpus}, dir / "b", 330, "bpe", 1});
  const std::string a = (dir / "a.model").string(), b = (dir / "b.model").string();
  const std::string recorded = Tokenizer::load(a).identity();
  const std::string deck = "[model]\nvocab_size = 320\n[data]\ntrain = x.bin\ntokenizer = " + a + "\n";
  EXPECT_EQ(Tokenizer::of_run("", recorded, deck).identity(), recorded);
  EXPECT_EQ(Tokenizer::of_run(a, recorded, "").identity(), recorded);
  EXPECT_TRUE(Tokenizer::of_run("", "bytes", deck).is_bytes());
  std::string m = config_error_of([&] { Tokenizer::of_run(b, recorded, deck); });
  EXPECT_NE(m.find("but the checkpoint's run trained with " + recorded), std::string::npos) << m;
  m = config_error_of([&] { Tokenizer::of_run("", recorded, "[data]\ntrain = x.bin\n"); });
  EXPECT_NE(m.find("its deck names no file: give --tokenizer MODEL"), std::string::npos) << m;
}

}  // namespace
}  // namespace hsdp::data
