// load_checkpoint and resolve_resume: the collective read with resharding and verification (see checkpoint.hpp).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "hsdp/comm/agree.hpp"
#include "diagnose.hpp"
#include "h5.hpp"
#include "hsdp/ckpt/checkpoint.hpp"
#include "hsdp/ckpt/checksum.hpp"
#include "hsdp/ckpt/commit.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/files.hpp"
#include "hsdp/core/fault.hpp"
#include "hsdp/core/stall.hpp"
#include "meta.hpp"
#include "plan.hpp"
#include "transfer.hpp"

namespace hsdp::ckpt {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void throw_checkpoint(const std::string& message) {
  throw Error(ErrorKind::checkpoint, message);
}

std::string hex(std::uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%016" PRIx64, value);
  return text;
}

h5::Handle open_file(MPI_Comm world, const std::string& path, const model::ModelLayout& layout) {
  const fs::path parent = fs::path(path).parent_path();
  h5::Handle fapl = h5::mpio_file_access(world, parent.empty() ? "." : parent.string());
  h5::Handle file;
  comm::agree(world, [&] {
    std::error_code ec;
    require_regular_input(path, "checkpoint", ErrorKind::checkpoint);
    if (!fs::is_regular_file(path, ec)) throw_checkpoint("checkpoint '" + path + "' does not exist");
  });
  comm::agree(world, [&] {
    const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get());
    if (id < 0) {
      const std::string detail = h5::last_error();
      H5Eclear2(H5E_DEFAULT);
      throw_checkpoint(describe_open_failure(path, plan::dataset_paths(layout), detail));
    }
    file = h5::Handle(id, H5Fclose);
  });
  return file;
}

// A checkpoint of another model shape is not damaged: the deck asks for another model. A config error (the resume's
// fallback to older checkpoints does not try the others, which share the shape: said once), naming both shapes.
[[noreturn]] void throw_other_shape(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::config, "checkpoint '" + path + "' was written for another model shape: " + what +
                                     " (set the deck's [model] to the checkpoint's, or start a new run)");
}

std::string shape_words(const model::GptConfig& c) {
  std::string words = "n_layer " + std::to_string(c.n_layer) + ", n_head " + std::to_string(c.n_head) + ", n_embd " +
                      std::to_string(c.n_embd) + ", block_size " + std::to_string(c.block_size) + ", vocab_size " +
                      std::to_string(c.vocab_size);
  if (!c.llama()) return words;
  std::ostringstream llama;
  llama << "llama, " << words << ", n_kv_head " << c.kv_heads() << ", ffn_dim " << c.ffn() << ", rope_theta "
        << c.rope_theta << ", norm_eps " << c.norm_eps << (c.tie_embeddings ? ", tied" : ", untied") << " head";
  return llama.str();
}

bool same_model(const model::GptConfig& a, const model::GptConfig& b) {
  return a.arch == b.arch && a.n_layer == b.n_layer && a.n_head == b.n_head && a.n_embd == b.n_embd &&
         a.block_size == b.block_size && a.vocab_size == b.vocab_size && a.kv_heads() == b.kv_heads() &&
         a.ffn() == b.ffn() && a.rope_theta == b.rope_theta && a.norm_eps == b.norm_eps &&
         a.tied_head() == b.tied_head();
}

// The model of /meta is the layout's (its padding of the vocabulary may differ: the padded rows are not saved); every
// dataset exists with the model's shape. Same answer on every rank.
void check_shapes(hid_t file, const std::string& path, const model::ModelLayout& layout,
                  std::span<const StateSet> sets) {
  {
    const model::GptConfig saved = meta::read_model_config(file, path);
    const model::GptConfig& want = layout.config();
    if (!same_model(saved, want)) {
      throw_other_shape(path, "it holds " + shape_words(saved) + "; the model is " + shape_words(want));
    }
  }
  for (const StateSet& set : sets) {
    for (const plan::Tensor t : plan::tensors_of(set)) {
    for (const model::ParamInfo& p : layout.params()) {
      const std::string name = plan::dataset_path(set, t, p.name);
      if (!h5::link_exists(file, name)) {
        throw_checkpoint("checkpoint '" + path + "' has no dataset " + name + " (the model expects " +
                         h5::shape_text(p.logical_shape) + ")");
      }
      if (const std::string link = h5::link_not_hard(file, name); !link.empty()) {
        throw_checkpoint("checkpoint '" + path + "': " + link + ", not a dataset as hsdp writes them (the file was "
                         "edited or is damaged; readers do not follow links)");
      }
      h5::Handle d = h5::dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT), "checkpoint '" + path + "': " + name);
      const std::vector<std::int64_t> shape = h5::dataset_shape(d.get());
      if (shape != p.logical_shape) {
        throw_other_shape(path, "dataset " + name + " has shape " + h5::shape_text(shape) + " but the model expects " +
                                    h5::shape_text(p.logical_shape));
      }
    }
    }
  }
}

// Zeroes the rows of wte beyond vocab_size (and anything else stored but not saved) inside this rank's shards.
void zero_unsaved(const model::ModelLayout& layout, const StateSet& set) {
  for (const UnitShard& s : set.shards) {
    for (const model::ParamInfo* p : layout.unit_params(s.unit)) {
      const std::size_t lo = std::max(s.begin, p->offset + p->logical_numel());
      const std::size_t hi = std::min(s.begin + s.count, p->offset + p->numel);
      if (lo >= hi) continue;
      for (const plan::Tensor t : plan::tensors_of(set)) {
        std::fill_n(plan::tensor_data(s, t) + (lo - s.begin), hi - lo, 0.0f);
      }
    }
  }
}

// The datasets of a checkpoint being read, what this rank reads of each, and the checksums the file holds.
struct Reads {
  std::vector<h5::Handle> handles;
  std::vector<transfer::DatasetPieces> datasets;  // tensor-major, then parameter
  std::vector<std::size_t> shard_pieces;          // per dataset: its first n pieces go to shards, the rest are gaps
  std::vector<std::uint64_t> stored;              // per dataset
  std::vector<std::vector<float>> scratch;        // the gaps' data, read only to be verified
};

// This rank reads its shards' pieces of every dataset of `set`, plus the gaps (held by no rank) assigned to it,
// appended to `r`.
void plan_reads(MPI_Comm world, hid_t file, const std::string& path, const model::ModelLayout& layout,
                const StateSet& set, const plan::Ownership& own, Reads& r) {
  const std::span<const UnitShard> shards = set.shards;
  comm::agree(world, [&] {
    for (const plan::Tensor t : plan::tensors_of(set)) {
      for (const model::ParamInfo& info : layout.params()) {
        const std::string name = plan::dataset_path(set, t, info.name);
        r.handles.push_back(h5::dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT), "opening " + name));
        r.stored.push_back(
            h5::read_uint_attribute(r.handles.back().get(), "checksum", "checkpoint '" + path + "' dataset " + name));
      }
    }
  });
  const std::vector<std::vector<plan::Piece>> mine = plan::shard_pieces(layout, shards);
  for (const plan::Tensor t : plan::tensors_of(set)) {
    for (std::size_t p = 0; p < layout.params().size(); ++p) {
      const model::ParamInfo& info = layout.params()[p];
      transfer::DatasetPieces d;
      d.path = plan::dataset_path(set, t, info.name);
      d.dims.assign(info.logical_shape.begin(), info.logical_shape.end());
      d.dataset = r.handles[r.datasets.size()].get();
      for (const plan::Piece& piece : mine[p]) {
        d.pieces.push_back({piece.first, piece.count, plan::tensor_data(shards[piece.shard], t) + piece.shard_offset});
      }
      r.shard_pieces.push_back(d.pieces.size());
      for (const plan::Piece& gap : own.gaps[p]) {
        r.scratch.emplace_back(gap.count);
        d.pieces.push_back({gap.first, gap.count, r.scratch.back().data()});
      }
      r.datasets.push_back(std::move(d));
    }
  }
}

// The checksums of the datasets of `set`, the first of them dataset number `first`, over the data read, into `sums`:
// each rank adds the elements it owns (its shards minus lower ranks' copies) and the gaps it read (all-reduced by
// the caller).
void loaded_checksums(const model::ModelLayout& layout, const StateSet& set, const plan::Ownership& own,
                      const Reads& reads, std::size_t first, std::vector<std::uint64_t>& sums) {
  const std::span<const UnitShard> shards = set.shards;
  const std::size_t param_count = layout.params().size();
  for (const plan::Tensor t : plan::tensors_of(set)) {
    const std::size_t base = first + static_cast<std::size_t>(t) * param_count;
    for (std::size_t p = 0; p < param_count; ++p) {
      for (const plan::Piece& piece : own.owned[p]) {
        const float* data = plan::tensor_data(shards[piece.shard], t) + piece.shard_offset;
        sums[base + p] += checksum_range({data, piece.count}, piece.first);
      }
      const transfer::DatasetPieces& d = reads.datasets[base + p];
      for (std::size_t k = reads.shard_pieces[base + p]; k < d.pieces.size(); ++k) {
        sums[base + p] += checksum_range({d.pieces[k].memory, d.pieces[k].count}, d.pieces[k].first);
      }
    }
  }
}

}  // namespace

TrainState load_checkpoint(MPI_Comm world, const std::string& path, const model::ModelLayout& layout,
                           std::span<const UnitShard> shards, IoMode io) {
  return load_checkpoint(
      world, path, layout, [&](const TrainState&) { return std::vector<StateSet>{model_state(shards, false)}; }, io);
}

TrainState load_checkpoint(MPI_Comm world, const std::string& path, const model::ModelLayout& layout,
                           const ChooseSets& choose, IoMode io) {
  h5::silence_errors();
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);

  std::optional<StallGuard> op(std::in_place, "opening " + path);
  h5::Handle file = open_file(world, path, layout);
  TrainState state;
  std::vector<StateSet> sets;
  comm::agree(world, [&] {
    state = meta::read_state(file.get(), path);
    sets = choose(state);
    for (const StateSet& set : sets) plan::validate_shards(layout, set);
    check_shapes(file.get(), path, layout, sets);
  });

  std::vector<plan::Ownership> owners;
  Reads reads;
  for (const StateSet& set : sets) {
    const std::vector<plan::RankRange> all = plan::allgather_ranges(world, set.shards, true);
    owners.push_back(plan::ownership(layout, all, rank, size));
    plan_reads(world, file.get(), path, layout, set, owners.back(), reads);
  }
  std::vector<transfer::DatasetPieces>& datasets = reads.datasets;

  // A file rewritten by h5repack or h5py (chunked, compressed, another float type) has no byte ranges to read:
  // HDF5 reads it, rank by rank. Every rank opened the same file, so every rank takes the same branch.
  transfer::Stats stats;
  op.emplace("reading the tensor data of " + path);
  if (!transfer::stored_as_written(datasets)) {
    comm::agree(world, [&] {
      try {
        transfer::read_independent(datasets);
      } catch (const Error& e) {
        throw_checkpoint("checkpoint '" + path + "': " + e.what() + " (the file is damaged)");
      }
    });
  } else if (io == IoMode::per_dataset) {
    transfer::agree_rounds(world, datasets);
    transfer::read_per_dataset(datasets, stats);
  } else {
    // Its collectives (the file views) come before anything that can throw.
    comm::agree(world, [&] { transfer::read_single_call(file.get(), datasets, stats); });
  }
  for (const StateSet& set : sets) zero_unsaved(layout, set);
  fault_point("resume", rank);

  op.emplace("verifying the checksums of " + path);
  std::vector<std::uint64_t> sums(datasets.size(), 0);
  for (std::size_t s = 0; s < sets.size(); ++s) {
    loaded_checksums(layout, sets[s], owners[s], reads, plan::first_dataset(sets, s, layout.params().size()), sums);
  }
  MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_UINT64_T, MPI_SUM, world);
  reads.handles.clear();
  file.close_checked("closing checkpoint '" + path + "'");
  // The sums are all-reduced: every rank finds the same.
  for (std::size_t i = 0; i < sums.size(); ++i) {
    if (sums[i] != reads.stored[i]) {
      throw AgreedError(ErrorKind::checkpoint, "checkpoint '" + path + "': dataset " + datasets[i].path +
                                                   " fails its checksum (stored " + hex(reads.stored[i]) +
                                                   ", computed " + hex(sums[i]) + "): the file is damaged");
    }
  }
  return state;
}

std::string checkpoint_file(const std::string& given) {
  std::error_code ec;
  if (!fs::is_directory(given, ec)) return given;  // a file, or a path the reader will say does not exist
  const std::optional<std::string> name = read_latest(given);
  if (!name) {
    throw_checkpoint("checkpoint directory '" + given +
                     "' has no 'latest' file: name a step_<N>.h5 file in it instead");
  }
  const fs::path target = fs::path(*name).is_absolute() ? fs::path(*name) : fs::path(given) / *name;
  if (!fs::is_regular_file(target, ec)) {
    throw_checkpoint("'" + (fs::path(given) / "latest").string() + "' names " + *name + ", which does not exist");
  }
  return target.string();
}

std::optional<std::string> resolve_resume(MPI_Comm world, const std::string& dir, const std::string& resume) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  std::string answer;  // empty: nothing to resume from
  comm::agree(world, [&] {
    if (rank != 0 || resume.empty() || resume == "none") return;
    std::error_code ec;
    if (resume == "auto") {
      const std::optional<std::string> name = read_latest(dir);
      if (!name) return;
      const fs::path target = fs::path(*name).is_absolute() ? fs::path(*name) : fs::path(dir) / *name;
      if (!fs::is_regular_file(target, ec)) {
        throw_checkpoint("'" + (fs::path(dir) / "latest").string() + "' names " + *name + ", which does not exist");
      }
      answer = target.string();
      return;
    }
    if (fs::is_directory(resume, ec)) {
      throw_checkpoint("resume checkpoint '" + resume +
                       "' is a directory: name a step_<N>.h5 file (or set checkpoint.dir to it with "
                       "checkpoint.resume=auto)");
    }
    if (!fs::is_regular_file(resume, ec)) throw_checkpoint("resume checkpoint '" + resume + "' does not exist");
    answer = resume;
  });
  std::uint64_t length = answer.size();
  MPI_Bcast(&length, 1, MPI_UINT64_T, 0, world);
  answer.resize(length);
  MPI_Bcast(answer.data(), static_cast<int>(length), MPI_CHAR, 0, world);
  if (answer.empty()) return std::nullopt;
  return answer;
}

}  // namespace hsdp::ckpt
