#include "hsdp/data/markov_source.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "hsdp/core/error.hpp"

namespace hsdp::data {

namespace {

// V^k, or 0 when it exceeds `limit` (so callers can report without overflow).
std::uint64_t power_bounded(std::uint64_t base, int exponent, std::uint64_t limit) {
  std::uint64_t result = 1;
  for (int i = 0; i < exponent; ++i) {
    if (result > limit / base) return 0;
    result *= base;
  }
  return result;
}

double neg_p_log_p(double p) {
  return p > 0.0 ? -p * std::log(p) : 0.0;
}

}  // namespace

MarkovSource::MarkovSource(int vocab, int order, int branching, double uniform_mix)
    : vocab_(vocab), order_(order), branching_(branching), uniform_mix_(uniform_mix) {
  if (vocab < 2 || vocab > 65536) {
    throw_config("synth: --vocab must be in [2, 65536] (tokens are uint16), got " + std::to_string(vocab));
  }
  if (order < 1) throw_config("synth: --order must be >= 1, got " + std::to_string(order));
  if (branching < 1 || branching > vocab) {
    throw_config("synth: --branching must be in [1, --vocab=" + std::to_string(vocab) + "], got " +
                 std::to_string(branching));
  }
  if (!(uniform_mix >= 0.0 && uniform_mix <= 1.0)) {
    throw_config("synth: --uniform-mix must be in (0, 1], got " + std::to_string(uniform_mix));
  }
  const auto v = static_cast<std::uint64_t>(vocab);
  context_count_ = power_bounded(v, order, kMaxMarkovContexts);
  if (context_count_ == 0) {
    throw_config("synth: --vocab^--order = " + std::to_string(vocab) + "^" + std::to_string(order) +
                 " contexts exceeds " + std::to_string(kMaxMarkovContexts) +
                 ", too many to compute the exact entropy rate: lower --vocab or --order");
  }
  if (context_count_ * static_cast<std::uint64_t>(branching) > kMaxMarkovTableEntries) {
    throw_config("synth: --vocab^--order x --branching = " + std::to_string(context_count_) + " x " +
                 std::to_string(branching) + " successor entries exceeds " + std::to_string(kMaxMarkovTableEntries) +
                 ": lower --vocab, --order or --branching");
  }
  suffix_count_ = context_count_ / v;
}

MarkovSource MarkovSource::from_spec(const MarkovSpec& spec) {
  MarkovSource source(spec.vocab, spec.order, spec.branching, spec.uniform_mix);
  if (!(spec.uniform_mix > 0.0)) {
    throw_config(
        "synth: --uniform-mix must be > 0: it is what makes the chain ergodic, so that its entropy "
        "rate is well defined");
  }
  const auto b = static_cast<std::size_t>(spec.branching);
  const auto v = static_cast<std::uint64_t>(spec.vocab);
  source.successors_.resize(source.context_count_ * b);
  source.probabilities_.resize(source.context_count_ * b);
  // Marks tokens already chosen for the current context: stamp[t] == context + 1.
  std::vector<std::uint64_t> stamp(v, 0);
  for (std::uint64_t c = 0; c < source.context_count_; ++c) {
    SplitMix64 rng(derive_seed(spec.seed, c));
    std::uint16_t* succ = &source.successors_[c * b];
    double* prob = &source.probabilities_[c * b];
    // Floyd's algorithm: b distinct tokens out of V in O(b).
    std::size_t chosen = 0;
    for (std::uint64_t j = v - b; j < v; ++j) {
      std::uint64_t t = rng.below(j + 1);
      if (stamp[t] == c + 1) t = j;
      stamp[t] = c + 1;
      succ[chosen++] = static_cast<std::uint16_t>(t);
    }
    // Dirichlet(1) weights: normalised Exp(1) draws.
    double total = 0.0;
    for (std::size_t j = 0; j < b; ++j) total += (prob[j] = -std::log(rng.uniform_open_zero()));
    for (std::size_t j = 0; j < b; ++j) prob[j] /= total;
  }
  return source;
}

MarkovSource MarkovSource::from_table(int vocab, int order, int branching, std::vector<std::uint16_t> successors,
                                      std::vector<double> probabilities, double uniform_mix) {
  MarkovSource source(vocab, order, branching, uniform_mix);
  const std::size_t entries = source.context_count_ * static_cast<std::size_t>(branching);
  if (successors.size() != entries || probabilities.size() != entries) {
    throw_config("synth table: expected " + std::to_string(entries) + " successors and probabilities (V^k x b), got " +
                 std::to_string(successors.size()) + " and " + std::to_string(probabilities.size()));
  }
  source.successors_ = std::move(successors);
  source.probabilities_ = std::move(probabilities);
  source.check_table();
  return source;
}

void MarkovSource::check_table() const {
  for (std::uint64_t c = 0; c < context_count_; ++c) {
    const auto succ = successors(c);
    const auto prob = successor_probabilities(c);
    double total = 0.0;
    for (std::size_t j = 0; j < succ.size(); ++j) {
      if (succ[j] >= vocab_ || !(prob[j] >= 0.0)) {
        throw_config("synth table: context " + std::to_string(c) + " has successor " + std::to_string(succ[j]) +
                     " with probability " + std::to_string(prob[j]));
      }
      if (std::find(succ.begin(), succ.begin() + static_cast<std::ptrdiff_t>(j), succ[j]) !=
          succ.begin() + static_cast<std::ptrdiff_t>(j)) {
        throw_config("synth table: context " + std::to_string(c) + " lists successor " + std::to_string(succ[j]) +
                     " twice");
      }
      total += prob[j];
    }
    if (std::abs(total - 1.0) > 1e-9) {
      throw_config("synth table: the probabilities of context " + std::to_string(c) + " sum to " +
                   std::to_string(total) + ", not 1");
    }
  }
}

std::span<const std::uint16_t> MarkovSource::successors(std::uint64_t context) const {
  const auto b = static_cast<std::size_t>(branching_);
  return {successors_.data() + context * b, b};
}

std::span<const double> MarkovSource::successor_probabilities(std::uint64_t context) const {
  const auto b = static_cast<std::size_t>(branching_);
  return {probabilities_.data() + context * b, b};
}

double MarkovSource::probability(std::uint64_t context, std::uint16_t next) const {
  double p = uniform_mix_ / vocab_;
  const auto succ = successors(context);
  const auto prob = successor_probabilities(context);
  for (std::size_t j = 0; j < succ.size(); ++j) {
    if (succ[j] == next) p += (1.0 - uniform_mix_) * prob[j];
  }
  return p;
}

double MarkovSource::conditional_entropy(std::uint64_t context) const {
  const double uniform = uniform_mix_ / vocab_;
  double h = 0.0;
  for (const double q : successor_probabilities(context)) h += neg_p_log_p((1.0 - uniform_mix_) * q + uniform);
  return h + static_cast<double>(vocab_ - branching_) * neg_p_log_p(uniform);
}

EntropyRate MarkovSource::entropy_rate() const {
  const std::size_t contexts = context_count_;
  std::vector<double> entropy(contexts);
  for (std::size_t c = 0; c < contexts; ++c) entropy[c] = conditional_entropy(c);
  const auto [low, high] = std::minmax_element(entropy.begin(), entropy.end());
  // The same H(X|c) everywhere (deterministic or uniform sources): H is that value for any pi.
  if (*low == *high) return EntropyRate{*low, 0, 0.0};

  const auto v = static_cast<std::size_t>(vocab_);
  const std::size_t suffixes = suffix_count_;
  const double uniform = uniform_mix_ / vocab_;
  std::vector<double> pi(contexts, 1.0 / static_cast<double>(contexts));
  std::vector<double> next(contexts);
  std::vector<double> suffix_mass(suffixes);
  double change = 0.0;
  for (int iteration = 1; iteration <= kMaxStationaryIterations; ++iteration) {
    // Context (a, s) moves to (s, x): the uniform part spreads each suffix's mass over all x.
    std::fill(suffix_mass.begin(), suffix_mass.end(), 0.0);
    for (std::size_t c = 0; c < contexts; ++c) suffix_mass[c % suffixes] += pi[c];
    for (std::size_t s = 0; s < suffixes; ++s)
      std::fill_n(next.begin() + static_cast<std::ptrdiff_t>(s * v), v, uniform * suffix_mass[s]);
    for (std::size_t c = 0; c < contexts; ++c) {
      const std::size_t base = (c % suffixes) * v;
      const double mass = (1.0 - uniform_mix_) * pi[c];
      const auto succ = successors(c);
      const auto prob = successor_probabilities(c);
      for (std::size_t j = 0; j < succ.size(); ++j) next[base + succ[j]] += mass * prob[j];
    }
    double total = 0.0;
    for (const double p : next) total += p;
    change = 0.0;
    for (std::size_t c = 0; c < contexts; ++c) {
      next[c] /= total;
      change += std::abs(next[c] - pi[c]);
    }
    pi.swap(next);
    if (change < kStationaryTolerance) {
      double h = 0.0;
      for (std::size_t c = 0; c < contexts; ++c) h += pi[c] * entropy[c];
      return EntropyRate{h, iteration, change};
    }
  }
  throw_config("synth: the stationary distribution did not converge in " + std::to_string(kMaxStationaryIterations) +
               " iterations (last L1 change " + std::to_string(change) + "): raise --uniform-mix");
}

MarkovStream::MarkovStream(const MarkovSource& source, std::uint64_t seed)
    : source_(source), rng_(derive_seed(seed, 0x5eedULL)) {
  for (int i = 0; i < source_.order(); ++i) {
    context_ = source_.next_context(context_, static_cast<std::uint16_t>(rng_.below(source_.vocab())));
  }
  for (std::size_t i = 0; i < kMarkovBurnIn; ++i) next();
}

std::uint16_t MarkovStream::next() {
  std::uint16_t token;
  const double u = rng_.uniform();
  if (u < source_.uniform_mix()) {
    token = static_cast<std::uint16_t>(rng_.below(static_cast<std::uint64_t>(source_.vocab())));
  } else {
    // Rescale u to [0, 1) within the successor part and walk the cumulative weights.
    const double r = (u - source_.uniform_mix()) / (1.0 - source_.uniform_mix());
    const auto succ = source_.successors(context_);
    const auto prob = source_.successor_probabilities(context_);
    std::size_t j = 0;
    double cumulative = prob[0];
    while (r >= cumulative && j + 1 < succ.size()) cumulative += prob[++j];
    token = succ[j];
  }
  context_ = source_.next_context(context_, token);
  return token;
}

void MarkovStream::fill(std::span<std::uint16_t> out) {
  for (auto& token : out) token = next();
}

}  // namespace hsdp::data
