#include "commands.hpp"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <optional>
#include <span>

#include "../common/subcommands.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/files.hpp"
#include "hsdp/data/byte_encoder.hpp"
#include "hsdp/data/synth_dataset.hpp"
#include "hsdp/data/token_file.hpp"

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

int run_encode(const std::vector<std::string>& args) {
  po::options_description options("options", kHelpWidth);
  // clang-format off
  options.add_options()
      ("input", po::value<std::string>()->required(), "text file to encode (any bytes; read whole)")
      ("output", po::value<std::string>()->required(),
       "token file to write (written as <output>.tmp, then renamed)")
      ("val-output", po::value<std::string>(),
       "optional second token file that receives the last --val-fraction of the tokens")
      ("val-fraction", po::value<double>()->default_value(0.1, "0.1"),
       "fraction of the tokens (taken from the end, rounded, at least 1) that go to --val-output; in (0, 1)");
  // clang-format on
  const auto vm = tool::parse_options(args, options,
                        "usage: hsdp-data encode --input TEXT --output OUT.bin [--val-output VAL.bin]\n\n"
                        "Byte-level encoding: each byte of TEXT becomes one token, so the vocabulary is 256\n"
                        "(train with vocab_size >= 256).\n");
  if (!vm) return kExitOk;

  const std::filesystem::path input = (*vm)["input"].as<std::string>();
  const std::filesystem::path output = (*vm)["output"].as<std::string>();
  require_regular_output(output.string(), "--output");
  if (vm->count("val-output")) require_regular_output((*vm)["val-output"].as<std::string>(), "--val-output");
  const std::vector<std::uint16_t> tokens = data::encode_text_file(input);
  std::span<const std::uint16_t> train(tokens);
  if (!vm->count("val-output") && !(*vm)["val-fraction"].defaulted()) {
    throw_config("--val-fraction needs --val-output (the file that receives that fraction of the tokens)");
  }
  if (vm->count("val-output")) {
    const double fraction = (*vm)["val-fraction"].as<double>();
    if (!(fraction > 0.0 && fraction < 1.0)) {
      throw_config("--val-fraction must be in (0, 1), got " + std::to_string(fraction));
    }
    const auto val_count =
        std::max<std::size_t>(1, static_cast<std::size_t>(std::llround(fraction * static_cast<double>(tokens.size()))));
    if (val_count >= tokens.size()) {
      throw_data("'" + input.string() + "' has only " + std::to_string(tokens.size()) +
                 " bytes: too few to split off a validation part");
    }
    const std::filesystem::path val_output = (*vm)["val-output"].as<std::string>();
    train = train.first(tokens.size() - val_count);
    data::write_token_file(val_output, std::span<const std::uint16_t>(tokens).last(val_count));
    std::cout << "wrote " << val_output.string() << ": " << val_count << " tokens (vocab " << data::kByteVocab << ")\n";
  }
  data::write_token_file(output, train);
  std::cout << "wrote " << output.string() << ": " << train.size() << " tokens (vocab " << data::kByteVocab << ")\n";
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

  const data::TokenFile file((*vm)["input"].as<std::string>(), "info");
  if (vm->count("vocab")) file.validate_vocab((*vm)["vocab"].as<int>());
  std::cout << file.path().string() << ": " << file.size() << " tokens (version " << file.version() << ", uint"
            << 8 * file.token_bytes() << "), largest id " << file.largest_token();
  if (vm->count("vocab")) std::cout << ", all < vocab " << (*vm)["vocab"].as<int>();
  std::cout << '\n';
  return kExitOk;
}

}  // namespace hsdp::data_tool
