#pragma once
// The training loop's side of checkpoints: which checkpoint to resume from, and saving the backend's shards with
// the training state (step, tokens, sampler cursor, loss scaler, deck) through the ckpt layer.
#include <optional>
#include <string>

#include "hsdp/ckpt/checkpoint.hpp"
#include "hsdp/comm/mesh.hpp"
#include "hsdp/core/log.hpp"
#include "hsdp/train/backend.hpp"
#include "hsdp/train/options.hpp"

namespace hsdp::train {

class Checkpointer {
 public:
  Checkpointer(const TrainOptions& options, comm::ProcessMesh& mesh, Backend& backend,
               const model::ModelLayout& layout, const Logger& log);

  bool enabled() const { return !options_.checkpoint_dir.empty(); }
  // Collective. Loads the checkpoint checkpoint.resume names (auto: checkpoint.dir/latest, if any) into the
  // backend's shards and rebuilds derived state; returns its training state, or nothing for a fresh start.
  std::optional<ckpt::TrainState> resume();
  // Collective. Writes and commits checkpoint.dir/step_<state.step>.h5.
  void save(ckpt::TrainState state);
  // Whether the end of `step` (1-based) is a checkpoint point by checkpoint.every.
  bool due(std::int64_t step) const;

 private:
  const TrainOptions& options_;
  comm::ProcessMesh& mesh_;
  Backend& backend_;
  const model::ModelLayout& layout_;
  const Logger& log_;
};

}  // namespace hsdp::train
