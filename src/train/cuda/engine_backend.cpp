// device.type = cuda: the sharding engine on the rank's GPU (hsdp/train/cuda_backend.hpp).
#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "hsdp/comm/nccl.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/log.hpp"
#include "hsdp/device/cuda/runtime.hpp"
#include "hsdp/device/select_device.hpp"
#include "hsdp/model/cuda/gpt.hpp"
#include "hsdp/model/cuda/kernel_timer.hpp"
#include "hsdp/model/flops.hpp"
#include "hsdp/stream/cuda/device_ops.hpp"
#include "hsdp/stream/cuda/executor.hpp"
#include "hsdp/train/cuda_backend.hpp"

namespace hsdp::train {

namespace {

namespace dc = hsdp::device::cuda;

// The commit, GPU and date of the last run of tests/gpu/device_check.sh that passed (docs/gpu.md's validations).
constexpr const char* kLastGpuValidation = "f541df3 (NVIDIA H100 80GB HBM3, 2026-11-28)";

// The engine's options on a GPU: compute copies in the model's dtype, the CUDA executor binding each queue's stream
// to the device's calls, log.trace's file for this rank.
shard::EngineOptions gpu_engine_options(const TrainOptions& o, comm::ProcessMesh& mesh, DType compute,
                                        stream::cuda::CudaDeviceOps& device) {
  shard::EngineOptions e = engine_options(o, mesh);
  e.compute_dtype = compute;
  e.streams.make_executor = [&device](const stream::StreamOptions&) -> std::unique_ptr<stream::Executor> {
    return std::make_unique<stream::cuda::CudaExecutor>(device.stream(),
                                                        [&device](cudaStream_t s) { device.use_stream(s); });
  };
  return e;
}

// T: the model's compute dtype (bf16_t with precision.param=bf16, float otherwise).
template <typename T>
class GpuEngineBackend final : public EngineBackend {
 public:
  GpuEngineBackend(const TrainOptions& o, const model::ModelLayout& layout, comm::ProcessMesh& mesh,
                   MemoryAccountant& memory, const Logger& log)
      : gpt_(layout, o.micro_batch, o.seq_len, model_stream_.get(), o.activation_checkpointing),
        owned_device_(std::make_unique<stream::cuda::CudaDeviceOps>(memory, model_stream_.get())),
        device_(*owned_device_),
        engine_(layout, mesh, gpu_engine_options(o, mesh, compute_dtype(), device_), o.model_seed, memory, &log,
                std::move(owned_device_)),
        log_(log) {
    memory.allocate(MemCategory::activations, gpt_.activation_bytes());
    activation_bytes_ = gpt_.activation_bytes();
    memory_ = &memory;
  }
  ~GpuEngineBackend() override { memory_->release(MemCategory::activations, activation_bytes_); }
  GpuEngineBackend(const GpuEngineBackend&) = delete;
  GpuEngineBackend& operator=(const GpuEngineBackend&) = delete;

  static DType compute_dtype() { return std::is_same_v<T, bf16_t> ? DType::bf16 : DType::f32; }
  // After each step (its scalars are read once a step): a warning for each fused GEMM that fell back to the separate
  // kernels since the last one.
  shard::StepScalars step_scalars(bool check_nonfinite) override {
    const shard::StepScalars scalars = EngineBackend::step_scalars(check_nonfinite);
    const auto& declined = gpt_.declined_epilogues();
    for (; declined_warned_ < declined.size(); ++declined_warned_) {
      log_.warn("model.gemm_epilogue=fused: cuBLASLt has no fused kernel for ", declined[declined_warned_],
                " on this GPU; that GEMM runs with the separate kernels");
    }
    return scalars;
  }
  double peak_tflops() const override { return peak_tflops_; }
  void time_kernels(bool on) override { gpt_.time_kernels(on ? &kernel_timer_ : nullptr); }
  std::vector<std::pair<std::string, double>> kernel_times() override { return kernel_timer_.report(); }

  double evaluate_loss_sum(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                           std::size_t rows) override {
    engine_.evaluate(gpt_, tokens, targets);  // reads the loss: the model's stream is done with the head
    const std::size_t positions = rows * static_cast<std::size_t>(gpt_.seq_len());
    losses_.resize(positions);
    dc::check(cudaMemcpy(losses_.data(), gpt_.losses(), positions * sizeof(float), cudaMemcpyDeviceToHost),
              "cudaMemcpy (evaluation losses)");
    return std::accumulate(losses_.begin(), losses_.end(), 0.0);
  }

 private:
  shard::Engine& engine() override { return engine_; }
  const shard::Engine& engine() const override { return engine_; }
  model::UnitModel& model() override { return gpt_; }

  dc::Stream model_stream_;  // the model's and the compute queue's
  // The model (and the timer it may still mark) before the engine: the engine goes first, and its destructor runs
  // the work still queued (after an error mid-step: the host does not wait for a micro-batch), which calls the model.
  model::cuda::KernelTimer kernel_timer_;
  model::cuda::GptCuda<T> gpt_;
  std::unique_ptr<stream::cuda::CudaDeviceOps> owned_device_;  // until the engine takes it
  stream::cuda::CudaDeviceOps& device_;                        // the engine's, for the executor's binding
  shard::Engine engine_;
  std::vector<float> losses_;
  std::size_t activation_bytes_ = 0;
  MemoryAccountant* memory_ = nullptr;
  double peak_tflops_ = model::dense_bf16_peak_tflops(dc::current_device_info().name);
  const Logger& log_;
  std::size_t declined_warned_ = 0;
};

}  // namespace

comm::MeshCarrier cuda_mesh_carrier(const TrainOptions& o, const comm::Topology& topology, const Logger& log) {
  const device::SelectedDevice selected = device::select_device(device::DeviceType::cuda, topology.local_rank());
  const int on_node = topology.node_size(topology.node());
  if (o.comm_intra == comm::Transport::nccl && on_node > selected.visible_devices) {
    throw_config(
        "device.type=cuda with comm.intra=nccl needs a GPU per rank (NCCL refuses two ranks on one GPU): "
        "this node runs " +
        std::to_string(on_node) + " ranks but sees " + std::to_string(selected.visible_devices) +
        " GPU(s); start at most " + std::to_string(selected.visible_devices) +
        " ranks per node (mpirun --map-by ppr:" + std::to_string(selected.visible_devices) +
        ":node, srun --ntasks-per-node), or let ranks share GPUs with comm.intra=mpi");
  }
  log.info("device.type=cuda: rank 0 on GPU ", selected.cuda_device, " of ", selected.visible_devices, " (",
           selected.name, "); inside a node comm.intra=", comm::to_string(o.comm_intra),
           ", across nodes comm.inter=", comm::to_string(o.comm_inter));
  return comm::device_carrier(o.comm_intra, o.comm_inter, o.comm_stage, o.comm, log);
}

GpuMemory cuda_memory_available(int ranks_on_host) {
  int device = 0, visible = 0;
  dc::check(cudaGetDevice(&device), "cudaGetDevice");
  dc::check(cudaGetDeviceCount(&visible), "cudaGetDeviceCount");
  std::size_t free = 0, total = 0;
  dc::check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  GpuMemory m;
  m.memory.available = free;
  m.memory.source = "free memory (cudaMemGetInfo)";
  // Local ranks map to GPUs modulo the visible ones: the busiest GPU has this many.
  m.sharing = std::max(1, (ranks_on_host + visible - 1) / std::max(1, visible));
  m.where = "GPU " + std::to_string(device) + " (" + dc::current_device_info().name + ") of host " + host_name();
  return m;
}

std::unique_ptr<Backend> make_cuda_backend(const TrainOptions& o, const model::ModelLayout& layout,
                                           comm::ProcessMesh& mesh, MemoryAccountant& memory, const Logger& log) {
  log.info("device.type=cuda: the sharding engine on GPUs (", shard::to_string(o.engine.strategy),
           "), last validated by tests/gpu/device_check.sh at commit ", kLastGpuValidation,
           " (docs/gpu.md)");
  if (o.model.fused_attention || o.model.fused_epilogues) {
    log.info("model.attention=", o.model.fused_attention ? "fused" : "unfused",
             ", model.gemm_epilogue=", o.model.fused_epilogues ? "fused" : "separate",
             ": the fused kernels are written without a GPU and not yet validated on one (docs/gpu.md)");
  }
  if (shard::model_compute_dtype(true, o.engine.param_dtype) == DType::bf16)
    return std::make_unique<GpuEngineBackend<bf16_t>>(o, layout, mesh, memory, log);
  return std::make_unique<GpuEngineBackend<float>>(o, layout, mesh, memory, log);
}

}  // namespace hsdp::train
