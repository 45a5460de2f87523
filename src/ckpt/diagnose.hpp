#pragma once
// Internal to hsdp_ckpt: why a checkpoint file does not open, in words a user can act on.
#include <string>
#include <vector>

namespace hsdp::ckpt {

// Called after H5Fopen failed on `path` (with HDF5's message `hdf5_message`). Says whether the file is missing,
// not HDF5, or truncated; for a truncated file, names the first of `datasets` (full paths) whose data lies beyond
// the end of the file, found by opening a zero-extended image of the file. Single process, no MPI.
std::string describe_open_failure(const std::string& path, const std::vector<std::string>& datasets,
                                  const std::string& hdf5_message);

}  // namespace hsdp::ckpt
