#pragma once
// Tokenizer: how text becomes token ids and ids become text again.
//   bytes          the zero-setup default: id = the byte's value, vocabulary 256, any file encodes losslessly;
//   sentencepiece  a SentencePiece model file (BPE or unigram), trained on the user's text by train_sentencepiece
//                  (`hsdp-data tokenizer train`), with byte fallback: any text encodes, unknown characters as bytes.
// identity() names it in checkpoints ("bytes", or "sentencepiece:<FNV-1a 64 of the model file, hex>"), so that a
// resume with another tokenizer is refused.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace hsdp::data {

class Tokenizer {
 public:
  static Tokenizer bytes();
  // A data Error names the file when it cannot be read or is not a SentencePiece model.
  static Tokenizer load(const std::filesystem::path& model);
  // bytes for an empty path, else load(path).
  static Tokenizer from_key(const std::string& path);
  // The tokenizer of a checkpoint's run, for the tools that read one (hsdp-sample, hsdp-ckpt export): `given` (a
  // tool's --tokenizer), else the data.tokenizer of the run's deck text; it must have the identity the checkpoint
  // records (`recorded`), else a config Error says which file to give.
  static Tokenizer of_run(const std::string& given, const std::string& recorded, const std::string& deck_text);

  std::vector<std::uint32_t> encode(std::string_view text) const;
  std::string decode(std::span<const std::int32_t> ids) const;
  int vocab_size() const;
  std::string identity() const;
  bool is_bytes() const { return processor_ == nullptr; }
  // The model file's bytes (empty for bytes): what an export copies as tokenizer.model.
  const std::string& model_bytes() const { return model_bytes_; }

 private:
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> processor_;
  std::string model_bytes_;
};

struct SentencePieceSpec {
  std::vector<std::filesystem::path> inputs;  // text files, one sentence a line (SentencePiece skips lines > 16 KiB)
  std::filesystem::path prefix;               // writes <prefix>.model and <prefix>.vocab
  int vocab_size = 8000;
  std::string type = "bpe";  // bpe | unigram
  std::uint64_t seed = 1;    // SentencePiece's sampling of sentences when an input is larger than it reads (< 2^32)
};

// Trains a model with byte fallback (so vocab_size must leave room for the 256 byte pieces and the text's characters:
// SentencePiece says how many it needs) on one thread, so that the same inputs give the same model; the text is not
// normalised (identity rule, spaces kept: any text decodes back to itself, newlines as byte pieces). A config Error
// for a bad type, size or seed, a data Error (SentencePiece's own message) when training fails, or when every line is
// longer than SentencePiece reads (a count of the skipped ones goes to stderr).
void train_sentencepiece(const SentencePieceSpec& spec);

}  // namespace hsdp::data
