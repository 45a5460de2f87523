#include "hsdp/ckpt/inspect.hpp"

#include <sys/stat.h>

#include <algorithm>

#include "diagnose.hpp"
#include "h5.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/files.hpp"
#include "meta.hpp"
#include "plan.hpp"

namespace hsdp::ckpt {
namespace {

// Opens a checkpoint in this process (POSIX driver), explaining a failure in words.
h5::Handle open_local(const std::string& path) {
  require_regular_input(path, "checkpoint", ErrorKind::checkpoint);  // a FIFO would block HDF5's open forever
  h5::silence_errors();
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) {
    const std::string detail = h5::last_error();
    H5Eclear2(H5E_DEFAULT);
    throw Error(ErrorKind::checkpoint, describe_open_failure(path, {}, detail));
  }
  return h5::Handle(id, H5Fclose);
}

}  // namespace

CheckpointInfo inspect_checkpoint(const std::string& path) {
  h5::Handle file = open_local(path);
  CheckpointInfo info;
  info.path = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) info.file_bytes = static_cast<std::uint64_t>(st.st_size);
  info.format_version = meta::read_format_version(file.get(), path);
  info.state = meta::read_state(file.get(), path);
  info.config = meta::read_model_config(file.get(), path);
  {
    h5::Handle m = h5::group(H5Gopen2(file.get(), "/meta", H5P_DEFAULT), "opening /meta");
    if (h5::has_attribute(m.get(), "hsdp_version")) {
      info.hsdp_version = h5::read_string_attribute(m.get(), "hsdp_version", "checkpoint '" + path + "' /meta");
    }
  }
  // The datasets the model of /meta has (never a walk over the file's links, which a damaged file can turn into
  // heap corruption inside HDF5: tests/fuzz).
  const model::ModelLayout layout(info.config);
  for (const std::string& name : plan::dataset_paths(layout, info.state.islands, info.state.outer_in_flight >= 0)) {
    if (!h5::link_exists(file.get(), name)) continue;
    if (const std::string link = h5::link_not_hard(file.get(), name); !link.empty()) {
      throw Error(ErrorKind::checkpoint, "checkpoint '" + path + "': " + link +
                                             ", not a dataset as hsdp writes them (the file was edited or is damaged)");
    }
    h5::Handle d = h5::dataset(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), "checkpoint '" + path + "': " + name);
    DatasetInfo ds;
    ds.path = name;
    ds.shape = h5::dataset_shape(d.get());
    const haddr_t offset = H5Dget_offset(d.get());
    ds.file_offset = offset == HADDR_UNDEF ? 0 : offset;
    ds.bytes = H5Dget_storage_size(d.get());
    if (h5::has_attribute(d.get(), "checksum")) {
      ds.checksum = h5::read_uint_attribute(d.get(), "checksum", "checkpoint '" + path + "' " + name);
    }
    info.datasets.push_back(std::move(ds));
  }
  // File order: the order they were written in (model, then m, then v; layout order within each).
  std::stable_sort(info.datasets.begin(), info.datasets.end(),
                   [](const DatasetInfo& a, const DatasetInfo& b) { return a.file_offset < b.file_offset; });
  return info;
}

model::GptConfig checkpoint_model_config(const std::string& path) {
  h5::Handle file = open_local(path);
  meta::read_format_version(file.get(), path);
  return meta::read_model_config(file.get(), path);
}

std::vector<UnitShard> FullCheckpoint::whole_units() {
  std::vector<UnitShard> shards;
  for (std::size_t u = 0; u < params.size(); ++u) {
    shards.push_back(
        {static_cast<int>(u), 0, params[u].size(), params[u].data(), exp_avg[u].data(), exp_avg_sq[u].data()});
  }
  return shards;
}

FullCheckpoint empty_checkpoint(const model::GptConfig& config) {
  const model::ModelLayout layout(config);
  FullCheckpoint full;
  full.config = config;
  for (const model::UnitInfo& u : layout.units()) {
    full.params.emplace_back(u.numel);
    full.exp_avg.emplace_back(u.numel);
    full.exp_avg_sq.emplace_back(u.numel);
  }
  return full;
}

std::size_t verify_island_sets(const std::string& path, const TrainState& state) {
  FullCheckpoint full = empty_checkpoint(checkpoint_model_config(path));
  const model::ModelLayout layout(full.config);
  const std::vector<UnitShard> shards = full.whole_units();
  std::size_t verified = 0;
  const std::vector<StateSet> sets = all_state_sets(state);
  for (std::size_t i = 1; i < sets.size(); ++i) {  // the run's set, the first, is read_full_checkpoint's
    StateSet set = sets[i];
    set.shards = shards;
    load_checkpoint(MPI_COMM_SELF, path, layout, [&](const TrainState&) { return std::vector<StateSet>{set}; });
    verified += set.count() * layout.params().size();
  }
  return verified;
}

FullCheckpoint read_full_checkpoint(const std::string& path) {
  FullCheckpoint full = empty_checkpoint(checkpoint_model_config(path));
  const model::ModelLayout layout(full.config);
  const std::vector<UnitShard> shards = full.whole_units();
  full.state = load_checkpoint(MPI_COMM_SELF, path, layout, shards);
  return full;
}

DatasetInfo dataset_location(const std::string& path, const std::string& dataset) {
  h5::Handle file = open_local(path);
  if (!h5::link_exists(file.get(), dataset)) {
    throw Error(ErrorKind::checkpoint, "checkpoint '" + path + "' has no dataset " + dataset);
  }
  h5::Handle d = h5::dataset(H5Dopen2(file.get(), dataset.c_str(), H5P_DEFAULT), "opening " + dataset);
  DatasetInfo info;
  info.path = dataset;
  info.shape = h5::dataset_shape(d.get());
  const haddr_t offset = H5Dget_offset(d.get());
  if (offset == HADDR_UNDEF) throw Error(ErrorKind::checkpoint, dataset + " has no contiguous storage");
  info.file_offset = offset;
  info.bytes = H5Dget_storage_size(d.get());
  return info;
}

}  // namespace hsdp::ckpt
