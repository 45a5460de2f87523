#pragma once
// A synthetic dataset from a MarkovSource: <dir>/train.bin, <dir>/val.bin and <dir>/source.json, whose
// "entropy_nats_per_token" is the loss a perfect model converges to on this data.
//
// Defaults suit the quickstart model (4 layers, C=128, a few minutes on 2 cores): a first-order source
// over 64 tokens with 4 successors per token is learnable in a few hundred steps, and its entropy rate
// (about 1.2 nats/token for seed 1337) is far below the ln 64 = 4.16 of an untrained model.
#include <cstddef>
#include <filesystem>
#include <string>

#include "hsdp/data/markov_source.hpp"

namespace hsdp::data {

struct SynthSpec {
  MarkovSpec source;
  std::size_t train_tokens = 2'000'000;
  std::size_t val_tokens = 200'000;
};

struct SynthSummary {
  EntropyRate entropy;
  std::filesystem::path train_path;
  std::filesystem::path val_path;
  std::filesystem::path json_path;
};

// One continuous stream from the source: the first train_tokens go to train.bin, the next val_tokens to
// val.bin. Creates out_dir if needed; every file is written to a temporary name and renamed.
SynthSummary write_synth_dataset(const SynthSpec& spec, const std::filesystem::path& out_dir);

// The one-line source.json text (entropy printed with 17 significant digits).
std::string synth_source_json(const SynthSpec& spec, const EntropyRate& entropy);

}  // namespace hsdp::data
