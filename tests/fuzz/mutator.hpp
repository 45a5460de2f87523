#pragma once
// Deterministic mutation of seed inputs for the fuzz driver: the same seed gives the same inputs on every machine
// (our own generator and arithmetic, no std:: distributions, whose results the standard leaves to the library).
#include <cstdint>
#include <string>
#include <vector>

namespace hsdp::fuzz {

using Bytes = std::vector<std::uint8_t>;

// SplitMix64.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  std::size_t below(std::size_t n);  // [0, n); 0 when n == 0
  bool one_in(std::size_t n) { return below(n) == 0; }

 private:
  std::uint64_t state_;
};

// Tokens inserted or substituted by the mutations: a libFuzzer/AFL dictionary (`"text"` or `name="text"` per line,
// \xNN, \n, \\ and \" escapes, # comments) plus built-in numbers that break parsers (-1, 0, 1e308, nan, huge ints,
// the empty string, ...).
struct Dictionary {
  std::vector<std::string> tokens;
  static Dictionary load(const std::string& path);  // throws std::runtime_error naming the line
};
const std::vector<std::string>& interesting_numbers();

// One input: `seed` mutated 1 to 4 times; `recipe` names the mutations ("flip_bit@17 truncate@300").
struct Mutant {
  Bytes bytes;
  std::string recipe;
};
Mutant mutate(const Bytes& seed, const std::vector<Bytes>& others, const Dictionary& dictionary, std::size_t max_size,
              Rng& rng);

}  // namespace hsdp::fuzz
