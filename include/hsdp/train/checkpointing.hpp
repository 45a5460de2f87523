#pragma once
// The training loop's side of checkpoints: which checkpoint to resume from, and saving the backend's shards with
// the training state (step, tokens, sampler cursor, loss scaler, deck) through the ckpt layer.
#include <optional>
#include <string>
#include <vector>

#include "hsdp/ckpt/checkpoint.hpp"
#include "hsdp/comm/mesh.hpp"
#include "hsdp/core/log.hpp"
#include "hsdp/shard/outer.hpp"
#include "hsdp/train/backend.hpp"
#include "hsdp/train/options.hpp"

namespace hsdp::train {

// A key whose value in a checkpoint's deck differs from this run's (both resolved decks, ConfigDeck::to_ini). The
// keys that say how one segment of a run goes (checkpoint.resume, checkpoint.overwrite, checkpoint.accept_changes,
// train.stop_at_step, train.eval_only) are left out, and so are keys the checkpoint's version did not have.
struct DeckChange {
  std::string key, saved, now;
};
std::vector<DeckChange> deck_changes(const std::string& saved_deck, const std::string& deck);

class Checkpointer {
 public:
  // `outer`: the outer step's state of an island run (parallel.islands > 1), else null.
  Checkpointer(const TrainOptions& options, comm::ProcessMesh& mesh, Backend& backend,
               const model::ModelLayout& layout, shard::OuterOptimizer* outer, const Logger& log);

  bool enabled() const { return !options_.checkpoint_dir.empty(); }
  // Collective. Loads the checkpoint checkpoint.resume names (auto: checkpoint.dir/latest, if any; with
  // checkpoint.fallback a damaged `latest` falls back to the newest checkpoint that loads) into the backend's shards
  // and rebuilds derived state; returns its training state, or nothing for a fresh start. A run that will write
  // checkpoints into a directory holding another run's is a config error (checkpoint.overwrite deletes them).
  std::optional<ckpt::TrainState> resume();
  // Collective. Writes and commits checkpoint.dir/step_<state.step>.h5; false if that failed on every rank (a full
  // disk) and checkpoint.on_error=continue (otherwise a checkpoint AgreedError, exit 2). A stall longer than
  // checkpoint.timeout_s ends the job (exit 4).
  bool save(ckpt::TrainState state);
  // Whether the end of `step` (1-based) is a checkpoint point by checkpoint.every.
  bool due(std::int64_t step) const;
  // The step of the newest complete checkpoint this run resumed from or wrote; 0 if none.
  std::int64_t latest_step() const { return latest_step_; }

 private:
  ckpt::TrainState load(const std::string& path);
  // The views of this rank's state a checkpoint moves: the inner shards, the outer state and (with an exchange in
  // flight) the shifts.
  struct Views {
    std::vector<ckpt::UnitShard> inner, outer, shift;
  };
  Views views(bool in_flight);
  // The state sets this rank saves: the run's, or every island's, its outer state and, with an exchange in flight,
  // its shift (each rank names them all, moving only its own island's).
  std::vector<ckpt::StateSet> save_sets(const Views& v, bool in_flight);
  // What this rank loads of a checkpoint: island j continues island j mod the islands saved.
  std::vector<ckpt::StateSet> load_sets(const ckpt::TrainState& saved, const Views& v);
  std::optional<ckpt::TrainState> resume_newest_loadable(std::optional<std::string>& from);
  void keep_runs_apart(const std::optional<std::string>& from);
  std::uint64_t bytes_needed() const;
  void check_free_space(std::int64_t step) const;
  // After a save failed (every rank): what it left removed (its .tmp; its renamed file where `latest` does not name
  // it), said, and stop or go on (checkpoint.on_error). `committed`: it renamed its file into place.
  bool save_failed(std::int64_t step, const std::string& error, bool committed);

  const TrainOptions& options_;
  comm::ProcessMesh& mesh_;
  Backend& backend_;
  const model::ModelLayout& layout_;
  shard::OuterOptimizer* outer_;
  const Logger& log_;
  std::int64_t latest_step_ = 0;
  bool said_save_failure_ = false;
};

}  // namespace hsdp::train
