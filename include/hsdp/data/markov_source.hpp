#pragma once
// A seeded sparse Markov source of order k over a vocabulary of V tokens, with an exactly known entropy
// rate, so a training run can be judged against the best possible cross-entropy.
//
// The next token depends on the context c = the last k tokens. Each context has `branching` distinct
// successor tokens with Dirichlet(1) weights q (normalised exponentials), derived deterministically from
// hash(seed, c), and the chain mixes in a uniform component:
//     p(x | c) = (1 - uniform_mix) * q_c(x) + uniform_mix / V.
// With uniform_mix > 0 every context can reach every other context in k steps and every transition has
// positive probability, so the context chain is irreducible and aperiodic: its stationary distribution
// pi exists, is unique, and the generated stream converges to it from any start. The entropy rate
//     H = sum_c pi(c) * H(X | c)   [nats/token]
// is what a perfect model's cross-entropy on a long generated stream converges to.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "hsdp/data/random.hpp"

namespace hsdp::data {

struct MarkovSpec {
  int vocab = 64;
  int order = 1;
  int branching = 4;
  double uniform_mix = 0.01;
  std::uint64_t seed = 1337;
};

// Exact entropy rate needs pi over every context: V^k is bounded so the table and the power iteration
// stay in memory and seconds.
inline constexpr std::uint64_t kMaxMarkovContexts = std::uint64_t{1} << 20;
inline constexpr std::uint64_t kMaxMarkovTableEntries = std::uint64_t{1} << 24;

struct EntropyRate {
  double nats_per_token = 0.0;
  // Power iteration pi <- pi P from uniform pi, stopped when ||pi_{n+1} - pi_n||_1 < kStationaryTolerance.
  // 0 iterations when every context has the same conditional entropy (then H needs no pi).
  int iterations = 0;
  double final_l1_change = 0.0;
};
inline constexpr double kStationaryTolerance = 1e-13;
inline constexpr int kMaxStationaryIterations = 20000;

class MarkovSource {
 public:
  // Validates the spec (config Errors naming the option: --vocab, --order, --branching, --uniform-mix)
  // and derives every context's successors from the seed.
  static MarkovSource from_spec(const MarkovSpec& spec);
  // A hand-made source: for context c (base-V number of the last k tokens, oldest most significant),
  // successors[c*branching + j] with probability probabilities[c*branching + j]; the successors of a
  // context are distinct and their probabilities sum to 1. uniform_mix may be 0 here: then the caller
  // vouches that the chain has a unique stationary distribution.
  static MarkovSource from_table(int vocab, int order, int branching, std::vector<std::uint16_t> successors,
                                 std::vector<double> probabilities, double uniform_mix);

  int vocab() const { return vocab_; }
  int order() const { return order_; }
  int branching() const { return branching_; }
  double uniform_mix() const { return uniform_mix_; }
  std::uint64_t context_count() const { return context_count_; }

  std::span<const std::uint16_t> successors(std::uint64_t context) const;
  std::span<const double> successor_probabilities(std::uint64_t context) const;
  // p(next | context), uniform component included.
  double probability(std::uint64_t context, std::uint16_t next) const;
  // H(X | context) in nats.
  double conditional_entropy(std::uint64_t context) const;
  // The context after `context` emits `next`.
  std::uint64_t next_context(std::uint64_t context, std::uint16_t next) const {
    return (context % suffix_count_) * static_cast<std::uint64_t>(vocab_) + next;
  }
  // Exact entropy rate (see the top of this file); throws a config Error if pi does not converge.
  EntropyRate entropy_rate() const;

 private:
  MarkovSource(int vocab, int order, int branching, double uniform_mix);
  void check_table() const;

  int vocab_;
  int order_;
  int branching_;
  double uniform_mix_;
  std::uint64_t context_count_;  // V^k
  std::uint64_t suffix_count_;   // V^(k-1)
  std::vector<std::uint16_t> successors_;
  std::vector<double> probabilities_;
};

// A stream of tokens drawn from a source: starts from a seeded random context, then discards
// kMarkovBurnIn tokens so what it emits is (to within the chain's mixing) a stationary sample.
inline constexpr std::size_t kMarkovBurnIn = 4096;

class MarkovStream {
 public:
  MarkovStream(const MarkovSource& source, std::uint64_t seed);
  std::uint16_t next();
  void fill(std::span<std::uint16_t> out);

 private:
  const MarkovSource& source_;
  SplitMix64 rng_;
  std::uint64_t context_ = 0;
};

}  // namespace hsdp::data
