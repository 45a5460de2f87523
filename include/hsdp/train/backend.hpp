#pragma once
// What the training loop drives, on the CPU or on a GPU: micro-batch forward/backward with accumulation, the
// global gradient norm, AdamW, evaluation, and the host views of the state a checkpoint writes and reads.
//   cpu  (make_cpu_backend): the sharding engine (hsdp/shard/engine.hpp) over model::Gpt<float>, every strategy.
//   cuda (make_cuda_backend, hsdp/train/cuda_backend.hpp): the same engine over GptCuda on the rank's GPU.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "hsdp/ckpt/checkpoint.hpp"
#include "hsdp/comm/mesh.hpp"
#include "hsdp/core/log.hpp"
#include "hsdp/core/memory.hpp"
#include "hsdp/model/layout.hpp"
#include "hsdp/model/unit_model.hpp"
#include "hsdp/optim/adamw.hpp"
#include "hsdp/shard/engine.hpp"
#include "hsdp/train/options.hpp"

namespace hsdp::train {

class Backend {
 public:
  virtual ~Backend() = default;

  // After construction, outside comm::agree (which builds it: a rank that failed there must not leave the others
  // in a collective): the engine's first gathers. Collective over the mesh.
  virtual void start() {}
  // Start of an optimizer step: zero gradients and this step's timings and counters.
  virtual void begin_step() = 0;
  // One micro-batch (tokens and targets on the host, free to refill on return): forward and backward with the loss
  // gradient scaled by dloss (1/k, times a loss scale for fp16). `last`: last micro-batch of the step.
  virtual void forward_backward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                                float dloss, bool last) = 0;
  // After the last micro-batch, in one read of the device: this rank's micro-batch losses summed, the global squared
  // gradient norm and, with check_nonfinite, whether any rank's gradients hold inf or nan (fp16 overflow); the norm
  // and the flag the same on every rank (shard::Engine::step_scalars).
  virtual shard::StepScalars step_scalars(bool check_nonfinite) = 0;
  // AdamW; it may return before the device is done (the next read waits for it, or synchronize).
  virtual void optimizer_step(const optim::AdamWConfig& config, const optim::AdamWStep& step) = 0;
  // Waits for everything the device was given; its errors throw here (after the last step).
  virtual void synchronize() = 0;
  // Forward only: the sum, in double, of the per-position losses of the batch's first `rows` sequences (the rest
  // are padding: every rank makes the same calls, collective strategies need that).
  virtual double evaluate_loss_sum(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                                   std::size_t rows) = 0;
  virtual const shard::StepTiming& timing() const = 0;
  // Bytes moved this step by communicators the backend owns beyond the mesh's (NCCL), by link.
  virtual comm::LinkBytes own_bytes() const { return {}; }
  // The device's dense bf16 peak in TFLOP/s (model::dense_bf16_peak_tflops: a GPU's by its name), for the MFU the
  // step line reports; 0 where none is known (the CPU).
  virtual double peak_tflops() const { return 0.0; }
  // The model's kernels by kind (hsdp/model/cuda/kernel_timer.hpp), for the steps between time_kernels(true) and
  // kernel_times() (which waits for them): milliseconds per kind. Empty where the model cannot time them (the CPU).
  virtual void time_kernels(bool on) { (void)on; }
  virtual std::vector<std::pair<std::string, double>> kernel_times() { return {}; }

  // Checkpoints. Host views of this rank's part of the state (fp32 params, Adam m and v), current as of the call
  // (a GPU backend copies device state into them); valid until the next call on the backend.
  virtual std::vector<ckpt::UnitShard> checkpoint_shards() = 0;
  // After a checkpoint was loaded into checkpoint_shards()' views: make the backend's state follow.
  virtual void checkpoint_loaded() = 0;
  virtual bool is_checkpoint_writer() const = 0;
  // The replica check: the persistent full parameters every rank holds alike (shard::Engine::replicated_params).
  virtual std::vector<shard::Engine::ReplicatedParams> replicated_params() { return {}; }
};

// A backend that is the sharding engine driving a model by unit (the CPU's and the GPU's): every call but the
// evaluation's per-position losses, which stay where the model keeps them, forwards to the engine.
class EngineBackend : public Backend {
 public:
  void start() override { engine().derive_if_pending(); }
  void begin_step() override { engine().begin_step(); }
  void forward_backward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets, float dloss,
                        bool last) override {
    engine().forward_backward(model(), tokens, targets, dloss, last);
  }
  shard::StepScalars step_scalars(bool check_nonfinite) override { return engine().step_scalars(check_nonfinite); }
  void optimizer_step(const optim::AdamWConfig& config, const optim::AdamWStep& step) override {
    engine().optimizer_step(config, step);
  }
  void synchronize() override { engine().synchronize(); }
  const shard::StepTiming& timing() const override { return engine().timing(); }
  std::vector<ckpt::UnitShard> checkpoint_shards() override { return engine().shard_views(); }
  void checkpoint_loaded() override { engine().checkpoint_loaded(); }
  bool is_checkpoint_writer() const override { return engine().is_checkpoint_writer(); }
  std::vector<shard::Engine::ReplicatedParams> replicated_params() override { return engine().replicated_params(); }

 protected:
  virtual shard::Engine& engine() = 0;
  virtual const shard::Engine& engine() const = 0;
  virtual model::UnitModel& model() = 0;
};

// The process mesh of this run's strategy over `world`, its groups carried for the device: on a GPU the rank's GPU and
// NCCL or staged MPI per group (cuda_mesh_carrier); on the CPU, groups
// staged through host memory with comm.stage=host (the GPU's staged path), else MPI itself. Collective over world.
std::unique_ptr<comm::ProcessMesh> make_mesh(const TrainOptions& options, comm::MpiCommunicator& world,
                                             const comm::Topology& topology, const Logger& log);

// The engine's options for this run: the deck's, with log.trace's file for this rank, the first gather deferred
// to Backend::start.
shard::EngineOptions engine_options(const TrainOptions& options, const comm::ProcessMesh& mesh);

// The sharding engine and the CPU model. No collective: Backend::start follows.
std::unique_ptr<Backend> make_cpu_backend(const TrainOptions& options, const model::ModelLayout& layout,
                                          comm::ProcessMesh& mesh, MemoryAccountant& memory, const Logger& log);

}  // namespace hsdp::train
