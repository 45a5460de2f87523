#include "hsdp/data/markov_source.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../temp_dir.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/data/synth_dataset.hpp"
#include "hsdp/data/token_file.hpp"

namespace hsdp::data {
namespace {

// Count-based conditional entropy of a token stream given its last `order` tokens (plug-in estimate with
// the Miller-Madow bias correction), knowing nothing of the source that produced it.
double empirical_conditional_entropy(const std::vector<std::uint16_t>& tokens, int vocab, int order) {
  const auto v = static_cast<std::size_t>(vocab);
  std::size_t contexts = 1;
  for (int i = 0; i < order; ++i) contexts *= v;
  std::vector<std::uint64_t> pair_count(contexts * v, 0), context_count(contexts, 0);
  std::size_t context = 0;
  for (int i = 0; i < order; ++i) context = (context * v + tokens[static_cast<std::size_t>(i)]) % contexts;
  for (std::size_t t = static_cast<std::size_t>(order); t < tokens.size(); ++t) {
    ++pair_count[context * v + tokens[t]];
    ++context_count[context];
    context = (context * v + tokens[t]) % contexts;
  }
  const auto n = static_cast<double>(tokens.size() - static_cast<std::size_t>(order));
  double h = 0.0;
  double cells = 0.0;
  for (std::size_t c = 0; c < contexts; ++c) {
    if (context_count[c] == 0) continue;
    cells -= 1.0;
    for (std::size_t x = 0; x < v; ++x) {
      const auto count = static_cast<double>(pair_count[c * v + x]);
      if (count == 0) continue;
      cells += 1.0;
      h -= count / n * std::log(count / static_cast<double>(context_count[c]));
    }
  }
  return h + cells / (2.0 * n);
}

std::vector<std::uint16_t> sample(const MarkovSource& source, std::size_t count, std::uint64_t seed) {
  std::vector<std::uint16_t> tokens(count);
  MarkovStream stream(source, seed);
  stream.fill(tokens);
  return tokens;
}

double binary_entropy(double p) {
  return -p * std::log(p) - (1 - p) * std::log(1 - p);
}

// 2M tokens: the estimate's standard error is about sqrt(Var[ln p(x|c)] / N) < 1e-3 nats (Var < 2 here),
// so 5e-3 nats is a > 5 sigma tolerance while still catching any error in pi or in H(X|c).
constexpr std::size_t kSampleTokens = 2'000'000;
constexpr double kEmpiricalTolerance = 5e-3;

TEST(MarkovSource, DefaultSynthEntropy_MatchesCountBasedEstimateOfGeneratedData) {
  const MarkovSpec spec;  // the hsdp-data synth defaults
  const MarkovSource source = MarkovSource::from_spec(spec);
  const EntropyRate rate = source.entropy_rate();
  EXPECT_GT(rate.iterations, 0);
  EXPECT_LT(rate.final_l1_change, kStationaryTolerance);
  const auto tokens = sample(source, kSampleTokens, spec.seed);
  EXPECT_NEAR(empirical_conditional_entropy(tokens, spec.vocab, spec.order), rate.nats_per_token, kEmpiricalTolerance);
}

TEST(MarkovSource, OrderTwoEntropy_MatchesCountBasedEstimateOfGeneratedData) {
  const MarkovSpec spec{.vocab = 16, .order = 2, .branching = 3, .uniform_mix = 0.05, .seed = 3};
  const MarkovSource source = MarkovSource::from_spec(spec);
  const double entropy = source.entropy_rate().nats_per_token;
  const auto tokens = sample(source, kSampleTokens, 77);
  EXPECT_NEAR(empirical_conditional_entropy(tokens, spec.vocab, spec.order), entropy, kEmpiricalTolerance);
  // The perfect model's cross-entropy on generated data converges to the same value.
  double cross_entropy = 0.0;
  std::uint64_t context = tokens[0] * 16u + tokens[1];
  for (std::size_t t = 2; t < tokens.size(); ++t) {
    cross_entropy -= std::log(source.probability(context, tokens[t]));
    context = source.next_context(context, tokens[t]);
  }
  EXPECT_NEAR(cross_entropy / static_cast<double>(tokens.size() - 2), entropy, kEmpiricalTolerance);
}

// Tolerance 1e-12 for closed forms: a few roundings of O(1) values in double.
TEST(MarkovSource, DeterministicCycle_HasZeroEntropy) {
  std::vector<std::uint16_t> successors(8);
  for (std::uint16_t t = 0; t < 8; ++t) successors[t] = static_cast<std::uint16_t>((t + 1) % 8);
  const auto source = MarkovSource::from_table(8, 1, 1, successors, std::vector<double>(8, 1.0), 0.0);
  EXPECT_EQ(source.entropy_rate().nats_per_token, 0.0);
}

TEST(MarkovSource, UniformSource_HasEntropyLnV) {
  const auto mixed = MarkovSource::from_spec({.vocab = 50, .order = 2, .branching = 3, .uniform_mix = 1.0, .seed = 1});
  EXPECT_NEAR(mixed.entropy_rate().nats_per_token, std::log(50.0), 1e-12);
  std::vector<std::uint16_t> successors;
  for (int c = 0; c < 5; ++c) {
    for (std::uint16_t x = 0; x < 5; ++x) successors.push_back(static_cast<std::uint16_t>((x + c) % 5));
  }
  const auto table = MarkovSource::from_table(5, 1, 5, successors, std::vector<double>(25, 0.2), 0.0);
  EXPECT_NEAR(table.entropy_rate().nats_per_token, std::log(5.0), 1e-12);
}

TEST(MarkovSource, BranchingOne_HasTheClosedFormEntropyOfItsUniformMix) {
  const double eps = 0.01;
  const int v = 64;
  const auto source = MarkovSource::from_spec({.vocab = v, .order = 2, .branching = 1, .uniform_mix = eps, .seed = 9});
  const double p = 1 - eps + eps / v, q = eps / v;
  EXPECT_NEAR(source.entropy_rate().nats_per_token, -p * std::log(p) - (v - 1) * q * std::log(q), 1e-12);
}

TEST(MarkovSource, TwoStateChain_MatchesHandSolvedStationaryDistribution) {
  // P = [[0.9, 0.1], [0.3, 0.7]]: pi = (0.75, 0.25).
  const auto source = MarkovSource::from_table(2, 1, 2, {0, 1, 0, 1}, {0.9, 0.1, 0.3, 0.7}, 0.0);
  const double expected = 0.75 * binary_entropy(0.1) + 0.25 * binary_entropy(0.3);
  EXPECT_NEAR(source.entropy_rate().nats_per_token, expected, 1e-12);
}

TEST(MarkovSource, SameSeedSameSource_SuccessorsAreDistinctAndProbabilitiesSumToOne) {
  const MarkovSpec spec{.vocab = 32, .order = 2, .branching = 8, .uniform_mix = 0.01, .seed = 5};
  const auto a = MarkovSource::from_spec(spec);
  const auto b = MarkovSource::from_spec(spec);
  for (std::uint64_t c = 0; c < a.context_count(); ++c) {
    ASSERT_TRUE(std::equal(a.successors(c).begin(), a.successors(c).end(), b.successors(c).begin()));
    std::vector<std::uint16_t> sorted(a.successors(c).begin(), a.successors(c).end());
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "context " << c;
    double total = 0;
    for (const double p : a.successor_probabilities(c)) total += p;
    ASSERT_NEAR(total, 1.0, 1e-12);
  }
  EXPECT_EQ(sample(a, 1000, 4), sample(b, 1000, 4));
  EXPECT_NE(sample(a, 1000, 4),
            sample(MarkovSource::from_spec({.vocab = 32, .order = 2, .branching = 8, .uniform_mix = 0.01, .seed = 6}),
                   1000, 4));
}

TEST(MarkovSource, TooManyContexts_IsConfigErrorNamingTheOptions) {
  try {
    MarkovSource::from_spec({.vocab = 1024, .order = 3, .branching = 4, .uniform_mix = 0.01, .seed = 1});
    FAIL() << "no Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    const std::string message = e.what();
    EXPECT_NE(message.find("--vocab"), std::string::npos) << message;
    EXPECT_NE(message.find("--order"), std::string::npos) << message;
  }
  EXPECT_THROW(MarkovSource::from_spec({.vocab = 8, .order = 1, .branching = 9, .uniform_mix = 0.01, .seed = 1}),
               Error);
  EXPECT_THROW(MarkovSource::from_spec({.vocab = 8, .order = 1, .branching = 2, .uniform_mix = 0.0, .seed = 1}), Error);
}

TEST(SynthDataset, WritesTrainValAndSourceJsonWithTheExactEntropy) {
  testing::TempDir dir;
  SynthSpec spec;
  spec.train_tokens = 5000;
  spec.val_tokens = 700;
  const SynthSummary summary = write_synth_dataset(spec, dir / "out");
  const TokenFile train(summary.train_path), val(summary.val_path);
  EXPECT_EQ(train.size(), 5000u);
  EXPECT_EQ(val.size(), 700u);
  EXPECT_NO_THROW(train.validate_vocab(spec.source.vocab));
  std::ifstream in(summary.json_path);
  std::stringstream json;
  json << in.rdbuf();
  for (const char* key : {"\"vocab\":64", "\"order\":1", "\"branching\":4", "\"seed\":1337", "\"train_tokens\":5000",
                          "\"val_tokens\":700", "\"entropy_nats_per_token\":"}) {
    EXPECT_NE(json.str().find(key), std::string::npos) << key << " in " << json.str();
  }
  const auto at = json.str().find("\"entropy_nats_per_token\":") + 25;
  EXPECT_DOUBLE_EQ(std::stod(json.str().substr(at)), summary.entropy.nats_per_token);
  EXPECT_DOUBLE_EQ(summary.entropy.nats_per_token, MarkovSource::from_spec(spec.source).entropy_rate().nats_per_token);
}

}  // namespace
}  // namespace hsdp::data
