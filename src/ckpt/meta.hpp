#pragma once
// Internal to hsdp_ckpt: the non-tensor parts of a checkpoint file (/meta, /data, /scaler) and the training state
// travelling from rank 0 to all ranks.
#include <hdf5.h>

#include <string>

#include "hsdp/ckpt/checkpoint.hpp"
#include "hsdp/model/config.hpp"

namespace hsdp::ckpt::meta {

void write(hid_t file, const TrainState& state, const model::GptConfig& config);
// `path` names the file in errors. Throws a checkpoint Error for a missing group or attribute, or a format_version
// this build cannot read.
TrainState read_state(hid_t file, const std::string& path);
model::GptConfig read_model_config(hid_t file, const std::string& path);
// What read_state reads, before its range checks and meta_checksum (the fuzz harness forges checksums with it).
TrainState read_values(hid_t file, const std::string& path);
// The value of meta_checksum for this state and model shape.
std::uint64_t checksum(const TrainState& state, const model::GptConfig& config);
int read_format_version(hid_t file, const std::string& path);

// Rank 0's state on every rank (collective).
TrainState broadcast(MPI_Comm comm, const TrainState& state);

}  // namespace hsdp::ckpt::meta
