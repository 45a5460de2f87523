#include "hsdp/data/sampler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "../temp_dir.hpp"
#include "hsdp/core/error.hpp"

namespace hsdp::data {
namespace {

constexpr int kSeqLen = 8;

// A token file whose token at position p is p, so a window is identified by its first input / seq_len.
TokenFile positional_file(const testing::TempDir& dir, std::size_t windows, const char* name = "train.bin") {
  std::vector<std::uint16_t> tokens(windows * kSeqLen + 1);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(i);
  write_token_file(dir / name, tokens);
  return TokenFile(dir / name, "data.train");
}

// Window indices of one call to next(), checking that targets are inputs shifted by one.
std::vector<std::uint64_t> next_windows(Sampler& sampler, int batch) {
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(batch * kSeqLen));
  std::vector<std::int32_t> targets(inputs.size());
  sampler.next(inputs, targets);
  std::vector<std::uint64_t> windows;
  for (int b = 0; b < batch; ++b) {
    const std::int32_t* in = &inputs[static_cast<std::size_t>(b * kSeqLen)];
    const std::int32_t* out = &targets[static_cast<std::size_t>(b * kSeqLen)];
    EXPECT_EQ(in[0] % kSeqLen, 0);
    for (int i = 0; i < kSeqLen; ++i) {
      EXPECT_EQ(in[i], in[0] + i);
      EXPECT_EQ(out[i], in[i] + 1);
    }
    windows.push_back(static_cast<std::uint64_t>(in[0] / kSeqLen));
  }
  return windows;
}

TEST(Sampler, RanksTakeDisjointSlices_AndEveryWindowIsUsedOncePerEpoch) {
  testing::TempDir dir;
  const TokenFile file = positional_file(dir, 96);
  constexpr int kRanks = 4, kBatch = 3;
  std::vector<Sampler> samplers;
  for (int r = 0; r < kRanks; ++r) samplers.emplace_back(file, kBatch, kSeqLen, r, kRanks, 42);
  ASSERT_EQ(samplers[0].window_count(), 96u);
  ASSERT_EQ(samplers[0].steps_per_epoch(), 8u);
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
    std::multiset<std::uint64_t> seen;
    for (int step = 0; step < 8; ++step) {
      std::set<std::uint64_t> in_step;
      for (auto& sampler : samplers) {
        for (const auto w : next_windows(sampler, kBatch)) EXPECT_TRUE(in_step.insert(w).second) << "window " << w;
        EXPECT_EQ(sampler.state(), (SamplerState{epoch, static_cast<std::uint64_t>((step + 1) * kRanks * kBatch)}));
      }
      seen.insert(in_step.begin(), in_step.end());
    }
    ASSERT_EQ(seen.size(), 96u);
    for (std::uint64_t w = 0; w < 96; ++w) EXPECT_EQ(seen.count(w), 1u) << "epoch " << epoch << " window " << w;
  }
}

TEST(Sampler, GlobalBatchNotDividingWindows_SkipsTheTailAndStartsANewEpoch) {
  testing::TempDir dir;
  const TokenFile file = positional_file(dir, 100);
  Sampler sampler(file, 6, kSeqLen, 0, 1, 7);
  ASSERT_EQ(sampler.steps_per_epoch(), 16u);  // 16 x 6 = 96 of 100 windows
  std::set<std::uint64_t> seen;
  for (int step = 0; step < 16; ++step) {
    for (const auto w : next_windows(sampler, 6)) EXPECT_TRUE(seen.insert(w).second);
  }
  EXPECT_EQ(seen.size(), 96u);
  next_windows(sampler, 6);
  EXPECT_EQ(sampler.state(), (SamplerState{1, 6}));
}

TEST(Sampler, RestoredSamplerContinuesBitIdentically_AcrossEpochs) {
  testing::TempDir dir;
  const TokenFile file = positional_file(dir, 50);
  Sampler original(file, 2, kSeqLen, 1, 2, 99);
  for (int i = 0; i < 9; ++i) next_windows(original, 2);
  const SamplerState saved = original.state();
  std::vector<std::vector<std::uint64_t>> expected;
  for (int i = 0; i < 40; ++i) expected.push_back(next_windows(original, 2));  // crosses 3 epoch ends

  Sampler resumed(file, 2, kSeqLen, 1, 2, 99);
  resumed.restore(saved);
  EXPECT_EQ(resumed.peek_windows(), expected.front());
  for (int i = 0; i < 40; ++i)
    EXPECT_EQ(next_windows(resumed, 2), expected[static_cast<std::size_t>(i)]) << "step " << i;
  EXPECT_EQ(resumed.state(), original.state());
}

TEST(Sampler, SameGlobalBatchOnAnotherDpSize_ReadsTheSameGlobalOrder) {
  testing::TempDir dir;
  const TokenFile file = positional_file(dir, 96);
  auto global_order = [&](int ranks, int batch) {
    std::vector<Sampler> samplers;
    for (int r = 0; r < ranks; ++r) samplers.emplace_back(file, batch, kSeqLen, r, ranks, 5);
    std::vector<std::uint64_t> order;
    for (int step = 0; step < 20; ++step) {
      for (auto& sampler : samplers) {
        const auto windows = next_windows(sampler, batch);
        order.insert(order.end(), windows.begin(), windows.end());
      }
    }
    return order;
  };
  EXPECT_EQ(global_order(4, 3), global_order(2, 6));
}

// A step's windows as a set: what the step's summed gradient depends on.
using StepWindows = std::multiset<std::uint64_t>;

// `steps` steps of a job of `ranks` ranks with micro-batches of `batch` and `accum` micro-batches per step.
std::vector<StepWindows> job_steps(std::vector<Sampler>& samplers, int batch, int accum, int steps) {
  std::vector<StepWindows> out;
  for (int step = 0; step < steps; ++step) {
    StepWindows windows;
    for (int micro = 0; micro < accum; ++micro) {
      for (auto& sampler : samplers) {
        for (const auto w : next_windows(sampler, batch)) windows.insert(w);
      }
    }
    out.push_back(windows);
  }
  return out;
}

// The same global batch split as 2 ranks x 1 micro-batch and 1 rank x 2 micro-batches: the same windows in every
// step across epoch ends (5 windows, 2 a step: an epoch of 2 steps, one window skipped), and a resume from the
// 2-rank job's state on 1 rank with 2 micro-batches continues the 2-rank job's steps. An epoch ends between steps.
TEST(Sampler, ASplitIntoRanksOrMicroBatches_ReadsTheSameWindowsEveryStep_AcrossEpochEnds_AndAResumeOnAnother) {
  testing::TempDir dir;
  const TokenFile file = positional_file(dir, 5);
  std::vector<Sampler> two;
  for (int r = 0; r < 2; ++r) two.emplace_back(file, 1, kSeqLen, r, 2, 3);
  std::vector<Sampler> one;
  one.emplace_back(file, 1, kSeqLen, 0, 1, 3, 2);
  ASSERT_EQ(one.front().steps_per_epoch(), 2u);
  const std::vector<StepWindows> by_ranks = job_steps(two, 1, 1, 9);
  EXPECT_EQ(job_steps(one, 1, 2, 9), by_ranks);
  EXPECT_EQ(one.front().state(), two.front().state());

  std::vector<Sampler> first;
  for (int r = 0; r < 2; ++r) first.emplace_back(file, 1, kSeqLen, r, 2, 3);
  job_steps(first, 1, 1, 3);
  std::vector<Sampler> resumed;
  resumed.emplace_back(file, 1, kSeqLen, 0, 1, 3);  // built with the deck's grad_accum, then the resume's
  resumed.front().restore(first.front().state());
  resumed.front().set_micro_batches(2);
  const std::vector<StepWindows> rest = job_steps(resumed, 1, 2, 6);
  EXPECT_EQ(rest, std::vector<StepWindows>(by_ranks.begin() + 3, by_ranks.end()));
}

TEST(Sampler, SameSeedGivesSameOrder_OtherSeedOrEpochGivesAnother) {
  EXPECT_EQ(epoch_permutation(1000, 1, 0), epoch_permutation(1000, 1, 0));
  EXPECT_NE(epoch_permutation(1000, 1, 0), epoch_permutation(1000, 2, 0));
  EXPECT_NE(epoch_permutation(1000, 1, 0), epoch_permutation(1000, 1, 1));
  auto sorted = epoch_permutation(1000, 3, 4);
  std::sort(sorted.begin(), sorted.end());
  for (std::uint32_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);

  testing::TempDir dir;
  const TokenFile file = positional_file(dir, 64);
  Sampler a(file, 4, kSeqLen, 0, 1, 11);
  Sampler b(file, 4, kSeqLen, 0, 1, 11);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(next_windows(a, 4), next_windows(b, 4));
}

TEST(Sampler, FileTooSmallForOneGlobalBatch_IsDataErrorNamingFileAndSizes) {
  testing::TempDir dir;
  const TokenFile file = positional_file(dir, 11, "small.bin");
  try {
    Sampler(file, 3, kSeqLen, 0, 4, 1);
    FAIL() << "no Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::data);
    const std::string message = e.what();
    EXPECT_NE(message.find("small.bin"), std::string::npos) << message;
    EXPECT_NE(message.find("89 tokens"), std::string::npos) << message;
    EXPECT_NE(message.find("11 windows"), std::string::npos) << message;
    EXPECT_NE(message.find("4 x 3 x 1 = 12"), std::string::npos) << message;
  }
}

TEST(Sampler, FewerWindowsThanOneStep_IsADataErrorNamingTheStepsBatch) {
  testing::TempDir dir;
  const TokenFile file = positional_file(dir, 11, "small.bin");
  try {
    Sampler(file, 3, kSeqLen, 0, 2, 1, 2);  // 2 x 3 = 6 windows a micro-batch fit; 12 a step do not
    FAIL() << "no Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::data);
    EXPECT_NE(std::string(e.what()).find("2 x 3 x 2 = 12 windows"), std::string::npos) << e.what();
  }
  Sampler fits(file, 3, kSeqLen, 0, 2, 1);
  EXPECT_THROW(fits.set_micro_batches(2), Error);
}

TEST(Sampler, BadShapeIsConfigError_AndForeignStateIsDataError) {
  testing::TempDir dir;
  const TokenFile file = positional_file(dir, 16);
  EXPECT_THROW(Sampler(file, 0, kSeqLen, 0, 1, 1), Error);
  EXPECT_THROW(Sampler(file, 1, kSeqLen, 2, 2, 1), Error);
  Sampler sampler(file, 2, kSeqLen, 0, 1, 1);
  try {
    sampler.restore(SamplerState{0, 17});
    FAIL() << "no Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::data);
    EXPECT_NE(std::string(e.what()).find("train.bin"), std::string::npos) << e.what();
  }
}

TEST(EvalLoader, ReadsWindowsInFileOrderPerRank_AndWrapsAfterTheLastBatch) {
  testing::TempDir dir;
  const TokenFile file = positional_file(dir, 26, "val.bin");
  EvalLoader rank0(file, 2, kSeqLen, 0, 3, 24 * kSeqLen);
  EvalLoader rank2(file, 2, kSeqLen, 2, 3, 24 * kSeqLen);
  ASSERT_EQ(rank0.batch_count(), 4u);  // 4 x 6 = 24 of 26 windows
  std::vector<std::int32_t> inputs(2 * kSeqLen), targets(2 * kSeqLen);
  for (std::uint64_t batch = 0; batch < 6; ++batch) {
    const std::uint64_t b = batch % 4;
    EXPECT_EQ(rank0.next(inputs, targets), 2u);
    EXPECT_EQ(inputs[0], static_cast<std::int32_t>((b * 6 + 0) * kSeqLen));
    EXPECT_EQ(inputs[kSeqLen], static_cast<std::int32_t>((b * 6 + 1) * kSeqLen));
    EXPECT_EQ(targets[2 * kSeqLen - 1], inputs[2 * kSeqLen - 1] + 1);
    EXPECT_EQ(rank2.next(inputs, targets), 2u);
    EXPECT_EQ(inputs[0], static_cast<std::int32_t>((b * 6 + 4) * kSeqLen));
  }
  rank0.reset();
  rank0.next(inputs, targets);
  EXPECT_EQ(inputs[0], 0);
}

// The evaluation set is the data's: the same first W windows, each once, on any number of ranks; ranks pad their
// last batches and say how many rows are real.
TEST(EvalLoader, TheSameWindowsOnOneTwoAndFourRanks_EachOnce) {
  testing::TempDir dir;
  const TokenFile file = positional_file(dir, 26, "val.bin");
  const std::int64_t eval_tokens = 11 * kSeqLen + 3;  // 11 windows: no world size below divides it evenly
  for (const int world : {1, 2, 4}) {
    std::vector<int> seen(26, 0);
    std::uint64_t batches = 0;
    for (int r = 0; r < world; ++r) {
      EvalLoader loader(file, 2, kSeqLen, r, world, eval_tokens);
      EXPECT_EQ(loader.windows(), 11u);
      if (r == 0) batches = loader.batch_count();
      EXPECT_EQ(loader.batch_count(), batches) << "every rank makes the same number of evaluate calls";
      std::vector<std::int32_t> inputs(2 * kSeqLen), targets(2 * kSeqLen);
      for (std::uint64_t b = 0; b < loader.batch_count(); ++b) {
        const std::size_t real = loader.next(inputs, targets);
        for (std::size_t row = 0; row < real; ++row) ++seen[static_cast<std::size_t>(inputs[row * kSeqLen] / kSeqLen)];
      }
    }
    for (int w = 0; w < 26; ++w) EXPECT_EQ(seen[static_cast<std::size_t>(w)], w < 11 ? 1 : 0) << world << " ranks, window " << w;
  }
}

TEST(EvalLoader, AValSetSmallerThanOneEvaluation_IsADataErrorNamingBothSizes) {
  testing::TempDir dir;
  const TokenFile file = positional_file(dir, 26, "val.bin");
  try {
    EvalLoader loader(file, 2, kSeqLen, 0, 1, 40 * kSeqLen);
    FAIL() << "no Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::data);
    const std::string what = e.what();
    EXPECT_NE(what.find("26 windows"), std::string::npos) << what;
    EXPECT_NE(what.find("train.eval_tokens = " + std::to_string(40 * kSeqLen) + " needs 40 windows"), std::string::npos)
        << what;
  }
  EvalLoader whole(file, 2, kSeqLen, 0, 1, 0);
  EXPECT_EQ(whole.windows(), 26u);
}

}  // namespace
}  // namespace hsdp::data
