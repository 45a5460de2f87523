// The CPU backend: the sharding engine over model::Gpt<float> (every strategy, ZeRO++, fp16 loss scaling).
#include <memory>
#include <string>

#include "hsdp/model/gpt.hpp"
#include "hsdp/model/unit_model.hpp"
#include "hsdp/train/backend.hpp"

namespace hsdp::train {

shard::EngineOptions engine_options(const TrainOptions& o, const comm::ProcessMesh& mesh) {
  shard::EngineOptions e = o.engine;
  e.defer_first_gather = true;  // built inside comm::agree: Backend::start gathers
  if (o.log_trace) e.trace_file = o.log_dir + "/trace_rank" + std::to_string(mesh.topology().world_rank) + ".json";
  return e;
}

namespace {

class CpuBackend final : public EngineBackend {
 public:
  CpuBackend(const TrainOptions& o, const model::ModelLayout& layout, comm::ProcessMesh& mesh, MemoryAccountant& memory,
             const Logger& log)
      : gpt_(layout, o.micro_batch, o.seq_len, memory, o.activation_checkpointing),
        units_(gpt_),
        engine_(layout, mesh, engine_options(o, mesh), o.model_seed, memory, &log) {}

  double evaluate_loss_sum(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                           std::size_t rows) override {
    engine_.evaluate(units_, tokens, targets);
    const auto losses = gpt_.losses().first(rows * static_cast<std::size_t>(gpt_.seq_len()));
    double sum = 0;
    for (const float x : losses) sum += x;
    return sum;
  }

 private:
  shard::Engine& engine() override { return engine_; }
  const shard::Engine& engine() const override { return engine_; }
  model::UnitModel& model() override { return units_; }

  // The model before the engine: the engine goes first, and its destructor runs the work still queued (after an
  // error mid-step: the host does not wait for a micro-batch), which calls the model.
  model::Gpt<float> gpt_;
  model::CpuUnitModel units_;
  shard::Engine engine_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const TrainOptions& options, const model::ModelLayout& layout,
                                          comm::ProcessMesh& mesh, MemoryAccountant& memory, const Logger& log) {
  return std::make_unique<CpuBackend>(options, layout, mesh, memory, log);
}

}  // namespace hsdp::train
