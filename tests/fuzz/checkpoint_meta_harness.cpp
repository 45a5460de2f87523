// Fuzz harness of a checkpoint's metadata values (/meta, /data, /scaler): the input is a list of edits applied to a
// copy of the good checkpoint (HSDP_FUZZ_CHECKPOINT_REFERENCE) through HDF5 itself, so that every input reaches the
// readers as a well-formed file whose values are wrong: numbers at and beyond their limits, another type (unsigned,
// real, string, an array), a deleted attribute, and, when an edit asks, a meta_checksum recomputed over the edited
// values (a file a writer could have produced). Each edit is 11 bytes:
//   byte 0: the attribute (kTargets), byte 1: the operation (Op), byte 2: flags (1: recompute meta_checksum after
//   all edits, 2: a string operation takes an edge string), bytes 3-10: the value (little-endian).
// The file is then read the three ways the programs read it (hsdp-ckpt verify, inspect, hsdp-train's resume).
// Besides the classification every harness makes (accepted, or refused with a checkpoint Error):
//   - metadata_edit_undetected: a value the checksum covers was changed, meta_checksum was neither recomputed nor
//     removed (a file without it reads as one written before it existed), and a reader accepted the file;
//   - accepted_out_of_range: a reader accepted a state outside what any writer produces (a negative step or token
//     count, world_size below 1, nodes outside [1, world_size], segments below 1, a train_seconds or loss scale that
//     is not finite and positive, negative scaler counters);
//   - and, as in the checkpoint harness, tensors that differ from the reference's, or HDF5 objects left open.
#include <hdf5.h>
#include <mpi.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint_common.hpp"
#include "h5.hpp"
#include "harness.hpp"
#include "hsdp/ckpt/checkpoint.hpp"
#include "hsdp/ckpt/inspect.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/model/layout.hpp"
#include "meta.hpp"

namespace {

using hsdp::ckpt::FullCheckpoint;
using hsdp::ckpt::TrainState;
namespace h5 = hsdp::ckpt::h5;

struct Target {
  const char* group;
  const char* name;
};

// Every attribute a reader of the metadata reads.
constexpr std::array kTargets{
    Target{"/meta", "step"},
    Target{"/meta", "tokens"},
    Target{"/meta", "deck"},
    Target{"/meta", "strategy"},
    Target{"/meta", "world_size"},
    Target{"/meta", "nodes"},
    Target{"/meta", "mesh"},
    Target{"/meta", "train_seconds"},
    Target{"/meta", "segments"},
    Target{"/meta", "format_version"},
    Target{"/meta", "n_layer"},
    Target{"/meta", "n_head"},
    Target{"/meta", "n_embd"},
    Target{"/meta", "block_size"},
    Target{"/meta", "vocab_size"},
    Target{"/meta", "padded_vocab_size"},
    Target{"/meta", "meta_checksum"},
    Target{"/meta", "hsdp_version"},
    Target{"/meta", "checksum_algorithm"},
    Target{"/data", "epoch"},
    Target{"/data", "position"},
    Target{"/scaler", "scale"},
    Target{"/scaler", "good_steps"},
    Target{"/scaler", "skipped_steps"},
};

// `same` leaves the attribute as it is (the seeds: accepted files the mutations start from).
enum class Op : std::uint8_t { same, int64, int64_edge, real, real_edge, uint64, string, remove, int64_pair, count };

constexpr std::size_t kEditBytes = 11;
constexpr std::size_t kMaxEdits = 4;

std::int64_t int_edge(std::uint64_t v) {
  constexpr std::array<std::int64_t, 14> edges{0,
                                               1,
                                               -1,
                                               2,
                                               3,
                                               5,
                                               39,
                                               std::numeric_limits<std::int32_t>::max(),
                                               std::int64_t{std::numeric_limits<std::int32_t>::max()} + 1,
                                               std::numeric_limits<std::int32_t>::min(),
                                               std::int64_t{1} << 62,
                                               std::numeric_limits<std::int64_t>::max(),
                                               std::numeric_limits<std::int64_t>::min(),
                                               -2};
  return edges[v % edges.size()];
}

double real_edge(std::uint64_t v) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  const std::array<double, 12> edges{std::numeric_limits<double>::quiet_NaN(),  inf, -inf, -0.0,   0.0,     1e308,
                                     std::numeric_limits<double>::denorm_min(), 2.5, -1.0, 9.3e18, 65536.0, 1e-45};
  return edges[v % edges.size()];
}

std::string string_value(std::uint64_t v, bool edge) {
  if (edge) {
    switch (v % 4) {
      case 0:
        return "";
      case 1:
        return std::string(100000, 'x');
      case 2:
        return "\xff\xfe\x80";
      default:
        return std::string("a\0b", 3);
    }
  }
  std::string text(reinterpret_cast<const char*>(&v), sizeof v);
  return text.substr(0, text.find('\0'));
}

void write_pair(hid_t group, const char* name, std::int64_t value) {
  const hsize_t two = 2;
  const std::array<std::int64_t, 2> values{value, value};
  h5::Handle space = h5::dataspace(H5Screate_simple(1, &two, nullptr), "a 2-element dataspace");
  h5::Handle attr = h5::attribute(H5Acreate2(group, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                                  std::string("creating ") + name);
  h5::check_status(H5Awrite(attr.get(), H5T_NATIVE_INT64, values.data()), std::string("writing ") + name);
}

struct Edited {
  bool changed = false;    // a value the readers rely on differs from the reference's (or no longer reads)
  bool unchecked = false;  // meta_checksum recomputed over the edited values, or removed (a file from before it)
};

// The values meta_checksum covers, as one string; nullopt where one does not read.
std::optional<std::string> covered_values(hid_t file, const std::string& path) {
  try {
    const TrainState values = hsdp::ckpt::meta::read_values(file, path);
    return std::to_string(hsdp::ckpt::meta::checksum(values, hsdp::ckpt::meta::read_model_config(file, path)));
  } catch (const hsdp::Error&) {
    return std::nullopt;
  }
}

// meta_checksum as stored: absent, or its value ("" where it does not read as one).
std::optional<std::string> stored_checksum(hid_t file, const std::string& path) {
  h5::Handle meta = h5::group(H5Gopen2(file, "/meta", H5P_DEFAULT), "/meta");
  if (H5Aexists(meta.get(), "meta_checksum") <= 0) return std::nullopt;
  try {
    return std::to_string(h5::read_uint_attribute(meta.get(), "meta_checksum", path));
  } catch (const hsdp::Error&) {
    return std::string();
  }
}

// Applies the edits in `data` to the file at `path`.
Edited apply_edits(const std::string& path, const std::uint8_t* data, std::size_t size) {
  Edited out;
  h5::Handle file = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), "opening the copy");
  const std::optional<std::string> values_before = covered_values(file.get(), path);
  const std::optional<std::string> checksum_before = stored_checksum(file.get(), path);
  bool forge = false;
  for (std::size_t e = 0; e < kMaxEdits && (e + 1) * kEditBytes <= size; ++e) {
    const std::uint8_t* edit = data + e * kEditBytes;
    const Target& target = kTargets[edit[0] % kTargets.size()];
    const auto op = static_cast<Op>(edit[1] % static_cast<std::uint8_t>(Op::count));
    std::uint64_t value = 0;
    std::memcpy(&value, edit + 3, sizeof value);
    forge = forge || (edit[2] & 1) != 0;
    if (op == Op::same) continue;
    h5::Handle group = h5::group(H5Gopen2(file.get(), target.group, H5P_DEFAULT), target.group);
    if (H5Aexists(group.get(), target.name) > 0) {
      h5::check_status(H5Adelete(group.get(), target.name), std::string("deleting ") + target.name);
    }
    switch (op) {
      case Op::int64:
        h5::write_attribute(group.get(), target.name, static_cast<std::int64_t>(value));
        break;
      case Op::int64_edge:
        h5::write_attribute(group.get(), target.name, int_edge(value));
        break;
      case Op::real: {
        double real = 0;
        std::memcpy(&real, &value, sizeof real);
        h5::write_attribute(group.get(), target.name, real);
        break;
      }
      case Op::real_edge:
        h5::write_attribute(group.get(), target.name, real_edge(value));
        break;
      case Op::uint64:
        h5::write_attribute(group.get(), target.name, value);
        break;
      case Op::string:
        h5::write_attribute(group.get(), target.name, string_value(value, (edit[2] & 2) != 0));
        break;
      case Op::int64_pair:
        write_pair(group.get(), target.name, int_edge(value));
        break;
      case Op::same:
      case Op::remove:
      case Op::count:
        break;
    }
  }
  const std::optional<std::string> values_after = covered_values(file.get(), path);
  const std::optional<std::string> checksum_after = stored_checksum(file.get(), path);
  out.changed = !values_after || values_after != values_before || (checksum_after && checksum_after != checksum_before);
  out.unchecked = !checksum_after;
  if (forge && values_after) {
    try {
      const TrainState values = hsdp::ckpt::meta::read_values(file.get(), path);
      const std::uint64_t sum =
          hsdp::ckpt::meta::checksum(values, hsdp::ckpt::meta::read_model_config(file.get(), path));
      h5::Handle meta = h5::group(H5Gopen2(file.get(), "/meta", H5P_DEFAULT), "/meta");
      if (H5Aexists(meta.get(), "meta_checksum") > 0) H5Adelete(meta.get(), "meta_checksum");
      h5::write_attribute(meta.get(), "meta_checksum", sum);
      out.unchecked = true;
    } catch (const hsdp::Error&) {
    }
  }
  file.close_checked("closing the copy");
  return out;
}

std::optional<FullCheckpoint>& reference() {
  static std::optional<FullCheckpoint> r;
  return r;
}
std::string& reference_path() {
  static std::string p;
  return p;
}

// What every writer's state satisfies (restated from the format, not taken from the reader).
void check_in_range(const TrainState& s, const char* reader) {
  const bool ok = s.step >= 0 && s.tokens >= 0 && s.world_size >= 1 && s.nodes >= 1 && s.nodes <= s.world_size &&
                  s.segments >= 1 && std::isfinite(s.train_seconds) && s.train_seconds >= 0 &&
                  std::isfinite(s.scaler.scale) && s.scaler.scale > 0 && s.scaler.good_steps >= 0 &&
                  s.scaler.skipped_steps >= 0;
  if (!ok) {
    throw hsdp::fuzz::PropertyViolation(
        "accepted_out_of_range", std::string(reader) + " accepted step " + std::to_string(s.step) + ", world_size " +
                                     std::to_string(s.world_size) + ", nodes " + std::to_string(s.nodes) +
                                     ", segments " + std::to_string(s.segments));
  }
}

void accepted(const FullCheckpoint& loaded, const TrainState& state, const Edited& edited, const char* reader) {
  if (edited.changed && !edited.unchecked) {
    throw hsdp::fuzz::PropertyViolation("metadata_edit_undetected",
                                        std::string(reader) +
                                            " accepted a file whose metadata was edited, its "
                                            "meta_checksum neither recomputed nor removed");
  }
  check_in_range(state, reader);
  if (!hsdp::fuzz::same_tensors(loaded, *reference())) {
    throw hsdp::fuzz::PropertyViolation("undetected_damage",
                                        std::string(reader) + " read tensors that differ from the reference's");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    MPI_Init(nullptr, nullptr);
    std::atexit([] { MPI_Finalize(); });
  }
  const char* path = std::getenv("HSDP_FUZZ_CHECKPOINT_REFERENCE");
  if (path == nullptr || *path == '\0') {
    std::fprintf(stderr, "fuzz_checkpoint_meta: set HSDP_FUZZ_CHECKPOINT_REFERENCE to the good checkpoint\n");
    std::exit(2);
  }
  reference_path() = path;
  reference() = hsdp::ckpt::read_full_checkpoint(path);  // a bad reference ends the run here
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  h5::silence_errors();
  static const std::string path = hsdp::fuzz::scratch_dir() + "/step_2.h5";
  std::filesystem::copy_file(reference_path(), path, std::filesystem::copy_options::overwrite_existing);
  Edited edited;
  try {
    edited = apply_edits(path, data, size);
  } catch (const std::exception& e) {  // a value HDF5 would not write: no file for the readers
    return hsdp::fuzz::finish({hsdp::fuzz::Verdict::rejected, "edit", e.what()});
  }
  hsdp::fuzz::Outcome outcome = hsdp::fuzz::run_checkpoint_reader(
      [&] {
        const FullCheckpoint full = hsdp::ckpt::read_full_checkpoint(path);
        hsdp::ckpt::inspect_checkpoint(path);
        accepted(full, full.state, edited, "read_full_checkpoint");
      },
      "read_full_checkpoint + inspect_checkpoint");
  outcome = hsdp::fuzz::worse(
      outcome, hsdp::fuzz::run_checkpoint_reader([&] { hsdp::ckpt::inspect_checkpoint(path); }, "inspect_checkpoint"));
  outcome = hsdp::fuzz::worse(
      outcome, hsdp::fuzz::run_checkpoint_reader(
                   [&] {
                     const hsdp::model::ModelLayout layout(hsdp::fuzz::checkpoint_fuzz_model());
                     FullCheckpoint mine = hsdp::ckpt::empty_checkpoint(hsdp::fuzz::checkpoint_fuzz_model());
                     const auto shards = mine.whole_units();
                     const TrainState state = hsdp::ckpt::load_checkpoint(MPI_COMM_SELF, path, layout, shards);
                     accepted(mine, state, edited, "load_checkpoint");
                   },
                   "load_checkpoint"));
  return hsdp::fuzz::finish(outcome);
}
