#pragma once
// A deterministic random stream, identical on every compiler and standard library: xoshiro256** seeded
// through splitmix64, normals by Box-Muller. (std::normal_distribution is not used: its output differs
// between standard libraries.) Each parameter gets its own stream keyed by (seed, name), so its values
// do not depend on which unit or rank initialises it.
#include <cstdint>
#include <string_view>

namespace hsdp::model {

class Rng {
 public:
  explicit Rng(std::uint64_t seed);
  std::uint64_t next_u64();
  double uniform();  // [0, 1) with 53 random bits
  double normal();   // N(0, 1)

 private:
  std::uint64_t state_[4];
  double spare_normal_ = 0.0;
  bool has_spare_ = false;
};

// The seed of the stream named `name` (FNV-1a of the name, mixed with `seed` by splitmix64).
std::uint64_t stream_seed(std::uint64_t seed, std::string_view name);

}  // namespace hsdp::model
