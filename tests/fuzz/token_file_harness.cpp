// Fuzz harness of the token-file reader: the input is the file. It is opened and checked as hsdp-train does for
// data.train and data.val (TokenFile, validate_vocab), then sampled by the training sampler on 1 and 4 data-parallel
// ranks and by the evaluation loader; every token handed to the model must be < the vocabulary size.
#include <cstdint>
#include <string>
#include <vector>

#include "harness.hpp"
#include "hsdp/data/sampler.hpp"
#include "hsdp/data/token_file.hpp"

namespace {

// The fuzz model's data shape (small, so that seeds of a few hundred tokens hold whole batches).
constexpr int kVocab = 64;
constexpr int kBatch = 2;
constexpr int kSeqLen = 16;

void check_tokens(const std::vector<std::int32_t>& inputs, const std::vector<std::int32_t>& targets) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] < 0 || inputs[i] >= kVocab || targets[i] < 0 || targets[i] >= kVocab) {
      throw hsdp::fuzz::PropertyViolation("tokens_below_vocab", "a sampled token at " + std::to_string(i) +
                                                                    " is outside [0, " + std::to_string(kVocab) + ")");
    }
  }
}

void read_token_file(const std::uint8_t* data, std::size_t size) {
  static const std::string path = hsdp::fuzz::scratch_dir() + "/train.bin";
  hsdp::fuzz::write_file(path, {data, size});
  const hsdp::data::TokenFile file(path, "data.train");
  file.validate_vocab(kVocab);

  std::vector<std::int32_t> inputs(kBatch * kSeqLen), targets(kBatch * kSeqLen);
  for (const auto& [rank, ranks] : {std::pair{0, 1}, std::pair{0, 4}, std::pair{3, 4}}) {
    hsdp::data::Sampler sampler(file, kBatch, kSeqLen, rank, ranks, 1337);
    for (int step = 0; step < 3; ++step) {
      sampler.next(inputs, targets);
      check_tokens(inputs, targets);
    }
    sampler.restore({1, 0});
    sampler.next(inputs, targets);
    check_tokens(inputs, targets);
  }
  for (const std::int64_t eval_tokens : {std::int64_t{0}, std::int64_t{kSeqLen}}) {
    hsdp::data::EvalLoader evaluator(file, kBatch, kSeqLen, 0, 1, eval_tokens);
    for (std::uint64_t b = 0; b < evaluator.batch_count() && b < 4; ++b) {
      const std::size_t rows = evaluator.next(inputs, targets);
      if (rows > static_cast<std::size_t>(kBatch)) {
        throw hsdp::fuzz::PropertyViolation("eval_rows", "EvalLoader::next says " + std::to_string(rows) +
                                                             " rows of a batch of " + std::to_string(kBatch));
      }
      check_tokens(inputs, targets);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return hsdp::fuzz::finish(hsdp::fuzz::run_classified([&] { read_token_file(data, size); }));
}
