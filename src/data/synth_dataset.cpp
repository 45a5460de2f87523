#include "hsdp/data/synth_dataset.hpp"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "hsdp/core/error.hpp"
#include "hsdp/core/files.hpp"
#include "hsdp/core/json.hpp"
#include "hsdp/data/token_file.hpp"

namespace hsdp::data {

namespace {

std::string precise(double value) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

}  // namespace

std::string synth_source_json(const SynthSpec& spec, const EntropyRate& entropy) {
  JsonLine json;
  json.add("vocab", spec.source.vocab)
      .add("order", spec.source.order)
      .add("branching", spec.source.branching)
      .add_raw("entropy_nats_per_token", precise(entropy.nats_per_token))
      .add("seed", spec.source.seed)
      .add("train_tokens", static_cast<std::uint64_t>(spec.train_tokens))
      .add("val_tokens", static_cast<std::uint64_t>(spec.val_tokens))
      .add_raw("uniform_mix", precise(spec.source.uniform_mix))
      .add("stationary_iterations", entropy.iterations)
      .add_raw("stationary_l1_change", precise(entropy.final_l1_change))
      .add("generator",
           "hsdp-data synth: p(x|c) = (1-uniform_mix) Dirichlet(1) over branching successors + uniform_mix/vocab");
  return json.str();
}

SynthSummary write_synth_dataset(const SynthSpec& spec, const std::filesystem::path& out_dir) {
  if (spec.train_tokens == 0) throw_config("synth: --train-tokens must be > 0");
  if (spec.val_tokens == 0) throw_config("synth: --val-tokens must be > 0");
  // The llm.c header counts tokens in an int32: said before the tokens are generated, not after.
  constexpr auto kMaxTokens = static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max());
  for (const auto& [option, count] :
       {std::pair{"--train-tokens", spec.train_tokens}, {"--val-tokens", spec.val_tokens}}) {
    if (static_cast<std::uint64_t>(count) > kMaxTokens) {
      throw_config("synth: " + std::string(option) + " " + std::to_string(count) +
                   " does not fit the int32 token count of the llm.c header (at most " + std::to_string(kMaxTokens) +
                   ")");
    }
  }
  const MarkovSource source = MarkovSource::from_spec(spec.source);
  SynthSummary summary;
  summary.entropy = source.entropy_rate();

  summary.train_path = out_dir / "train.bin";
  summary.val_path = out_dir / "val.bin";
  summary.json_path = out_dir / "source.json";
  for (const auto& path : {summary.train_path, summary.val_path, summary.json_path}) {
    require_regular_output(path.string(), "synth: --out-dir");  // before source.json is read: a FIFO would block it
  }
  // It replaces its own earlier files only: train.bin or val.bin without a synth's source.json beside them are data
  // from elsewhere (hsdp-data encode, llm.c), never replaced.
  std::error_code error;
  const char* held = std::filesystem::exists(summary.train_path, error) ? "train.bin"
                     : std::filesystem::exists(summary.val_path, error) ? "val.bin"
                                                                        : nullptr;
  if (held != nullptr) {
    std::ifstream json(summary.json_path);
    const std::string text((std::istreambuf_iterator<char>(json)), std::istreambuf_iterator<char>());
    if (text.find("\"generator\":\"hsdp-data synth") == std::string::npos) {
      throw_config("synth: --out-dir '" + out_dir.string() + "' holds " + held +
                   " that hsdp-data synth did not write (no synth's source.json beside it): it is not replaced; give "
                   "another --out-dir");
    }
  }
  std::filesystem::create_directories(out_dir, error);
  if (error) throw_data("synth: cannot create directory '" + out_dir.string() + "': " + error.message());

  MarkovStream stream(source, spec.source.seed);
  std::vector<std::uint16_t> tokens(spec.train_tokens);
  stream.fill(tokens);
  write_token_file(summary.train_path, tokens);
  tokens.assign(spec.val_tokens, 0);
  stream.fill(tokens);
  write_token_file(summary.val_path, tokens);
  write_file_atomically(summary.json_path, synth_source_json(spec, summary.entropy) + "\n");
  return summary;
}

}  // namespace hsdp::data
