// save_checkpoint and write_checkpoint_file: the collective write and the commit protocol (see checkpoint.hpp).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "hsdp/comm/agree.hpp"
#include "h5.hpp"
#include "hsdp/ckpt/checkpoint.hpp"
#include "hsdp/ckpt/checksum.hpp"
#include "hsdp/ckpt/commit.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/fault.hpp"
#include "hsdp/core/stall.hpp"
#include "hsdp/core/timer.hpp"
#include "meta.hpp"
#include "plan.hpp"
#include "transfer.hpp"

namespace hsdp::ckpt {
namespace fs = std::filesystem;
namespace {

double pause_seconds(const SaveOptions& options) {
  if (const char* env = std::getenv("HSDP_CKPT_PAUSE_IN_WRITE"); env != nullptr && *env != '\0') {
    return std::strtod(env, nullptr);
  }
  return options.pause_for_test_s;
}

std::string parent_dir(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

// This rank's pieces of every parameter, per state set (none where it does not write the set).
using SetPieces = std::vector<std::vector<std::vector<plan::Piece>>>;

// Checksums of every dataset (set-major, then tensor, then parameter), summed over the writers' pieces. Collective.
std::vector<std::uint64_t> dataset_checksums(MPI_Comm world, const model::ModelLayout& layout,
                                             std::span<const StateSet> sets, const SetPieces& pieces) {
  const std::size_t count = layout.params().size();
  std::vector<std::uint64_t> sums(plan::first_dataset(sets, sets.size(), count), 0);
  for (std::size_t s = 0; s < sets.size(); ++s) {
    const std::size_t first = plan::first_dataset(sets, s, count);
    for (const plan::Tensor t : plan::tensors_of(sets[s])) {
      for (std::size_t p = 0; p < count; ++p) {
        for (const plan::Piece& piece : pieces[s][p]) {
          const float* data = plan::tensor_data(sets[s].shards[piece.shard], t) + piece.shard_offset;
          sums[first + static_cast<std::size_t>(t) * count + p] += checksum_range({data, piece.count}, piece.first);
        }
      }
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_UINT64_T, MPI_SUM, world);
  return sums;
}

h5::Handle dataset_creation() {
  h5::Handle dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE), "creating a dataset property list");
  h5::check_status(H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS), "contiguous layout");
  h5::check_status(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), "early allocation");
  h5::check_status(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "no fill values");
  return dcpl;
}

void sleep_for(double seconds) {
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

// The tensor datasets of a checkpoint being written, with this rank's pieces of each.
struct Datasets {
  std::vector<h5::Handle> handles;
  std::vector<transfer::DatasetPieces> pieces;  // tensor-major, then parameter (as `handles`)
  std::uint64_t tensor_bytes = 0;
};

// Creates every dataset (contiguous, allocated, never filled) with its checksum before any data moves. Collective.
Datasets create_datasets(hid_t file, const std::string& tmp, const model::ModelLayout& layout,
                         std::span<const StateSet> sets, const SetPieces& pieces,
                         const std::vector<std::uint64_t>& checksums) {
  h5::Handle dcpl = dataset_creation();
  // The groups on a dataset's path ("/model", "/islands/1/outer/momentum") are made as they are needed.
  h5::Handle lcpl = h5::plist(H5Pcreate(H5P_LINK_CREATE), "creating a link property list");
  h5::check_status(H5Pset_create_intermediate_group(lcpl.get(), 1), "intermediate groups");
  const std::size_t param_count = layout.params().size();
  Datasets out;
  out.handles.reserve(checksums.size());
  out.pieces.reserve(checksums.size());
  for (std::size_t s = 0; s < sets.size(); ++s) {
    const std::size_t first = plan::first_dataset(sets, s, param_count);
    for (const plan::Tensor t : plan::tensors_of(sets[s])) {
      for (std::size_t p = 0; p < param_count; ++p) {
        const model::ParamInfo& info = layout.params()[p];
        transfer::DatasetPieces d;
        d.path = plan::dataset_path(sets[s], t, info.name);
        d.dims.assign(info.logical_shape.begin(), info.logical_shape.end());
        h5::Handle space = h5::dataspace(H5Screate_simple(static_cast<int>(d.dims.size()), d.dims.data(), nullptr),
                                         "dataspace of " + d.path);
        out.handles.push_back(h5::dataset(
            H5Dcreate2(file, d.path.c_str(), H5T_IEEE_F32LE, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
            "creating " + d.path + " in '" + tmp + "'"));
        h5::write_attribute(out.handles.back().get(), "checksum",
                            checksums[first + static_cast<std::size_t>(t) * param_count + p]);
        d.dataset = out.handles.back().get();
        for (const plan::Piece& piece : pieces[s][p]) {
          d.pieces.push_back(
              {piece.first, piece.count, plan::tensor_data(sets[s].shards[piece.shard], t) + piece.shard_offset});
        }
        out.tensor_bytes += info.logical_numel() * sizeof(float);
        out.pieces.push_back(std::move(d));
      }
    }
  }
  return out;
}

// Moves the data: the model tensors first, then (after the test pause, if any) the optimizer state. Collective.
void write_data(MPI_Comm world, hid_t file, std::vector<transfer::DatasetPieces>& datasets, std::size_t param_count,
                const SaveOptions& options, transfer::Stats& stats) {
  const double pause = pause_seconds(options);
  const std::span<const transfer::DatasetPieces> all(datasets);
  const std::span<const transfer::DatasetPieces> model_part = all.first(param_count);
  const std::span<const transfer::DatasetPieces> optim_part = all.subspan(param_count);
  if (options.io == IoMode::per_dataset) {
    transfer::agree_rounds(world, datasets);
    transfer::write_per_dataset(model_part, stats);
    sleep_for(pause);
    transfer::write_per_dataset(optim_part, stats);
  } else if (pause > 0) {
    transfer::write_single_call(file, model_part, stats);
    sleep_for(pause);
    transfer::write_single_call(file, optim_part, stats);
  } else {
    transfer::write_single_call(file, all, stats);
  }
}

// Reserves the blocks of the file's first `bytes` (its size as seen stays what it is), so that no later write of its
// data or metadata can find the disk full: a metadata write that fails in parallel HDF5 fails on rank 0 alone while
// the others wait in its flush. Where the file system cannot reserve (EOPNOTSUPP; HSDP_CKPT_RESERVE=0 in tests), see
// abandon.
// Returns whether it reserved them.
bool reserve_blocks(const std::string& path, const std::string& tmp, std::uint64_t bytes) {
  if (const char* env = std::getenv("HSDP_CKPT_RESERVE"); env != nullptr && std::string(env) == "0") return false;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw Error(ErrorKind::checkpoint, "cannot open '" + tmp + "': " + std::strerror(errno));
  const int reserved = ::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(bytes));
  const int err = errno;
  ::close(fd);
  if (reserved != 0 && err != EOPNOTSUPP && err != ENOSYS) {
    throw Error(ErrorKind::checkpoint, "cannot write '" + path + "': reserving its " + std::to_string(bytes >> 20) +
                                           " MiB failed: " + std::strerror(err));
  }
  return reserved == 0;
}

// Where the blocks were not reserved: reads back what this rank wrote and checks it against the checksums of
// memory. Open MPI 4.1's collective write returned success on every rank for data a full file system had refused
// (4 ranks, a tmpfs filled during the write: a file of 128 KiB committed for 10 MiB of tensors). Collective.
void verify_written(MPI_Comm world, hid_t file, const std::string& path,
                    std::span<const transfer::DatasetPieces> written, const std::vector<std::uint64_t>& expected) {
  void* handle = nullptr;
  comm::agree(world, [&] { h5::check_status(H5Fget_vfd_handle(file, H5P_DEFAULT, &handle), "the MPI file handle"); });
  MPI_File fh = *static_cast<MPI_File*>(handle);
  MPI_File_sync(fh);  // sync, barrier, sync: another rank's writes become visible to this rank's reads
  MPI_Barrier(world);
  MPI_File_sync(fh);
  std::vector<transfer::DatasetPieces> back(written.begin(), written.end());
  std::size_t total = 0;
  for (const transfer::DatasetPieces& d : back) {
    for (const transfer::Piece& p : d.pieces) total += p.count;
  }
  std::vector<float> scratch(total);
  std::size_t at = 0;
  for (transfer::DatasetPieces& d : back) {
    for (transfer::Piece& p : d.pieces) {
      p.memory = scratch.data() + at;
      at += p.count;
    }
  }
  transfer::Stats stats;
  comm::agree(world, [&] { transfer::read_single_call(file, back, stats); });
  std::vector<std::uint64_t> sums(back.size(), 0);
  for (std::size_t i = 0; i < back.size(); ++i) {
    for (const transfer::Piece& p : back[i].pieces) sums[i] += checksum_range({p.memory, p.count}, p.first);
  }
  MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_UINT64_T, MPI_SUM, world);
  comm::agree(world, [&] {
    for (std::size_t i = 0; i < sums.size(); ++i) {
      if (sums[i] != expected[i]) {
        throw Error(ErrorKind::checkpoint, "cannot write '" + path + "': " + back[i].path +
                                               " read back differs from what was written (the file system lost a "
                                               "write the MPI library did not report: full?)");
      }
    }
  });
}

// The blocks reserved past the file's end are given back (the close ends the file at its last byte).
void release_reserve(const std::string& tmp) {
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(tmp, ec);
  if (!ec) fs::resize_file(tmp, size, ec);
}

// After a failure every rank agreed on (a disk that filled while the data was written: ENOSPC), between the
// temporary file's creation and its close: closes and removes it. The metadata was flushed before the data moved,
// so the close has nothing left to write and succeeds on a full disk (HDF5 1.10 keeps a file whose close failed in
// its table and crashes on it at MPI_Finalize). Collective.
void abandon(int rank, h5::Handle& file, Datasets& created, const std::string& tmp) {
  created.handles.clear();
  file.reset();
  if (rank == 0) {
    std::error_code ec;
    fs::remove(tmp, ec);
  }
}

}  // namespace

std::string checkpoint_file_name(std::int64_t step) {
  return "step_" + std::to_string(step) + ".h5";
}

SaveResult write_checkpoint_file(MPI_Comm world, const std::string& path, const model::ModelLayout& layout,
                                 std::span<const UnitShard> shards, bool writer, const TrainState& state,
                                 const SaveOptions& options) {
  const StateSet set = model_state(shards, writer);
  return write_checkpoint_file(world, path, layout, std::span<const StateSet>(&set, 1), state, options);
}

SaveResult write_checkpoint_file(MPI_Comm world, const std::string& path, const model::ModelLayout& layout,
                                 std::span<const StateSet> sets, const TrainState& state_in,
                                 const SaveOptions& options) {
  h5::silence_errors();
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  Stopwatch watch;
  SaveResult result;
  result.path = path;

  // The plan, the checksums and the space check: collectives and rank 0's file system calls, watched as one
  // operation (inside a caller's phase, e.g. hsdp-train's checkpoint save) until the file is created.
  std::optional<StallGuard> prepare(std::in_place, "preparing " + path + " (shard plan, checksums, free space)");
  comm::agree(world, [&] {
    for (const StateSet& set : sets) plan::validate_shards(layout, set);
  });
  const TrainState state = meta::broadcast(world, state_in);
  const std::size_t param_count = layout.params().size();
  SetPieces pieces;
  for (const StateSet& set : sets) {
    const std::vector<plan::RankRange> writers = plan::allgather_ranges(world, set.shards, set.writer);
    comm::agree(world, [&] { plan::check_writer_coverage(layout, writers); });
    pieces.push_back(set.writer ? plan::shard_pieces(layout, set.shards)
                                : std::vector<std::vector<plan::Piece>>(param_count));
  }
  Stopwatch phase;
  const std::vector<std::uint64_t> checksums = dataset_checksums(world, layout, sets, pieces);
  result.checksum_s = phase.seconds();

  const std::string dir = parent_dir(path);
  const std::string tmp = path + ".tmp";
  const std::size_t dataset_count = plan::first_dataset(sets, sets.size(), param_count);
  const std::uint64_t tensors =
      dataset_count / param_count * static_cast<std::uint64_t>(layout.total_numel()) * sizeof(float);
  comm::agree(world, [&] {
    if (rank != 0) return;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw Error(ErrorKind::checkpoint, "cannot create checkpoint directory '" + dir + "': " + ec.message());
    // A file system that cannot hold the tensors is said before the file exists, with the space it needs.
    const fs::space_info space = fs::space(dir, ec);
    if (!ec && space.available < tensors) {
      throw Error(ErrorKind::checkpoint, "cannot write '" + path + "': it needs at least " +
                                             std::to_string(tensors >> 20) + " MiB for its tensors and " +
                                             std::to_string(space.available >> 20) + " MiB are free in '" + dir + "'");
    }
  });

  phase.restart();
  prepare.reset();
  std::optional<StallGuard> op(std::in_place, "creating " + tmp);
  h5::Handle fapl = h5::mpio_file_access(world, dir);
  h5::Handle file;
  comm::agree(world, [&] {
    file = h5::file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()),
                    "cannot create checkpoint file '" + tmp + "'");
  });
  Datasets created;
  transfer::Stats stats;
  try {
    // Every block the file will take, its metadata's generously (each dataset's header and checksum are well under
    // 16 KiB), then what its layout takes beyond that, if anything.
    const std::uint64_t reserve = tensors + (1 << 20) + dataset_count * (16 << 10);
    int reserved = 0;
    comm::agree(world, [&] {
      if (rank == 0) reserved = reserve_blocks(path, tmp, reserve) ? 1 : 0;
    });
    MPI_Bcast(&reserved, 1, MPI_INT, 0, world);
    meta::write(file.get(), state, layout.config());
    created = create_datasets(file.get(), tmp, layout, sets, pieces, checksums);
    result.tensor_bytes = created.tensor_bytes;
    comm::agree(world, [&] {
      hsize_t size = 0;
      h5::check_status(H5Fget_filesize(file.get(), &size), "the size of '" + tmp + "'");
      if (rank == 0 && reserved != 0 && size > reserve) reserve_blocks(path, tmp, size);
    });
    // The metadata is written (its blocks taken) before the data, so that a disk filling during the data leaves a
    // file that closes without writing (see abandon).
    comm::agree(world, [&] {
      h5::check_status(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), "writing the metadata of checkpoint file '" + tmp + "'");
    });
    result.create_s = phase.seconds();
    phase.restart();
    op.emplace("writing the tensor data of " + tmp);
    fault_point("checkpoint", rank);
    if (options.io == IoMode::per_dataset) {
      write_data(world, file.get(), created.pieces, param_count, options, stats);
    } else {
      // The single call's collectives (its file views) come before anything that can throw (a full disk: ENOSPC).
      comm::agree(world, [&] { write_data(world, file.get(), created.pieces, param_count, options, stats); });
    }
    if (reserved == 0) verify_written(world, file.get(), path, created.pieces, checksums);
    result.data_s = phase.seconds();
    phase.restart();
    op.emplace("closing " + tmp);
    created.handles.clear();
    // Flushed before the close: a flush that fails leaves the file open and closable, a close that fails does not.
    comm::agree(world, [&] {
      h5::check_status(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), "writing the metadata of checkpoint file '" + tmp + "'");
    });
  } catch (const AgreedError& e) {
    abandon(rank, file, created, tmp);
    const std::string what = e.what();
    if (what.find(path) != std::string::npos) throw;
    throw AgreedError(e.kind(), "cannot write '" + path + "': " + what);
  }
  comm::agree(world, [&] { file.close_checked("closing checkpoint file '" + tmp + "'"); });
  result.close_s = phase.seconds();
  result.write_s = watch.seconds();

  Stopwatch commit;
  op.emplace("committing " + path);
  comm::agree(world, [&] {
    if (rank != 0) return;
    release_reserve(tmp);
    fsync_file(tmp);
    durable_rename(tmp, path);
  });
  if (options.committed != nullptr) *options.committed = true;
  op.reset();
  result.commit_s = commit.seconds();

  result.collective_transfers = stats.collective_calls;
  int fallback = stats.fallback ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &fallback, 1, MPI_INT, MPI_LOR, world);
  result.independent_fallback = fallback != 0;
  result.fallback_cause = stats.fallback ? stats.cause : (fallback ? "seen on another rank" : "");
  if (result.independent_fallback && options.logger != nullptr) {
    options.logger->warn("checkpoint '", path, "': collective MPI-IO fell back to independent transfers (",
                         result.fallback_cause, "); writes may be slow on parallel file systems");
  }
  return result;
}

SaveResult save_checkpoint(MPI_Comm world, const std::string& dir, const model::ModelLayout& layout,
                           std::span<const UnitShard> shards, bool writer, const TrainState& state,
                           const SaveOptions& options) {
  const StateSet set = model_state(shards, writer);
  return save_checkpoint(world, dir, layout, std::span<const StateSet>(&set, 1), state, options);
}

SaveResult save_checkpoint(MPI_Comm world, const std::string& dir, const model::ModelLayout& layout,
                           std::span<const StateSet> sets, const TrainState& state, const SaveOptions& options) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  std::int64_t step = state.step;
  MPI_Bcast(&step, 1, MPI_INT64_T, 0, world);
  const std::string name = checkpoint_file_name(step);
  SaveResult result =
      write_checkpoint_file(world, (fs::path(dir) / name).string(), layout, sets, state, options);
  Stopwatch commit;
  const StallGuard op("pointing " + (fs::path(dir) / "latest").string() + " at " + name);
  comm::agree(world, [&] {
    if (rank != 0) return;
    write_latest(dir, name);
    apply_retention(dir, step, options.keep, options.keep_every);
  });
  result.commit_s += commit.seconds();
  return result;
}

}  // namespace hsdp::ckpt
