#pragma once
// Internal to hsdp_ckpt: which elements of which dataset a rank moves, from the shard ranges of all ranks.
//
// A unit's flat buffer packs its parameters back to back; parameter p occupies [p.offset, p.offset + p.numel) and
// its dataset holds the first p.logical_numel() of those elements (wte's padded rows are the tail it drops). The
// intersection of a shard range with that logical extent is a "piece": a contiguous run of the dataset in
// row-major order, i.e. a contiguous byte range of the (contiguous) dataset in the file.
#include <mpi.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "hsdp/ckpt/checkpoint.hpp"
#include "hsdp/model/layout.hpp"

namespace hsdp::ckpt::plan {

enum class Tensor { params = 0, exp_avg = 1, exp_avg_sq = 2 };
inline constexpr Tensor kTensors[] = {Tensor::params, Tensor::exp_avg, Tensor::exp_avg_sq};
// The tensors of a state set: its first set.count().
inline std::span<const Tensor> tensors_of(const StateSet& set) {
  return std::span<const Tensor>(kTensors).first(set.count());
}
// Datasets of `sets` before set number `index` (each set: its tensors times the model's parameters).
std::size_t first_dataset(std::span<const StateSet> sets, std::size_t index, std::size_t param_count);

// "/model/<name>", "/optim/exp_avg/<name>", "/optim/exp_avg_sq/<name>"
std::string dataset_path(Tensor tensor, const std::string& param_name);
// "<group>/<tensors[t]>/<name>" of a state set (checkpoint.hpp).
std::string dataset_path(const StateSet& set, Tensor tensor, const std::string& param_name);
// Every dataset of a checkpoint of `layout`: tensor-major (model, exp_avg, exp_avg_sq), then parameter order; with
// islands > 1, then every further state set's (all_state_sets) in the same order.
std::vector<std::string> dataset_paths(const model::ModelLayout& layout, int islands = 1, bool in_flight = false);
float* tensor_data(const UnitShard& shard, Tensor tensor);

// A range of a unit's flat buffer held by some rank (shard: index into that rank's shard list).
struct RankRange {
  int rank = 0;
  std::size_t shard = 0;
  int unit = 0;
  std::size_t begin = 0;
  std::size_t count = 0;
};

// Part of one parameter's dataset: `count` elements from dataset index `first`, found in this rank's shard
// `shard` at `shard_offset` (or, for a gap, read into scratch memory: shard == kNoShard).
struct Piece {
  static constexpr std::size_t kNoShard = static_cast<std::size_t>(-1);
  std::size_t param = 0;
  std::size_t first = 0;
  std::size_t count = 0;
  std::size_t shard = kNoShard;
  std::size_t shard_offset = 0;
};

// Throws an internal Error when a shard names no unit, reaches past its unit, or lacks a buffer of the set's tensors.
void validate_shards(const model::ModelLayout& layout, const StateSet& set);

// Every rank's ranges (only those of ranks with `contribute`), in (rank, shard) order. Collective.
std::vector<RankRange> allgather_ranges(MPI_Comm comm, std::span<const UnitShard> shards, bool contribute);

// Throws an internal Error unless the writers' ranges are disjoint and cover every parameter's logical extent.
void check_writer_coverage(const model::ModelLayout& layout, const std::vector<RankRange>& writers);

// The pieces of this rank's shards, for every parameter (indexed by parameter).
std::vector<std::vector<Piece>> shard_pieces(const model::ModelLayout& layout, std::span<const UnitShard> shards);

// For a load where ranges may repeat across ranks: the pieces whose checksum terms this rank adds (the parts of its
// shards that no lower (rank, shard) holds), and the parts of datasets nobody holds that this rank reads into
// scratch memory for verification (gaps, spread round-robin over ranks). Both indexed by parameter.
struct Ownership {
  std::vector<std::vector<Piece>> owned;
  std::vector<std::vector<Piece>> gaps;
};
Ownership ownership(const model::ModelLayout& layout, const std::vector<RankRange>& all, int rank, int size);

}  // namespace hsdp::ckpt::plan
