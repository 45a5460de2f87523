#include "commands.hpp"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <span>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../common/subcommands.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/files.hpp"
#include "hsdp/data/byte_encoder.hpp"
#include "hsdp/data/sampler.hpp"
#include "hsdp/data/synth_dataset.hpp"
#include "hsdp/data/token_file.hpp"
#include "hsdp/data/tokenizer.hpp"

namespace po = boost::program_options;

namespace hsdp::data_tool {

namespace {

constexpr unsigned kHelpWidth = 100;

std::size_t positive_count(const po::variables_map& vm, const char* key) {
  const auto value = vm[key].as<long long>();
  if (value <= 0) throw_config(std::string("--") + key + " must be > 0, got " + std::to_string(value));
  return static_cast<std::size_t>(value);
}

}  // namespace

namespace {

// Documents: the text's paragraphs, separated by one or more blank lines, each with the newlines that follow it, so
// that the documents put together are the text (but for newlines before the first) and a paragraph break stays one.
std::vector<std::string_view> documents_of(std::string_view text) {
  std::vector<std::string_view> docs;
  std::size_t begin = 0;
  while (begin < text.size() && text[begin] == '\n') ++begin;
  while (begin < text.size()) {
    std::size_t next = text.find("\n\n", begin);
    if (next == std::string_view::npos) next = text.size();
    while (next < text.size() && text[next] == '\n') ++next;
    docs.push_back(text.substr(begin, next - begin));
    begin = next;
  }
  return docs;
}

template <typename T>
void write_tokens(const std::filesystem::path& path, const std::vector<std::uint32_t>& tokens) {
  if constexpr (std::is_same_v<T, std::uint16_t>) {
    const std::vector<std::uint16_t> narrow(tokens.begin(), tokens.end());
    data::write_token_file(path, std::span<const std::uint16_t>(narrow));
  } else {
    data::write_token_file(path, std::span<const std::uint32_t>(tokens));
  }
}

void write_split(const std::filesystem::path& path, const std::vector<std::uint32_t>& tokens, int vocab) {
  if (vocab <= 65536) {
    write_tokens<std::uint16_t>(path, tokens);
  } else {
    write_tokens<std::uint32_t>(path, tokens);
  }
  std::cout << "wrote " << path.string() << ": " << tokens.size() << " tokens (vocab " << vocab << ", version "
            << (vocab <= 65536 ? 1 : 2) << ")\n";
}

}  // namespace

int run_encode(const std::vector<std::string>& args) {
  po::options_description options("options", kHelpWidth);
  // clang-format off
  options.add_options()
      ("input", po::value<std::string>()->required(), "text file to encode (any bytes; read whole)")
      ("output", po::value<std::string>()->required(),
       "token file to write (written as <output>.tmp, then renamed)")
      ("tokenizer", po::value<std::string>()->default_value(""),
       "a SentencePiece .model (hsdp-data tokenizer train); empty: bytes (each byte one token, vocab 256). Ids up to "
       "65535 are written as uint16 (version 1), larger vocabularies as uint32 (version 2)")
      ("val-output", po::value<std::string>(),
       "optional second token file that receives the validation part")
      ("val-fraction", po::value<double>()->default_value(0.1, "0.1"),
       "fraction of the tokens (tail) or of the documents (documents) for --val-output; in (0, 1)")
      ("val-split", po::value<std::string>()->default_value("tail"),
       "tail = the last tokens; documents = whole documents (paragraphs separated by a blank line) drawn with "
       "--seed, so that no document is in both files")
      ("seed", po::value<std::uint64_t>()->default_value(1), "seed of the documents drawn for --val-split documents");
  // clang-format on
  const auto vm = tool::parse_options(args, options,
                        "usage: hsdp-data encode --input TEXT --output OUT.bin [--tokenizer MODEL] [--val-output VAL.bin]\n\n"
                        "Encodes a text file into token files: bytes by default (vocab 256: train with vocab_size >=\n"
                        "256), or a SentencePiece model's ids (train with vocab_size = its vocabulary).\n");
  if (!vm) return kExitOk;

  const std::filesystem::path input = (*vm)["input"].as<std::string>();
  const std::filesystem::path output = (*vm)["output"].as<std::string>();
  require_regular_output(output.string(), "--output");
  require_not_checkpoint(output.string(), "--output", "hsdp-data");
  const bool val = vm->count("val-output") > 0;
  if (val) {
    require_regular_output((*vm)["val-output"].as<std::string>(), "--val-output");
    require_not_checkpoint((*vm)["val-output"].as<std::string>(), "--val-output", "hsdp-data");
  }
  // The outputs replace files: never the text or tokenizer they are made from, nor each other (the second would
  // replace the first).
  std::vector<NamedPath> paths = {{"--input", input}, {"--output", output, true}};
  if (val) paths.push_back({"--val-output", (*vm)["val-output"].as<std::string>(), true});
  if (const std::string model = (*vm)["tokenizer"].as<std::string>(); !model.empty()) {
    paths.insert(paths.begin() + 1, {"--tokenizer", model});
  }
  require_distinct_files(paths);
  for (const char* key : {"val-fraction", "val-split"}) {
    if (!val && !(*vm)[key].defaulted()) {
      throw_config(std::string("--") + key + " needs --val-output (the file that receives the validation part)");
    }
  }
  const std::string split = (*vm)["val-split"].as<std::string>();
  if (split != "tail" && split != "documents") throw_config("--val-split must be tail or documents, got '" + split + "'");
  if (split != "documents" && !(*vm)["seed"].defaulted()) {
    throw_config("--seed draws the documents of --val-split documents; with --val-split " + split + " it does nothing");
  }
  const double fraction = (*vm)["val-fraction"].as<double>();
  if (val && !(fraction > 0.0 && fraction < 1.0)) {
    throw_config("--val-fraction must be in (0, 1), got " + std::to_string(fraction));
  }
  const data::Tokenizer tokenizer = data::Tokenizer::from_key((*vm)["tokenizer"].as<std::string>());
  // Bytes: the text's size is its token count, checked before it is read.
  const std::string text =
      tokenizer.is_bytes() ? std::string() : data::read_text_file(input);
  const auto encoded = [&] {
    if (!tokenizer.is_bytes()) return tokenizer.encode(text);
    const std::vector<std::uint16_t> b = data::encode_text_file(input);
    return std::vector<std::uint32_t>(b.begin(), b.end());
  };

  std::vector<std::uint32_t> train, held;
  if (!val) {
    train = encoded();
  } else if (split == "tail") {
    train = encoded();
    const auto count = std::max<std::size_t>(1, static_cast<std::size_t>(std::llround(fraction * static_cast<double>(train.size()))));
    if (count >= train.size()) {
      throw_data("'" + input.string() + "' has only " + std::to_string(train.size()) +
                 " tokens: too few to split off a validation part");
    }
    held.assign(train.end() - static_cast<std::ptrdiff_t>(count), train.end());
    train.resize(train.size() - count);
  } else {
    const std::string whole = tokenizer.is_bytes() ? data::read_text_file(input) : text;
    const std::vector<std::string_view> docs = documents_of(whole);
    const auto count = std::max<std::size_t>(1, static_cast<std::size_t>(std::llround(fraction * static_cast<double>(docs.size()))));
    if (docs.size() < 2 || count >= docs.size()) {
      throw_data("'" + input.string() + "' has " + std::to_string(docs.size()) +
                 " document(s) (paragraphs separated by a blank line): too few to hold some out; use --val-split tail");
    }
    // The held-out documents: the first `count` of a seeded permutation; both files keep the text's order.
    std::vector<std::uint32_t> order = data::epoch_permutation(docs.size(), (*vm)["seed"].as<std::uint64_t>(), 0);
    std::vector<bool> is_val(docs.size(), false);
    for (std::size_t i = 0; i < count; ++i) is_val[order[i]] = true;
    for (std::size_t d = 0; d < docs.size(); ++d) {
      const std::vector<std::uint32_t> ids = tokenizer.encode(docs[d]);
      auto& to = is_val[d] ? held : train;
      to.insert(to.end(), ids.begin(), ids.end());
    }
    std::cout << "documents: " << docs.size() << ", " << count << " held out for validation (seed "
              << (*vm)["seed"].as<std::uint64_t>() << ")\n";
  }
  if (val) write_split((*vm)["val-output"].as<std::string>(), held, tokenizer.vocab_size());
  write_split(output, train, tokenizer.vocab_size());
  return kExitOk;
}

int run_tokenizer(const std::vector<std::string>& args) {
  if (args.empty() || args.front() != "train") {
    // `tokenizer --help`: the one subcommand's help, every option explained.
    if (!args.empty() && (args.front() == "--help" || args.front() == "-h")) return run_tokenizer({"train", "--help"});
    throw_config("tokenizer: the only subcommand is `train` (hsdp-data tokenizer train --help)");
  }
  po::options_description options("options", kHelpWidth);
  // clang-format off
  options.add_options()
      ("input", po::value<std::string>()->required(), "text file(s) to learn from, comma-separated")
      ("out", po::value<std::string>()->required(), "writes OUT.model (what --tokenizer and data.tokenizer take) and "
       "OUT.vocab (the pieces, for reading)")
      ("vocab-size", po::value<int>()->default_value(8000), "pieces in the vocabulary, 256 byte pieces included: "
       "train with model.vocab_size equal to it")
      ("type", po::value<std::string>()->default_value("bpe"), "bpe or unigram")
      ("seed", po::value<std::uint64_t>()->default_value(1), "SentencePiece's seed (sentence sampling of big inputs)");
  // clang-format on
  const auto vm = tool::parse_options(std::vector<std::string>(args.begin() + 1, args.end()), options,
                        "usage: hsdp-data tokenizer train --input TEXT[,TEXT...] --out PREFIX [--vocab-size N] [--type bpe|unigram]\n\n"
                        "Trains a SentencePiece tokenizer (BPE or unigram, byte fallback: any text encodes) on one\n"
                        "thread, so the same text gives the same model.\n");
  if (!vm) return kExitOk;
  data::SentencePieceSpec spec;
  std::string inputs = (*vm)["input"].as<std::string>();
  for (std::size_t begin = 0; begin <= inputs.size();) {
    const std::size_t comma = std::min(inputs.find(',', begin), inputs.size());
    if (comma > begin) spec.inputs.emplace_back(inputs.substr(begin, comma - begin));
    begin = comma + 1;
  }
  spec.prefix = (*vm)["out"].as<std::string>();
  // PREFIX.model and PREFIX.vocab: a prefix that names a folder ("dir/") would write hidden files into it.
  if (spec.prefix.filename().empty() || spec.prefix.filename() == "." || spec.prefix.filename() == "..") {
    throw_config("--out '" + spec.prefix.string() + "' names a folder, not a file prefix: give e.g. " +
                 (spec.prefix / "tok").string() + " (writes tok.model and tok.vocab)");
  }
  const std::string model = spec.prefix.string() + ".model", vocab = spec.prefix.string() + ".vocab";
  for (const std::string& out : {model, vocab}) {
    require_regular_output(out, "--out");
    require_not_checkpoint(out, "--out", "hsdp-data");
  }
  for (const auto& in :
       spec.inputs) {  // neither output replaces a text it learns from (a text given twice is read twice)
    const NamedPath paths[] = {{"--input", in}, {"--out", model, true}, {"--out", vocab, true}};
    require_distinct_files(paths);
  }
  spec.vocab_size = (*vm)["vocab-size"].as<int>();
  spec.type = (*vm)["type"].as<std::string>();
  spec.seed = (*vm)["seed"].as<std::uint64_t>();
  data::train_sentencepiece(spec);
  const data::Tokenizer t = data::Tokenizer::load(spec.prefix.string() + ".model");
  std::cout << "wrote " << spec.prefix.string() << ".model (" << spec.type << ", vocab " << t.vocab_size() << ", "
            << t.identity() << ") and " << spec.prefix.string() << ".vocab\n";
  return kExitOk;
}

int run_synth(const std::vector<std::string>& args) {
  const data::SynthSpec defaults;
  po::options_description options("options", kHelpWidth);
  // clang-format off
  options.add_options()
      ("out-dir", po::value<std::string>()->required(),
       "directory to write train.bin, val.bin and source.json into (created if missing)")
      ("vocab", po::value<int>()->default_value(defaults.source.vocab),
       "V: number of distinct tokens, in [2, 65536]; train with vocab_size >= V")
      ("order", po::value<int>()->default_value(defaults.source.order),
       "k: the next token depends on the last k tokens; V^k (the number of contexts) must be <= 1048576 "
       "so the entropy rate can be computed exactly")
      ("branching", po::value<int>()->default_value(defaults.source.branching),
       "b: successors per context, in [1, V], with Dirichlet(1) random probabilities")
      ("uniform-mix", po::value<double>()->default_value(defaults.source.uniform_mix, "0.01"),
       "probability in (0, 1] of drawing the next token uniformly instead of from the successors; "
       "it makes the chain ergodic, so its entropy rate is well defined")
      ("train-tokens", po::value<long long>()->default_value(static_cast<long long>(defaults.train_tokens)),
       "tokens in train.bin")
      ("val-tokens", po::value<long long>()->default_value(static_cast<long long>(defaults.val_tokens)),
       "tokens in val.bin (continuing the same stream after train.bin)")
      ("seed", po::value<std::uint64_t>()->default_value(defaults.source.seed),
       "seed of the source (successors, probabilities) and of the sampled stream");
  // clang-format on
  const auto vm = tool::parse_options(args, options,
                        "usage: hsdp-data synth --out-dir DIR [options]\n\n"
                        "Samples a seeded sparse Markov source of order k over V tokens:\n"
                        "  p(x | c) = (1 - uniform_mix) q_c(x) + uniform_mix / V,\n"
                        "where q_c puts Dirichlet(1) weights on b successors derived from hash(seed, c).\n"
                        "source.json holds the exact entropy rate H = sum_c pi(c) H(X|c) in nats/token (pi: the\n"
                        "stationary distribution, by power iteration until its L1 change is < 1e-13): the\n"
                        "cross-entropy a perfect model converges to on this data.\n");
  if (!vm) return kExitOk;

  data::SynthSpec spec;
  spec.source.vocab = (*vm)["vocab"].as<int>();
  spec.source.order = (*vm)["order"].as<int>();
  spec.source.branching = (*vm)["branching"].as<int>();
  spec.source.uniform_mix = (*vm)["uniform-mix"].as<double>();
  spec.source.seed = (*vm)["seed"].as<std::uint64_t>();
  spec.train_tokens = positive_count(*vm, "train-tokens");
  spec.val_tokens = positive_count(*vm, "val-tokens");
  const std::filesystem::path out_dir = (*vm)["out-dir"].as<std::string>();

  const data::SynthSummary summary = data::write_synth_dataset(spec, out_dir);
  std::cout << "synth: vocab " << spec.source.vocab << ", order " << spec.source.order << ", branching "
            << spec.source.branching << ", uniform mix " << spec.source.uniform_mix << ", seed " << spec.source.seed
            << "\n  entropy rate " << summary.entropy.nats_per_token << " nats/token (exact";
  if (summary.entropy.iterations > 0) {
    std::cout << "; stationary distribution after " << summary.entropy.iterations << " power iterations";
  }
  std::cout << ")\n  wrote " << summary.train_path.string() << " (" << spec.train_tokens << " tokens), "
            << summary.val_path.string() << " (" << spec.val_tokens << " tokens), " << summary.json_path.string()
            << '\n';
  return kExitOk;
}

int run_info(const std::vector<std::string>& args) {
  po::options_description options("options", kHelpWidth);
  // clang-format off
  options.add_options()
      ("input", po::value<std::string>()->required(), "token file to check")
      ("vocab", po::value<int>(), "also check that every token id is < this vocabulary size");
  // clang-format on
  const auto vm = tool::parse_options(args, options,
                        "usage: hsdp-data info --input FILE.bin [--vocab V]\n\n"
                        "Validates a token file's header and size and prints its token count and largest id.\n");
  if (!vm) return kExitOk;

  if (vm->count("vocab") && (*vm)["vocab"].as<int>() <= 0) {
    throw_config("--vocab must be >= 1, got " + std::to_string((*vm)["vocab"].as<int>()));
  }
  const data::TokenFile file((*vm)["input"].as<std::string>(), "info");
  if (vm->count("vocab")) file.validate_vocab((*vm)["vocab"].as<int>());
  std::cout << file.path().string() << ": " << file.size() << " tokens, largest id " << file.largest_token();
  if (vm->count("vocab")) std::cout << ", all < vocab " << (*vm)["vocab"].as<int>();
  std::cout << " (version " << file.version() << ": uint" << 8 * file.token_bytes() << ")\n";
  return kExitOk;
}

}  // namespace hsdp::data_tool
