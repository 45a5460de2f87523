#include "hsdp/data/tokenizer.hpp"

#include <fcntl.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <unordered_map>

#include "hsdp/core/error.hpp"
#include "hsdp/core/files.hpp"
#include "hsdp/data/byte_encoder.hpp"

namespace hsdp::data {

namespace {
constexpr std::size_t kMaxSentenceBytes = 16384;  // SentencePiece's max_sentence_length: longer lines are skipped
}  // namespace

Tokenizer Tokenizer::bytes() {
  return {};
}

Tokenizer Tokenizer::load(const std::filesystem::path& model) {
  require_regular_input(model.string(), "data.tokenizer");  // a FIFO would block the read
  std::ifstream in(model, std::ios::binary);
  if (!in) throw_data("data.tokenizer: cannot read '" + model.string() + "' (a SentencePiece .model file)");
  std::ostringstream text;
  text << in.rdbuf();
  Tokenizer t;
  t.model_bytes_ = text.str();
  auto processor = std::make_shared<sentencepiece::SentencePieceProcessor>();
  const auto status = processor->LoadFromSerializedProto(t.model_bytes_);
  if (!status.ok()) {
    throw_data("data.tokenizer: '" + model.string() + "' is not a SentencePiece model: " + status.ToString());
  }
  t.processor_ = std::move(processor);
  return t;
}

Tokenizer Tokenizer::from_key(const std::string& path) {
  return path.empty() ? bytes() : load(path);
}

namespace {

// data.tokenizer in a deck's text ([data] tokenizer = PATH), or empty.
std::string deck_tokenizer(const std::string& deck) {
  const auto trim = [](const std::string& s) {
    const auto a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t\r");
    return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
  };
  std::istringstream in(deck);
  std::string line, section;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t[0] == '[') {
      section = trim(t.substr(1, t.find(']') - 1));
      continue;
    }
    const auto eq = t.find('=');
    if (eq != std::string::npos && section == "data" && trim(t.substr(0, eq)) == "tokenizer") {
      return trim(t.substr(eq + 1));
    }
  }
  return {};
}

}  // namespace

Tokenizer Tokenizer::of_run(const std::string& given, const std::string& recorded, const std::string& deck_text) {
  std::string path = given;
  if (path.empty() && recorded != "bytes") path = deck_tokenizer(deck_text);
  if (path.empty() && recorded != "bytes") {
    throw_config("the checkpoint's run trained with tokenizer " + recorded +
                 " and its deck names no file: give --tokenizer MODEL");
  }
  Tokenizer tokenizer = from_key(path);
  if (tokenizer.identity() != recorded) {
    throw_config("--tokenizer " + (path.empty() ? std::string("(bytes)") : "'" + path + "'") + " is " +
                 tokenizer.identity() + ", but the checkpoint's run trained with " + recorded +
                 (given.empty() ? " (the path in its deck holds another model now?)" : "") +
                 ": give --tokenizer the run's model file");
  }
  return tokenizer;
}

std::vector<std::uint32_t> Tokenizer::encode(std::string_view text) const {
  if (!processor_) {
    const std::vector<std::uint16_t> b = encode_bytes(text);
    return {b.begin(), b.end()};
  }
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  if (!status.ok()) throw_data("SentencePiece cannot encode the text: " + status.ToString());
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids) const {
  if (!processor_) {
    std::string text;
    for (const std::int32_t id : ids) text += static_cast<char>(id & 0xFF);
    return text;
  }
  std::string text;
  const auto status = processor_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!status.ok()) throw_data("SentencePiece cannot decode the ids: " + status.ToString());
  return text;
}

int Tokenizer::vocab_size() const {
  return processor_ ? processor_->GetPieceSize() : kByteVocab;
}

std::string Tokenizer::identity() const {
  if (!processor_) return "bytes";
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fingerprint(model_bytes_)));
  return std::string("sentencepiece:") + hex;
}

void train_sentencepiece(const SentencePieceSpec& spec) {
  if (spec.type != "bpe" && spec.type != "unigram") {
    throw_config("--type must be bpe or unigram, got '" + spec.type + "'");
  }
  if (spec.vocab_size < 260 || spec.vocab_size > (1 << 24)) {
    throw_config("--vocab-size must be in [260, 16777216] (the 256 byte pieces, <unk>, <s>, </s> and more), "
                 "got " + std::to_string(spec.vocab_size));
  }
  if (spec.inputs.empty()) throw_config("--input: give at least one text file");
  std::string inputs;
  std::uint64_t lines = 0, long_lines = 0;
  for (const auto& p : spec.inputs) {
    if (!std::filesystem::is_regular_file(p)) throw_data("--input: '" + p.string() + "' is not a readable file");
    inputs += (inputs.empty() ? "" : ",") + p.string();
    // SentencePiece trains on lines and skips those longer than max_sentence_length bytes: counted here, so that a
    // text of nothing but long lines is said plainly and a few skipped ones are said at all.
    std::ifstream in(p, std::ios::binary);
    std::string line;
    while (std::getline(in, line)) {
      ++lines;
      if (line.size() > kMaxSentenceBytes) ++long_lines;
    }
  }
  if (long_lines == lines) {
    throw_data("--input: every one of the " + std::to_string(lines) + " lines is longer than " +
               std::to_string(kMaxSentenceBytes) +
               " bytes, which SentencePiece skips: break the text into lines (sentences or paragraphs)");
  }
  if (long_lines > 0) {
    std::fprintf(stderr,
                 "hsdp-data: tokenizer train: %llu of %llu lines are longer than %zu bytes; SentencePiece "
                 "trains without them\n",
                 static_cast<unsigned long long>(long_lines), static_cast<unsigned long long>(lines),
                 kMaxSentenceBytes);
  }
  // The output's folder before the training, so that one it cannot make is said at once.
  if (const auto dir = spec.prefix.parent_path(); !dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) throw_data("--out: cannot create the folder '" + dir.string() + "': " + error.message());
  }
  // The options go as a map, not as a command line, which SentencePiece splits at spaces (a path with one failed).
  // It returns the model instead of writing <prefix>.model and .vocab as it goes; they are written below through
  // temporary files, so a failed or killed training leaves an earlier tokenizer at that prefix as it was. (No
  // model_prefix then: the model does not record where it was written.)
  const std::unordered_map<std::string, std::string> options = {
      {"input", inputs},
      {"vocab_size", std::to_string(spec.vocab_size)},
      {"model_type", spec.type},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"num_threads", "1"},
      {"minloglevel", "2"},
      {"input_sentence_size", "2000000"},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes)},
      // The text as it is, so that it decodes back to
      // itself: no NFKC, spaces kept, newlines and tabs
      // as byte pieces (SentencePiece's defaults fold
      // them all into single spaces).
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"}};
  if (spec.seed > std::numeric_limits<unsigned>::max()) {
    throw_config("--seed must be below 2^32 (SentencePiece's generator takes 32 bits), got " +
                 std::to_string(spec.seed));
  }
  sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned>(spec.seed));
  // Quiet while SentencePiece trains: what it may log goes to stderr (its errors come back in the status, and are
  // reported below).
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (saved >= 0 && null >= 0) ::dup2(null, STDERR_FILENO);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(options, nullptr, &model);
  if (saved >= 0 && null >= 0) ::dup2(saved, STDERR_FILENO);
  if (saved >= 0) ::close(saved);
  if (null >= 0) ::close(null);
  if (!status.ok()) throw_data("SentencePiece training failed: " + status.ToString());
  // The .vocab as SentencePiece writes it: a piece and its score a line, in id order.
  sentencepiece::SentencePieceProcessor processor;
  if (const auto loaded = processor.LoadFromSerializedProto(model); !loaded.ok()) {
    throw_data("SentencePiece returned a model it cannot read: " + loaded.ToString());
  }
  std::ostringstream vocab;
  for (int id = 0; id < processor.GetPieceSize(); ++id) {
    vocab << processor.IdToPiece(id) << '\t' << processor.GetScore(id) << '\n';
  }
  // The model first: a failure between the two leaves the new model with the old .vocab listing (which nothing
  // reads), never the old model beside a new listing.
  write_file_atomically(spec.prefix.string() + ".model", model);
  write_file_atomically(spec.prefix.string() + ".vocab", vocab.str());
}

}  // namespace hsdp::data
