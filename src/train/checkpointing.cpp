#include "hsdp/train/checkpointing.hpp"

#include <sstream>

#include "hsdp/core/timer.hpp"

namespace hsdp::train {

Checkpointer::Checkpointer(const TrainOptions& options, comm::ProcessMesh& mesh, Backend& backend,
                           const model::ModelLayout& layout, const Logger& log)
    : options_(options), mesh_(mesh), backend_(backend), layout_(layout), log_(log) {}

bool Checkpointer::due(std::int64_t step) const {
  return enabled() && options_.checkpoint_every > 0 && step % options_.checkpoint_every == 0;
}

std::optional<ckpt::TrainState> Checkpointer::resume() {
  const auto path = ckpt::resolve_resume(mesh_.world().raw(), options_.checkpoint_dir, options_.resume);
  if (!path) return std::nullopt;
  Stopwatch watch;
  const auto shard_list = backend_.checkpoint_shards();
  ckpt::TrainState state = ckpt::load_checkpoint(mesh_.world().raw(), *path, layout_, shard_list);
  backend_.checkpoint_loaded();
  log_.info("resumed from ", *path, " (step ", state.step, ", saved by ", state.world_size, " rank(s) with ",
            state.strategy, ") in ", watch.seconds(), " s");
  return state;
}

void Checkpointer::save(ckpt::TrainState state) {
  const comm::Topology& topo = mesh_.topology();
  state.deck_text = options_.deck_text;
  state.strategy = shard::to_string(options_.engine.strategy);
  state.world_size = topo.world_size;
  state.nodes = topo.num_nodes();
  std::ostringstream mesh;
  mesh << topo.num_nodes() << " node(s) of " << topo.node_size(topo.node()) << " rank(s)"
       << (topo.emulated ? std::string(" (emulated, ") + comm::to_string(topo.placement) + ")" : "");
  state.mesh = mesh.str();
  ckpt::SaveOptions save_options;
  save_options.keep = options_.checkpoint_keep;
  save_options.keep_every = options_.checkpoint_keep_every;
  save_options.logger = &log_;
  const auto shard_list = backend_.checkpoint_shards();
  Stopwatch watch;
  const auto result = ckpt::save_checkpoint(mesh_.world().raw(), options_.checkpoint_dir, layout_, shard_list,
                                            backend_.is_checkpoint_writer(), state, save_options);
  const double seconds = watch.seconds();
  log_.info("checkpoint ", result.path, ": ", static_cast<double>(result.tensor_bytes) / (1 << 20), " MiB in ",
            seconds, " s");
}

}  // namespace hsdp::train
