#include "plan.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <tuple>

#include "hsdp/core/error.hpp"

namespace hsdp::ckpt::plan {
namespace {

struct Segment {
  int unit;
  std::size_t begin;
  std::size_t count;
  std::size_t shard;  // Piece::kNoShard for a gap
};

// Splits unit segments at parameter boundaries, keeping only the parameters' logical extents.
void add_pieces(const model::ModelLayout& layout, const Segment& s, std::size_t shard_begin,
                std::vector<std::vector<Piece>>& out) {
  const std::size_t end = s.begin + s.count;
  for (const model::ParamInfo* p : layout.unit_params(s.unit)) {
    const std::size_t lo = std::max(s.begin, p->offset);
    const std::size_t hi = std::min(end, p->offset + p->logical_numel());
    if (lo >= hi) continue;
    const std::size_t index = static_cast<std::size_t>(p - layout.params().data());
    out[index].push_back({index, lo - p->offset, hi - lo, s.shard, s.shard == Piece::kNoShard ? 0 : lo - shard_begin});
  }
}

}  // namespace

std::string dataset_path(Tensor tensor, const std::string& param_name) {
  switch (tensor) {
    case Tensor::params:
      return "/model/" + param_name;
    case Tensor::exp_avg:
      return "/optim/exp_avg/" + param_name;
    case Tensor::exp_avg_sq:
      return "/optim/exp_avg_sq/" + param_name;
  }
  return {};
}

std::string dataset_path(const StateSet& set, Tensor tensor, const std::string& param_name) {
  return set.group + "/" + set.tensors[static_cast<std::size_t>(tensor)] + "/" + param_name;
}

std::size_t first_dataset(std::span<const StateSet> sets, std::size_t index, std::size_t param_count) {
  std::size_t first = 0;
  for (std::size_t s = 0; s < index; ++s) first += sets[s].count() * param_count;
  return first;
}

std::vector<std::string> dataset_paths(const model::ModelLayout& layout, int islands, bool in_flight) {
  std::vector<std::string> paths;
  for (const StateSet& set : all_state_sets(islands, in_flight)) {
    for (const Tensor t : tensors_of(set)) {
      for (const model::ParamInfo& p : layout.params()) paths.push_back(dataset_path(set, t, p.name));
    }
  }
  return paths;
}

float* tensor_data(const UnitShard& shard, Tensor tensor) {
  switch (tensor) {
    case Tensor::params:
      return shard.params;
    case Tensor::exp_avg:
      return shard.exp_avg;
    case Tensor::exp_avg_sq:
      return shard.exp_avg_sq;
  }
  return nullptr;
}

void validate_shards(const model::ModelLayout& layout, const StateSet& set) {
  const std::span<const UnitShard> shards = set.shards;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const UnitShard& s = shards[i];
    const std::string which = "checkpoint shard " + std::to_string(i) + " (unit " + std::to_string(s.unit) + ")";
    if (s.unit < 0 || s.unit >= layout.num_units()) throw_internal(which + " names no unit of the model");
    const std::size_t numel = layout.unit(s.unit).numel;
    if (s.begin > numel || s.count > numel - s.begin) {
      throw_internal(which + ": range [" + std::to_string(s.begin) + ", " + std::to_string(s.begin + s.count) +
                     ") reaches past the unit's " + std::to_string(numel) + " elements");
    }
    for (const Tensor t : tensors_of(set)) {
      if (s.count > 0 && tensor_data(s, t) == nullptr) {
        throw_internal(which + " lacks a buffer of " + set.tensors[static_cast<std::size_t>(t)]);
      }
    }
  }
}

std::vector<RankRange> allgather_ranges(MPI_Comm comm, std::span<const UnitShard> shards, bool contribute) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  std::vector<std::uint64_t> mine;
  if (contribute) {
    for (const UnitShard& s : shards) {
      mine.insert(mine.end(), {static_cast<std::uint64_t>(s.unit), s.begin, s.count});
    }
  }
  const int my_count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(size));
  MPI_Allgather(&my_count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
  std::vector<int> displs(static_cast<std::size_t>(size), 0);
  for (int r = 1; r < size; ++r) displs[r] = displs[r - 1] + counts[r - 1];
  std::vector<std::uint64_t> all(static_cast<std::size_t>(displs.back() + counts.back()));
  MPI_Allgatherv(mine.data(), my_count, MPI_UINT64_T, all.data(), counts.data(), displs.data(), MPI_UINT64_T, comm);

  std::vector<RankRange> ranges;
  for (int r = 0; r < size; ++r) {
    for (int k = 0; k < counts[r] / 3; ++k) {
      const std::size_t at = static_cast<std::size_t>(displs[r] + 3 * k);
      ranges.push_back({r, static_cast<std::size_t>(k), static_cast<int>(all[at]), all[at + 1], all[at + 2]});
    }
  }
  return ranges;
}

void check_writer_coverage(const model::ModelLayout& layout, const std::vector<RankRange>& writers) {
  for (int u = 0; u < layout.num_units(); ++u) {
    std::vector<RankRange> mine;
    for (const RankRange& r : writers) {
      if (r.unit == u && r.count > 0) mine.push_back(r);
    }
    std::sort(mine.begin(), mine.end(), [](const RankRange& a, const RankRange& b) { return a.begin < b.begin; });
    for (std::size_t i = 1; i < mine.size(); ++i) {
      if (mine[i].begin < mine[i - 1].begin + mine[i - 1].count) {
        throw_internal("checkpoint writers overlap in unit " + layout.unit(u).name + ": ranks " +
                       std::to_string(mine[i - 1].rank) + " and " + std::to_string(mine[i].rank) +
                       " both write element " + std::to_string(mine[i].begin));
      }
    }
    for (const model::ParamInfo* p : layout.unit_params(u)) {
      std::size_t covered = 0;
      for (const RankRange& r : mine) {
        const std::size_t lo = std::max(r.begin, p->offset);
        const std::size_t hi = std::min(r.begin + r.count, p->offset + p->logical_numel());
        if (lo < hi) covered += hi - lo;
      }
      if (covered != p->logical_numel()) {
        throw_internal("checkpoint writers cover " + std::to_string(covered) + " of the " +
                       std::to_string(p->logical_numel()) + " elements of " + p->name +
                       " (exactly one replica of every shard must be a writer)");
      }
    }
  }
}

std::vector<std::vector<Piece>> shard_pieces(const model::ModelLayout& layout, std::span<const UnitShard> shards) {
  std::vector<std::vector<Piece>> pieces(layout.params().size());
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const UnitShard& s = shards[i];
    if (s.count > 0) add_pieces(layout, {s.unit, s.begin, s.count, i}, s.begin, pieces);
  }
  return pieces;
}

Ownership ownership(const model::ModelLayout& layout, const std::vector<RankRange>& all, int rank, int size) {
  Ownership result;
  result.owned.resize(layout.params().size());
  result.gaps.resize(layout.params().size());
  std::size_t gap_index = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    std::vector<const RankRange*> ranges;
    std::vector<std::size_t> cuts = {0, layout.unit(u).numel};
    for (const RankRange& r : all) {
      if (r.unit != u || r.count == 0) continue;
      ranges.push_back(&r);
      cuts.push_back(r.begin);
      cuts.push_back(r.begin + r.count);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    // Elementary segments between cuts: each is held entirely by a range or not at all; the owner is the lowest
    // (rank, shard) holding it (`all` is in that order).
    for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
      const std::size_t lo = cuts[c];
      const std::size_t hi = cuts[c + 1];
      const RankRange* owner = nullptr;
      for (const RankRange* r : ranges) {
        if (r->begin <= lo && r->begin + r->count >= hi) {
          owner = r;
          break;
        }
      }
      if (owner != nullptr) {
        if (owner->rank == rank) add_pieces(layout, {u, lo, hi - lo, owner->shard}, owner->begin, result.owned);
      } else {
        if (static_cast<int>(gap_index++ % static_cast<std::size_t>(size)) == rank) {
          add_pieces(layout, {u, lo, hi - lo, Piece::kNoShard}, 0, result.gaps);
        }
      }
    }
  }
  return result;
}

}  // namespace hsdp::ckpt::plan

namespace hsdp::ckpt {

StateSet model_state(std::span<const UnitShard> shards, bool writer) {
  return {.group = "", .shards = shards, .writer = writer};
}

std::string island_group(int island) {
  return island == 0 ? "" : "/islands/" + std::to_string(island);
}

StateSet island_state(int island, std::span<const UnitShard> shards, bool writer) {
  return {.group = island_group(island), .shards = shards, .writer = writer};
}

StateSet outer_state(int island, std::span<const UnitShard> shards, bool writer) {
  return {.group = island_group(island) + "/outer",
          .tensors = {"params", "momentum", "error_feedback"},
          .shards = shards,
          .writer = writer};
}

StateSet outer_flight_state(int island, std::span<const UnitShard> shards, bool writer) {
  return {.group = island_group(island) + "/outer",
          .tensors = {"in_flight_shift", "", ""},
          .shards = shards,
          .writer = writer};
}

std::vector<StateSet> all_state_sets(int islands, bool in_flight) {
  std::vector<StateSet> sets;
  for (int i = 0; i < islands; ++i) sets.push_back(island_state(i, {}, false));
  if (islands > 1) {
    for (int i = 0; i < islands; ++i) sets.push_back(outer_state(i, {}, false));
    if (in_flight) {
      for (int i = 0; i < islands; ++i) sets.push_back(outer_flight_state(i, {}, false));
    }
  }
  return sets;
}

std::vector<StateSet> all_state_sets(const TrainState& state) {
  return all_state_sets(state.islands, state.outer_in_flight >= 0);
}

}  // namespace hsdp::ckpt
