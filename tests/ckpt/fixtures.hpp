#pragma once
// What the checkpoint tests share: a tiny GPT shape, deterministic per-element values, and the ways a sharding
// engine can split units over ranks (disjoint ranges, replicas of ranges, whole replicas, ...).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hsdp/ckpt/checkpoint.hpp"
#include "hsdp/core/buffer.hpp"
#include "hsdp/model/layout.hpp"

namespace hsdp::ckpt::testing {

// Small enough that a save or load takes milliseconds; wte padded (50 -> 64 rows) so padding is exercised.
inline model::GptConfig tiny_config() {
  model::GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 8;
  c.vocab_size = 50;
  c.padded_vocab_size = 64;
  return c;
}

// The value of element i of unit u of tensor t (0 params, 1 m, 2 v) at `step`: finite, all bits exercised.
inline float value_at(int tensor, int unit, std::size_t i, std::int64_t step) {
  std::uint64_t z = (static_cast<std::uint64_t>(step) << 48) ^ (static_cast<std::uint64_t>(tensor) << 40) ^
                    (static_cast<std::uint64_t>(unit) << 32) ^ i;
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float unit_interval = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1), 24 bits
  return tensor == 2 ? unit_interval * 1e-3f : 4.0f * unit_interval - 2.0f;        // v >= 0, like Adam's
}

enum class Split {
  disjoint,     // FULL_SHARD: each unit in `world` ranges of unequal size, one per rank
  replicas,     // HYBRID_SHARD over 2 "nodes": 2 ranges per unit, repeated; ranks 0 and 1 write
  whole,        // NO_SHARD: every rank holds every unit; rank 0 writes
  unit_owner,   // unit u whole on rank u % world (other ranks hold nothing of it)
  interleaved,  // two ranges per unit per rank: ranges r and r + world of a 2*world split
};

inline const char* split_name(Split s) {
  switch (s) {
    case Split::disjoint:
      return "disjoint";
    case Split::replicas:
      return "replicas";
    case Split::whole:
      return "whole";
    case Split::unit_owner:
      return "unit_owner";
    case Split::interleaved:
      return "interleaved";
  }
  return "?";
}

struct Range {
  int unit;
  std::size_t begin;
  std::size_t count;
};

// Boundaries of an uneven n-way split of [0, numel) that cuts through parameters.
inline std::size_t boundary(std::size_t numel, int k, int n) {
  if (k <= 0) return 0;
  if (k >= n) return numel;
  const std::size_t even = numel * static_cast<std::size_t>(k) / static_cast<std::size_t>(n);
  return std::min(numel, even + 7 * static_cast<std::size_t>(k));
}

inline std::vector<Range> ranges_for(Split split, const model::ModelLayout& layout, int rank, int world) {
  std::vector<Range> out;
  for (int u = 0; u < layout.num_units(); ++u) {
    const std::size_t n = layout.unit(u).numel;
    const auto piece = [&](int k, int of) {
      out.push_back({u, boundary(n, k, of), boundary(n, k + 1, of) - boundary(n, k, of)});
    };
    switch (split) {
      case Split::disjoint:
        piece(rank, world);
        break;
      case Split::replicas:
        world % 2 == 0 ? piece(rank % 2, 2) : piece(rank, world);
        break;
      case Split::whole:
        piece(0, 1);
        break;
      case Split::unit_owner:
        if (u % world == rank) piece(0, 1);
        break;
      case Split::interleaved:
        piece(rank, 2 * world);
        piece(rank + world, 2 * world);
        break;
    }
  }
  return out;
}

inline bool writer_for(Split split, int rank, int world) {
  switch (split) {
    case Split::replicas:
      return world % 2 != 0 || rank < 2;
    case Split::whole:
      return rank == 0;
    default:
      return true;
  }
}

// One rank's shard buffers for a list of ranges.
struct RankShards {
  std::vector<Range> ranges;
  std::vector<Buffer<float>> params, exp_avg, exp_avg_sq;
  std::vector<UnitShard> shards;

  explicit RankShards(std::vector<Range> r) : ranges(std::move(r)) {
    for (const Range& range : ranges) {
      params.emplace_back(range.count);
      exp_avg.emplace_back(range.count);
      exp_avg_sq.emplace_back(range.count);
    }
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      shards.push_back({ranges[i].unit, ranges[i].begin, ranges[i].count, params[i].data(), exp_avg[i].data(),
                        exp_avg_sq[i].data()});
    }
  }
  // Every element (padding included) gets its value for `step`.
  void fill(std::int64_t step) {
    for (std::size_t s = 0; s < ranges.size(); ++s) {
      for (std::size_t k = 0; k < ranges[s].count; ++k) {
        const std::size_t i = ranges[s].begin + k;
        params[s][k] = value_at(0, ranges[s].unit, i, step);
        exp_avg[s][k] = value_at(1, ranges[s].unit, i, step);
        exp_avg_sq[s][k] = value_at(2, ranges[s].unit, i, step);
      }
    }
  }
  void poison() {
    for (std::size_t s = 0; s < ranges.size(); ++s) {
      for (auto* b : {&params[s], &exp_avg[s], &exp_avg_sq[s]}) std::memset(b->data(), 0x7f, b->size_bytes());
    }
  }
  // The number of elements that differ (bit for bit) from the values for `step`; unsaved elements (wte's padded
  // rows) must be exactly +0.0.
  std::size_t mismatches(const model::ModelLayout& layout, std::int64_t step) const {
    std::size_t bad = 0;
    const model::ParamInfo& wte = layout.param("transformer.wte.weight");
    for (std::size_t s = 0; s < ranges.size(); ++s) {
      for (std::size_t k = 0; k < ranges[s].count; ++k) {
        const std::size_t i = ranges[s].begin + k;
        const bool padding =
            ranges[s].unit == wte.unit && i >= wte.offset + wte.logical_numel() && i < wte.offset + wte.numel;
        const Buffer<float>* b[3] = {&params[s], &exp_avg[s], &exp_avg_sq[s]};
        for (int t = 0; t < 3; ++t) {
          const float want = padding ? 0.0f : value_at(t, ranges[s].unit, i, step);
          bad += std::bit_cast<std::uint32_t>((*b[t])[k]) != std::bit_cast<std::uint32_t>(want);
        }
      }
    }
    return bad;
  }
};

inline TrainState state_for(std::int64_t step, int world) {
  TrainState s;
  s.step = step;
  s.tokens = step * 4096 + 17;
  s.sampler = {static_cast<std::uint64_t>(step / 3), static_cast<std::uint64_t>(step * 11)};
  s.scaler = {1024.0f, step, 2};
  s.deck_text = "[model]\nn_layer = 2\n# a deck with \"quotes\", tabs\tand UTF-8: \xc3\xa9\n";
  s.strategy = "full_shard";
  s.world_size = world;
  s.nodes = std::min(2, world);  // a node holds at least one rank
  s.mesh = std::to_string(s.nodes) + "x" + std::to_string((world + s.nodes - 1) / s.nodes);
  return s;
}

}  // namespace hsdp::ckpt::testing
