#pragma once
// Parallel HDF5 checkpoints: one file per checkpoint, `<dir>/step_<N>.h5`, written collectively by all ranks
// and readable by any later world size and sharding.
//
// File layout (format_version 1):
//   /meta                          attributes: format_version, step, tokens, deck, strategy, world_size, nodes,
//                                  mesh, hsdp_version, checksum_algorithm, and the model shape (n_layer, n_head,
//                                  n_embd, block_size, vocab_size, padded_vocab_size)
//   /model/<nanoGPT name>          fp32, the LOGICAL shape (transformer.wte.weight is [vocab_size, C]: the padded
//   /optim/exp_avg/<name>          rows are not saved and are zero after a load)
//   /optim/exp_avg_sq/<name>
//   /data                          attributes epoch, position (the sampler cursor)
//   /scaler                        attributes scale, good_steps, skipped_steps (the fp16 loss scaler)
// Every tensor dataset carries a uint64 attribute `checksum` (see checksum.hpp), verified on every load.
//
// Commit protocol (save_checkpoint): write `step_<N>.h5.tmp`, close, fsync, rename to `step_<N>.h5`, fsync the
// directory; then write `latest.tmp` holding the file name, fsync, rename to `latest`, fsync the directory; only
// then delete checkpoints that fall out of retention. A crash at any point leaves every complete checkpoint and
// `latest` intact.
//
// All functions here are collective over the communicator they take, and throw a checkpoint Error (exit 2) with a
// message naming the file (and the dataset, where one is involved) on the same ranks at the same time.
#include <mpi.h>

#include <cstddef>
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>
#include <span>
#include <string>

#include "hsdp/core/log.hpp"
#include "hsdp/data/sampler.hpp"
#include "hsdp/model/layout.hpp"
#include "hsdp/optim/loss_scaler.hpp"
#include "hsdp/model/unit_shard.hpp"

namespace hsdp::ckpt {

inline constexpr int kFormatVersion = 1;

// One contiguous range of one unit's flat fp32 buffer that this rank holds: the sharding engine's own type.
using model::UnitShard;

struct TrainState {
  std::int64_t step = 0;
  std::int64_t tokens = 0;
  // The global batch (tokens per step) of the segment that wrote it: a resume keeps it, train.grad_accum following
  // the rank count. 0: not recorded (files written before it; a resume takes tokens / step, the run's mean, then).
  std::int64_t tokens_per_step = 0;
  data::SamplerState sampler;
  // The training data's window count at the run's seq_len (data::Sampler::window_count): a resume over files that
  // hold another count reads another order. 0: not recorded (files written before it).
  std::uint64_t data_windows = 0;
  optim::LossScalerState scaler;
  std::string deck_text;  // the resolved config deck (INI)
  std::string strategy;
  int world_size = 1;
  int nodes = 1;
  std::string mesh;
  double train_seconds = 0;   // wall time of every segment of the run up to this checkpoint (0 if not recorded)
  std::int64_t segments = 1;  // runs (a fresh start and each resume) that led to it
  int islands = 1;            // parallel.islands of the run that wrote it (> 1: the state sets below)
  // outer.overlap: the fragment whose exchange was in flight at this step (-1: none) and the step after which it is
  // applied; its shift (shard/outer.hpp) is every island's set "<group>/outer/in_flight_shift".
  int outer_in_flight = -1;
  std::int64_t outer_apply_step = 0;
  // The tokenizer that made the run's token ids (data::Tokenizer::identity(): "bytes", or "sentencepiece:<hash>");
  // files written before it was recorded read as "bytes" (the only tokenizer then).
  std::string tokenizer = "bytes";
};

// One copy of the model state in a file: three datasets per parameter, `<group>/<tensors[k]>/<name>`, k = 0, 1, 2
// read from and written to each shard's params, exp_avg and exp_avg_sq. The run's state is the set {"", model,
// optim/exp_avg, optim/exp_avg_sq}; a run of N islands (parallel.islands) adds island i's under "/islands/<i>" for
// i >= 1 (island 0's is the run's), and the outer step's state (shard/outer.hpp) of island i under
// "<island i's group>/outer": params (the outer parameters), momentum, error_feedback; with an outer exchange in
// flight (outer.overlap), one more set of one tensor, "<island i's group>/outer/in_flight_shift". A set of fewer than
// three tensors names the first ones and leaves the rest empty; its shards' buffers past them are not touched.
struct StateSet {
  std::string group;
  std::array<std::string, 3> tensors = {"model", "optim/exp_avg", "optim/exp_avg_sq"};
  std::span<const UnitShard> shards;  // this rank's ranges of this set (none: it moves nothing of it)
  bool writer = false;                // save: this rank writes its shards (one replica of every range)
  // The tensors it holds: the names before the first empty one.
  std::size_t count() const {
    std::size_t n = 0;
    while (n < tensors.size() && !tensors[n].empty()) ++n;
    return n;
  }
};
// The run's state set, and island i's sets (i = 0 is the run's).
StateSet model_state(std::span<const UnitShard> shards, bool writer);
std::string island_group(int island);
StateSet island_state(int island, std::span<const UnitShard> shards, bool writer);
StateSet outer_state(int island, std::span<const UnitShard> shards, bool writer);
StateSet outer_flight_state(int island, std::span<const UnitShard> shards, bool writer);
// Every state set a checkpoint of `islands` islands holds (without shards): the run's, islands 1.., the outer states,
// and with an exchange in flight the in-flight shifts.
std::vector<StateSet> all_state_sets(int islands, bool in_flight = false);
std::vector<StateSet> all_state_sets(const TrainState& state);

// How the tensor data travel to the file. Both are collective and produce the same file.
enum class IoMode {
  // One collective H5Dwrite/H5Dread per dataset (3 x 148 = 444 for GPT-2 124M), a hyperslab per shard-parameter
  // intersection, empty selections for ranks without one; falls back to independent I/O are detected.
  per_dataset,
  // All datasets are created first (contiguous, allocated early, never filled); then ONE MPI-IO call per rank moves
  // every shard-parameter intersection (a file view listing their byte ranges) through the MPI file handle of
  // HDF5's mpio driver: MPI_File_write_at_all (collective) to save, MPI_File_read_at (independent; each rank's
  // pieces are few large ranges) to load. The default: fewer calls, and faster in tools/bench/ckpt.sh.
  single_call,
};

struct SaveOptions {
  int keep = 3;        // keep the newest `keep` checkpoints (<= 0: keep all)
  int keep_every = 0;  // and, if > 0, every step that is a multiple of it, forever
  IoMode io = IoMode::single_call;
  // Test hook: sleep this long in the middle of writing (after the /model datasets, before the file is closed),
  // so a test can kill a rank mid-save. The environment variable HSDP_CKPT_PAUSE_IN_WRITE=<seconds> overrides it.
  double pause_for_test_s = 0.0;
  // If given, rank 0 warns through it (once per save) when MPI-IO fell back to independent transfers.
  const Logger* logger = nullptr;
  // If given, set on every rank once the file is renamed into place: a failure after it (`latest`, retention) left
  // this save's complete file; one before it left any earlier file of that name as it was.
  bool* committed = nullptr;
};

struct SaveResult {
  std::string path;                   // the committed file
  std::uint64_t tensor_bytes = 0;     // fp32 payload of the file (params + m + v, logical shapes)
  int collective_transfers = 0;       // collective data calls this rank made
  bool independent_fallback = false;  // per_dataset: HDF5 did some transfer as independent I/O (on any rank)
  std::string fallback_cause;         // HDF5's reason, when it said
  double write_s = 0.0;               // collective part: the four phases below and the rest
  double checksum_s = 0.0;            //   checksums of this rank's pieces (and their allreduce)
  double create_s = 0.0;              //   file, metadata and dataset creation
  double data_s = 0.0;                //   moving the tensor data (test pause included)
  double close_s = 0.0;               //   closing the file (metadata flush)
  double commit_s = 0.0;              // fsync + renames + `latest` + retention
};

// Writes `<dir>/step_<state.step>.h5`, commits it, points `<dir>/latest` at it and applies retention.
// `writer`: this rank writes its shards (exactly one replica of every range must be a writer; the writers' ranges
// must cover every unit exactly once, else an internal Error). `state` is taken from rank 0.
SaveResult save_checkpoint(MPI_Comm world, const std::string& dir, const model::ModelLayout& layout,
                           std::span<const UnitShard> shards, bool writer, const TrainState& state,
                           const SaveOptions& options = {});

// Writes one checkpoint file at `path` (through `path.tmp`, fsync, rename, directory fsync) without touching
// `latest` or other files. Used by save_checkpoint and by hsdp-ckpt (consolidate, import).
// A disk that fills while it writes: refused before the file exists when the space is short; then rank 0 reserves
// the file's blocks (fallocate, where the file system can) so that no later write finds the disk full; where it
// cannot (or with HSDP_CKPT_RESERVE=0, a test hook), every writer reads its pieces back against the checksums (the
// MPI library can lose a write error), and a write that fails closes and removes `path.tmp` (Error).
SaveResult write_checkpoint_file(MPI_Comm world, const std::string& path, const model::ModelLayout& layout,
                                 std::span<const UnitShard> shards, bool writer, const TrainState& state,
                                 const SaveOptions& options = {});
// The same with several state sets (the first is the run's, /model and /optim).
SaveResult write_checkpoint_file(MPI_Comm world, const std::string& path, const model::ModelLayout& layout,
                                 std::span<const StateSet> sets, const TrainState& state,
                                 const SaveOptions& options = {});
SaveResult save_checkpoint(MPI_Comm world, const std::string& dir, const model::ModelLayout& layout,
                           std::span<const StateSet> sets, const TrainState& state, const SaveOptions& options = {});

// Reads `path` into this rank's shards (any world size and sharding at save; ranges may repeat across ranks) and
// returns the training state. Verifies that every dataset exists with the model's shape and that every checksum
// matches; the padded rows of wte are set to zero. After an Error the shards' contents are unspecified.
TrainState load_checkpoint(MPI_Comm world, const std::string& path, const model::ModelLayout& layout,
                           std::span<const UnitShard> shards, IoMode io = IoMode::single_call);
// The same for the state sets `choose` names once the file's state is read (every rank calls it with the same
// state; a set the file lacks is a checkpoint Error naming its first dataset).
using ChooseSets = std::function<std::vector<StateSet>(const TrainState&)>;
TrainState load_checkpoint(MPI_Comm world, const std::string& path, const model::ModelLayout& layout,
                           const ChooseSets& choose, IoMode io = IoMode::single_call);

// The checkpoint to resume from: `resume` is "auto" (the file `<dir>/latest` names, if there is one), "none", or a
// path (which must exist). Collective: rank 0 looks, every rank gets the answer.
std::optional<std::string> resolve_resume(MPI_Comm world, const std::string& dir, const std::string& resume);
// What a tool is given as a checkpoint: a step_<N>.h5 file as it is, or a checkpoint directory (a run's
// checkpoint.dir), whose `latest` names the file. A checkpoint Error naming the path otherwise. No MPI.
std::string checkpoint_file(const std::string& given);

// "step_<N>.h5"
std::string checkpoint_file_name(std::int64_t step);

}  // namespace hsdp::ckpt
