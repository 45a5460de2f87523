// The CPU backend: the sharding engine over model::Gpt<float> (every strategy, ZeRO++, fp16 loss scaling).
#include <memory>
#include <string>

#include "hsdp/model/gpt.hpp"
#include "hsdp/model/unit_model.hpp"
#include "hsdp/train/backend.hpp"

namespace hsdp::train {

namespace {

// The engine's options, with log.trace's file for this rank.
shard::EngineOptions engine_options(const TrainOptions& o, comm::ProcessMesh& mesh) {
  shard::EngineOptions e = o.engine;
  if (o.log_trace) e.trace_file = o.log_dir + "/trace_rank" + std::to_string(mesh.world().rank()) + ".json";
  return e;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(const TrainOptions& o, const model::ModelLayout& layout, comm::ProcessMesh& mesh, MemoryAccountant& memory,
             const Logger& log)
      : engine_(layout, mesh, engine_options(o, mesh), o.model_seed, memory, &log),
        gpt_(layout, o.micro_batch, o.seq_len, memory, o.activation_checkpointing),
        units_(gpt_) {}

  void begin_step() override { engine_.begin_step(); }
  float forward_backward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets, float dloss,
                         bool last) override {
    return engine_.forward_backward(units_, tokens, targets, dloss, last);
  }
  double grad_norm_squared() override { return engine_.grad_norm_squared(); }
  bool found_nonfinite() override { return engine_.found_nonfinite(); }
  void optimizer_step(const optim::AdamWConfig& config, const optim::AdamWStep& step) override {
    engine_.optimizer_step(config, step);
  }
  double evaluate_loss_sum(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                           std::size_t rows) override {
    engine_.evaluate(units_, tokens, targets);
    const auto losses = gpt_.losses().first(rows * static_cast<std::size_t>(gpt_.seq_len()));
    double sum = 0;
    for (const float x : losses) sum += x;
    return sum;
  }
  const shard::StepTiming& timing() const override { return engine_.timing(); }

  std::vector<ckpt::UnitShard> checkpoint_shards() override { return engine_.shard_views(); }
  void checkpoint_loaded() override { engine_.checkpoint_loaded(); }
  bool is_checkpoint_writer() const override { return engine_.is_checkpoint_writer(); }

 private:
  shard::Engine engine_;
  model::Gpt<float> gpt_;
  model::CpuUnitModel units_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const TrainOptions& options, const model::ModelLayout& layout,
                                          comm::ProcessMesh& mesh, MemoryAccountant& memory, const Logger& log) {
  return std::make_unique<CpuBackend>(options, layout, mesh, memory, log);
}

}  // namespace hsdp::train
