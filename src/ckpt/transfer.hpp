#pragma once
// Internal to hsdp_ckpt: moving pieces of datasets between rank memory and the file, collectively.
//   per_dataset: per dataset, `rounds` collective H5Dwrite/H5Dread calls (a rank with fewer pieces takes part with
//                an empty selection), each with a hyperslab selection of one piece.
//   single_call: every piece of every dataset in one MPI_File_write_at_all (collective) / MPI_File_read_at
//                (independent, after a collective MPI_File_set_view) per rank, on the MPI file
//                handle of HDF5's mpio driver, through a file view listing the pieces' byte ranges (datasets are
//                contiguous and allocated at creation, so a piece is one byte range of the file).
#include <hdf5.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace hsdp::ckpt::transfer {

struct Piece {
  std::size_t first = 0;  // dataset element index (row-major)
  std::size_t count = 0;
  float* memory = nullptr;
};

struct DatasetPieces {
  hid_t dataset = H5I_INVALID_HID;
  std::string path;  // for messages
  std::vector<hsize_t> dims;
  std::vector<Piece> pieces;  // this rank's
  int rounds = 0;             // max pieces over all ranks (per_dataset mode)
};

struct Stats {
  int collective_calls = 0;
  bool fallback = false;  // this rank saw a transfer HDF5 did not do collectively
  std::string cause;
};

// Fills `rounds` of every entry with the maximum piece count over `comm` (one allreduce).
void agree_rounds(MPI_Comm comm, std::vector<DatasetPieces>& datasets);

// per_dataset mode: `rounds` collective calls per dataset.
void write_per_dataset(std::span<const DatasetPieces> datasets, Stats& stats);
void read_per_dataset(std::span<const DatasetPieces> datasets, Stats& stats);

// Whether every dataset is stored as hsdp writes it: contiguous, allocated, little-endian fp32 (single_call reads
// byte ranges). A file rewritten by h5repack or h5py (chunked, compressed, another float type) is not. Local.
bool stored_as_written(std::span<const DatasetPieces> datasets);
// Reads this rank's pieces through HDF5 with independent transfers (any layout, filter or float type; slower).
// Local: no collective inside, so a failure can be agreed on afterwards.
void read_independent(std::span<const DatasetPieces> datasets);

// single_call mode. `file` is the HDF5 file (its fapl must use the mpio driver).
void write_single_call(hid_t file, std::span<const DatasetPieces> datasets, Stats& stats);
void read_single_call(hid_t file, std::span<const DatasetPieces> datasets, Stats& stats);

}  // namespace hsdp::ckpt::transfer
