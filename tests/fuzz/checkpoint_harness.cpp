// Fuzz harness of the checkpoint reader: the input is a checkpoint file (a mutated copy of a small valid one). It is
// read the three ways the programs read checkpoints, on one MPI rank:
//   - hsdp-ckpt verify: read_full_checkpoint (the model shape from the file's /meta), then inspect_checkpoint;
//   - hsdp-ckpt inspect: inspect_checkpoint;
//   - hsdp-train's resume: load_checkpoint into the fuzz model's layout (below), whole units on one rank.
// When HSDP_FUZZ_CHECKPOINT_REFERENCE names the unmutated checkpoint, every load that is accepted must give its
// tensors bit for bit (damage the checksums miss is a failure). After each reader, no HDF5 file or object may be left
// open: a leaked handle keeps the file's metadata cached, and a later open of the same file (a retry, a fallback
// to another checkpoint in the same process) would read through it.
#include <hdf5.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint_common.hpp"
#include "harness.hpp"
#include "hsdp/ckpt/checkpoint.hpp"
#include "hsdp/ckpt/inspect.hpp"
#include "hsdp/model/layout.hpp"

namespace {

using hsdp::ckpt::FullCheckpoint;

struct Reference {
  std::optional<FullCheckpoint> full;  // the unmutated checkpoint, when named
};

Reference& reference() {
  static Reference r;
  return r;
}

void check_against_reference(const FullCheckpoint& loaded, const char* reader) {
  const auto& ref = reference().full;
  if (ref && !hsdp::fuzz::same_tensors(loaded, *ref)) {
    throw hsdp::fuzz::PropertyViolation("undetected_damage", std::string(reader) +
                                                                 " accepted a file whose tensors differ from the "
                                                                 "unmutated checkpoint's");
  }
}

void verify(const std::string& path) {
  const FullCheckpoint full = hsdp::ckpt::read_full_checkpoint(path);
  hsdp::ckpt::inspect_checkpoint(path);
  check_against_reference(full, "read_full_checkpoint");
}

void resume(const std::string& path) {
  const hsdp::model::ModelLayout layout(hsdp::fuzz::checkpoint_fuzz_model());
  FullCheckpoint mine = hsdp::ckpt::empty_checkpoint(hsdp::fuzz::checkpoint_fuzz_model());
  const auto shards = mine.whole_units();
  hsdp::ckpt::load_checkpoint(MPI_COMM_SELF, path, layout, shards);
  check_against_reference(mine, "load_checkpoint");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    MPI_Init(nullptr, nullptr);
    std::atexit([] { MPI_Finalize(); });
  }
  if (const char* path = std::getenv("HSDP_FUZZ_CHECKPOINT_REFERENCE"); path != nullptr && *path != '\0') {
    reference().full = hsdp::ckpt::read_full_checkpoint(path);  // a bad reference ends the run here
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = hsdp::fuzz::scratch_dir() + "/step_1.h5";
  hsdp::fuzz::write_file(path, {data, size});
  hsdp::fuzz::Outcome outcome =
      hsdp::fuzz::run_checkpoint_reader([&] { verify(path); }, "read_full_checkpoint + inspect_checkpoint");
  outcome = hsdp::fuzz::worse(
      outcome, hsdp::fuzz::run_checkpoint_reader([&] { hsdp::ckpt::inspect_checkpoint(path); }, "inspect_checkpoint"));
  outcome = hsdp::fuzz::worse(outcome, hsdp::fuzz::run_checkpoint_reader([&] { resume(path); }, "load_checkpoint"));
  return hsdp::fuzz::finish(outcome);
}
