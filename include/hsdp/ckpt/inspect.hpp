#pragma once
// Whole-checkpoint access from one process, for hsdp-ckpt and tests: what a file holds, its complete contents,
// and where a dataset's bytes lie. A checkpoint describes its own model (/meta n_layer, n_head, ...).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hsdp/ckpt/checkpoint.hpp"
#include "hsdp/core/buffer.hpp"
#include "hsdp/model/config.hpp"

namespace hsdp::ckpt {

struct DatasetInfo {
  std::string path;  // e.g. "/model/transformer.wte.weight"
  std::vector<std::int64_t> shape;
  std::uint64_t file_offset = 0;  // of its contiguous data
  std::uint64_t bytes = 0;
  std::optional<std::uint64_t> checksum;
};

struct CheckpointInfo {
  std::string path;
  std::uint64_t file_bytes = 0;
  int format_version = 0;
  std::string hsdp_version;
  model::GptConfig config;
  TrainState state;
  std::vector<DatasetInfo> datasets;  // every dataset in the file, in file order
};

// Metadata only (no tensor data is read). Throws a checkpoint Error naming the file if it is not a checkpoint.
CheckpointInfo inspect_checkpoint(const std::string& path);

// The model shape a checkpoint was written for (its /meta attributes).
model::GptConfig checkpoint_model_config(const std::string& path);

// A checkpoint's complete contents in this process: one flat buffer per unit, as the engine stores them (wte's
// padded rows zero). Read with load_checkpoint on MPI_COMM_SELF (MPI must be initialized), so every dataset and
// checksum is verified on the way.
struct FullCheckpoint {
  model::GptConfig config;
  TrainState state;
  std::vector<Buffer<float>> params;
  std::vector<Buffer<float>> exp_avg;
  std::vector<Buffer<float>> exp_avg_sq;

  // One shard per unit covering it whole (for save_checkpoint / write_checkpoint_file on one rank).
  std::vector<UnitShard> whole_units();
};
FullCheckpoint read_full_checkpoint(const std::string& path);
// Reads the state sets of a checkpoint of islands beyond the run's (read_full_checkpoint reads that one): every
// further island's, every outer state and the in-flight shifts, one at a time on MPI_COMM_SELF, verifying shapes
// and checksums; returns the datasets verified.
std::size_t verify_island_sets(const std::string& path, const TrainState& state);
// Buffers for `config` (zeroed), e.g. to import a model.
FullCheckpoint empty_checkpoint(const model::GptConfig& config);

// Byte offset and size of one dataset's contiguous data in the file (for tests that damage a file on purpose).
DatasetInfo dataset_location(const std::string& path, const std::string& dataset);

}  // namespace hsdp::ckpt
