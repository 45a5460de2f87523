#include "transfer.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "h5.hpp"
#include "hsdp/core/error.hpp"

namespace hsdp::ckpt::transfer {
namespace {

// Selects the flat row-major range [first, first + count) of a 1-D or 2-D dataset as a union of at most three
// hyperslabs: the tail of the first row, whole rows, the head of the last row.
void select_range(hid_t space, const std::vector<hsize_t>& dims, std::size_t first, std::size_t count,
                  const std::string& path) {
  H5S_seloper_t op = H5S_SELECT_SET;
  const auto add = [&](std::vector<hsize_t> start, std::vector<hsize_t> extent) {
    h5::check_status(H5Sselect_hyperslab(space, op, start.data(), nullptr, extent.data(), nullptr),
                     "selecting part of " + path);
    op = H5S_SELECT_OR;
  };
  if (dims.size() == 1) {
    add({first}, {count});
    return;
  }
  if (dims.size() != 2) throw_internal("checkpoint dataset " + path + " has rank " + std::to_string(dims.size()));
  const hsize_t width = dims[1];
  hsize_t at = first;
  const hsize_t end = first + count;
  if (at % width != 0) {  // tail of the first row
    const hsize_t row_end = std::min(end, (at / width + 1) * width);
    add({at / width, at % width}, {1, row_end - at});
    at = row_end;
  }
  if (end - at >= width) {  // whole rows
    const hsize_t rows = (end - at) / width;
    add({at / width, 0}, {rows, width});
    at += rows * width;
  }
  if (at < end) add({at / width, 0}, {1, end - at});  // head of the last row
}

std::string no_collective_cause(hid_t dxpl) {
  uint32_t local = 0;
  uint32_t global = 0;
  if (H5Pget_mpio_no_collective_cause(dxpl, &local, &global) < 0) return "";
  const uint32_t cause = local | global;
  std::string text;
  const auto add = [&](uint32_t bit, const char* what) {
    if (cause & bit) text += (text.empty() ? "" : ", ") + std::string(what);
  };
  add(H5D_MPIO_SET_INDEPENDENT, "independent transfer requested");
  add(H5D_MPIO_DATATYPE_CONVERSION, "datatype conversion");
  add(H5D_MPIO_DATA_TRANSFORMS, "data transforms");
  add(H5D_MPIO_MPI_OPT_TYPES_ENV_VAR_DISABLED, "MPI derived types disabled");
  add(H5D_MPIO_NOT_SIMPLE_OR_SCALAR_DATASPACES, "dataspace not simple");
  add(H5D_MPIO_NOT_CONTIGUOUS_OR_CHUNKED_DATASET, "dataset layout");
  add(H5D_MPIO_PARALLEL_FILTERED_WRITES_DISABLED, "filters");
  add(H5D_MPIO_ERROR_WHILE_CHECKING_COLLECTIVE_POSSIBLE, "error while checking");
  return text;
}

enum class Direction { write, read };

void per_dataset(Direction direction, std::span<const DatasetPieces> datasets, Stats& stats) {
  h5::Handle dxpl = h5::collective_transfer();
  float placeholder = 0.0f;  // never touched: the buffer of an empty selection
  for (const DatasetPieces& d : datasets) {
    h5::Handle file_space = h5::dataspace(H5Dget_space(d.dataset), "dataspace of " + d.path);
    for (int round = 0; round < d.rounds; ++round) {
      const bool mine = round < static_cast<int>(d.pieces.size());
      const hsize_t count = mine ? d.pieces[round].count : 1;
      h5::Handle memory_space = h5::dataspace(H5Screate_simple(1, &count, nullptr), "memory space");
      float* memory = &placeholder;
      if (mine) {
        select_range(file_space.get(), d.dims, d.pieces[round].first, d.pieces[round].count, d.path);
        memory = d.pieces[round].memory;
      } else {
        h5::check_status(H5Sselect_none(file_space.get()), "empty selection");
        h5::check_status(H5Sselect_none(memory_space.get()), "empty selection");
      }
      if (direction == Direction::write) {
        h5::check_status(
            H5Dwrite(d.dataset, H5T_NATIVE_FLOAT, memory_space.get(), file_space.get(), dxpl.get(), memory),
            "writing " + d.path);
      } else {
        h5::check_status(H5Dread(d.dataset, H5T_NATIVE_FLOAT, memory_space.get(), file_space.get(), dxpl.get(), memory),
                         "reading " + d.path);
      }
      ++stats.collective_calls;
      H5D_mpio_actual_io_mode_t mode = H5D_MPIO_NO_COLLECTIVE;
      if (H5Pget_mpio_actual_io_mode(dxpl.get(), &mode) >= 0 && mode == H5D_MPIO_NO_COLLECTIVE && !stats.fallback) {
        stats.fallback = true;
        stats.cause = d.path + ": " + no_collective_cause(dxpl.get());
      }
    }
  }
}

// MPI datatypes freed on scope exit.
class TypeGuard {
 public:
  ~TypeGuard() {
    for (MPI_Datatype& t : types_) MPI_Type_free(&t);
  }
  MPI_Datatype keep(MPI_Datatype t) {
    types_.push_back(t);
    return t;
  }

 private:
  std::vector<MPI_Datatype> types_;
};

void mpi_check(int code, const std::string& what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(ErrorKind::checkpoint, what + ": " + std::string(text, static_cast<std::size_t>(length)));
}

void single_call(Direction direction, hid_t file, std::span<const DatasetPieces> datasets, Stats& stats) {
  // A block of at most 2^30 floats keeps every length an int.
  constexpr std::size_t kMaxBlock = std::size_t{1} << 30;
  struct Block {
    MPI_Aint file_offset;
    MPI_Aint memory;
    int count;
  };
  std::vector<Block> blocks;
  for (const DatasetPieces& d : datasets) {
    if (d.pieces.empty()) continue;
    const haddr_t base = H5Dget_offset(d.dataset);
    if (base == HADDR_UNDEF) throw Error(ErrorKind::checkpoint, d.path + " has no contiguous storage in the file");
    for (const Piece& p : d.pieces) {
      for (std::size_t done = 0; done < p.count; done += kMaxBlock) {
        const std::size_t n = std::min(kMaxBlock, p.count - done);
        MPI_Aint address = 0;
        MPI_Get_address(p.memory + done, &address);
        blocks.push_back(
            {static_cast<MPI_Aint>(base + (p.first + done) * sizeof(float)), address, static_cast<int>(n)});
      }
    }
  }
  // A file view must list its blocks in increasing offset order.
  std::sort(blocks.begin(), blocks.end(), [](const Block& a, const Block& b) { return a.file_offset < b.file_offset; });

  void* handle = nullptr;
  h5::check_status(H5Fget_vfd_handle(file, H5P_DEFAULT, &handle), "getting the MPI file handle");
  MPI_File fh = *static_cast<MPI_File*>(handle);

  TypeGuard types;
  MPI_Datatype file_type = MPI_BYTE;
  MPI_Datatype memory_type = MPI_BYTE;
  int count = 0;
  if (!blocks.empty()) {
    std::vector<int> lengths(blocks.size());
    std::vector<MPI_Aint> file_offsets(blocks.size());
    std::vector<MPI_Aint> addresses(blocks.size());
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      lengths[i] = blocks[i].count;
      file_offsets[i] = blocks[i].file_offset;
      addresses[i] = blocks[i].memory;
    }
    const int n = static_cast<int>(blocks.size());
    mpi_check(MPI_Type_create_hindexed(n, lengths.data(), file_offsets.data(), MPI_FLOAT, &file_type), "file type");
    types.keep(file_type);
    mpi_check(MPI_Type_commit(&file_type), "file type");
    mpi_check(MPI_Type_create_hindexed(n, lengths.data(), addresses.data(), MPI_FLOAT, &memory_type), "memory type");
    types.keep(memory_type);
    mpi_check(MPI_Type_commit(&memory_type), "memory type");
    count = 1;
  }
  char native[] = "native";
  mpi_check(MPI_File_set_view(fh, 0, MPI_BYTE, file_type, native, MPI_INFO_NULL), "setting the file view");
  MPI_Status status;
  void* buffer = blocks.empty() ? nullptr : MPI_BOTTOM;
  // Writes are collective (the MPI library may aggregate them); reads are independent: each rank's pieces are few
  // large byte ranges, and Open MPI's two-phase collective read measured 3x slower than independent reads
  // (tools/bench/ckpt.sh). MPI_File_set_view stays collective either way.
  const int code = direction == Direction::write ? MPI_File_write_at_all(fh, 0, buffer, count, memory_type, &status)
                                                 : MPI_File_read_at(fh, 0, buffer, count, memory_type, &status);
  // HDF5's mpio driver expects the byte view it set at open.
  mpi_check(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, native, MPI_INFO_NULL), "restoring the file view");
  mpi_check(code, direction == Direction::write ? "MPI_File_write_at_all" : "MPI_File_read_at");
  if (count > 0) {
    int got = 0;
    MPI_Get_count(&status, memory_type, &got);
    if (got != 1) {
      throw Error(ErrorKind::checkpoint, direction == Direction::read
                                             ? "short read: the file ends before its datasets do"
                                             : "short write: the file system took only part of the data (full?)");
    }
  }
  ++stats.collective_calls;
}

}  // namespace

bool stored_as_written(std::span<const DatasetPieces> datasets) {
  for (const DatasetPieces& d : datasets) {
    if (H5Dget_offset(d.dataset) == HADDR_UNDEF) return false;
    const h5::Handle type(H5Dget_type(d.dataset), H5Tclose);
    if (type.get() < 0 || H5Tequal(type.get(), H5T_IEEE_F32LE) <= 0) return false;
  }
  return true;
}

void read_independent(std::span<const DatasetPieces> datasets) {
  h5::Handle dxpl = h5::plist(H5Pcreate(H5P_DATASET_XFER), "creating a transfer property list");
  h5::check_status(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_INDEPENDENT), "independent transfers");
  for (const DatasetPieces& d : datasets) {
    h5::Handle file_space = h5::dataspace(H5Dget_space(d.dataset), "dataspace of " + d.path);
    for (const Piece& piece : d.pieces) {
      const hsize_t count = piece.count;
      h5::Handle memory_space = h5::dataspace(H5Screate_simple(1, &count, nullptr), "memory space");
      select_range(file_space.get(), d.dims, piece.first, piece.count, d.path);
      if (H5Dread(d.dataset, H5T_NATIVE_FLOAT, memory_space.get(), file_space.get(), dxpl.get(), piece.memory) < 0) {
        const std::string detail = h5::last_error();
        H5Eclear2(H5E_DEFAULT);
        throw Error(ErrorKind::checkpoint, "reading " + d.path + " failed" + (detail.empty() ? "" : ": " + detail));
      }
    }
  }
}

void agree_rounds(MPI_Comm comm, std::vector<DatasetPieces>& datasets) {
  std::vector<int> counts(datasets.size());
  for (std::size_t i = 0; i < datasets.size(); ++i) counts[i] = static_cast<int>(datasets[i].pieces.size());
  MPI_Allreduce(MPI_IN_PLACE, counts.data(), static_cast<int>(counts.size()), MPI_INT, MPI_MAX, comm);
  for (std::size_t i = 0; i < datasets.size(); ++i) datasets[i].rounds = counts[i];
}

void write_per_dataset(std::span<const DatasetPieces> datasets, Stats& stats) {
  per_dataset(Direction::write, datasets, stats);
}
void read_per_dataset(std::span<const DatasetPieces> datasets, Stats& stats) {
  per_dataset(Direction::read, datasets, stats);
}
void write_single_call(hid_t file, std::span<const DatasetPieces> datasets, Stats& stats) {
  single_call(Direction::write, file, datasets, stats);
}
void read_single_call(hid_t file, std::span<const DatasetPieces> datasets, Stats& stats) {
  single_call(Direction::read, file, datasets, stats);
}

}  // namespace hsdp::ckpt::transfer
