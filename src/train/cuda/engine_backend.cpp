// device.type = cuda: the sharding engine on the rank's GPU (hsdp/train/cuda_backend.hpp).
#include <mpi.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
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

namespace {

// Each of the host's ranks' `text`, in world-rank order, and this rank's place among them. Collective over `world`.
std::vector<std::string> gather_on_host(MPI_Comm world, const std::string& text, int* host_rank) {
  int world_rank = 0;
  MPI_Comm_rank(world, &world_rank);
  MPI_Comm split = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &split);
  const comm::MpiComm host(split);
  int size = 1;
  MPI_Comm_size(host.get(), &size);
  MPI_Comm_rank(host.get(), host_rank);
  const int length = static_cast<int>(text.size());
  std::vector<int> lengths(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, host.get());
  std::exclusive_scan(lengths.begin(), lengths.end(), offsets.begin(), 0);
  std::string all(static_cast<std::size_t>(offsets.back() + lengths.back()), '\0');
  MPI_Allgatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, host.get());
  std::vector<std::string> texts;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    texts.push_back(all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lengths[r])));
  }
  return texts;
}

// What each of the host's ranks sees, gathered as "<mesh node>,<GPU id>,<GPU id>...": device::plan_host_gpus of it.
device::HostGpus gather_host_gpus(MPI_Comm world, int node, const std::vector<std::string>& mine, int* host_rank) {
  std::string text = std::to_string(node);
  for (const std::string& id : mine) text += "," + id;
  const std::vector<std::string> texts = gather_on_host(world, text, host_rank);
  std::vector<std::vector<std::string>> visible(texts.size());
  std::vector<int> nodes(texts.size());
  for (std::size_t r = 0; r < texts.size(); ++r) {
    const std::string_view fields = texts[r];
    const std::size_t first = std::min(fields.find(','), fields.size());
    nodes[r] = std::stoi(std::string(fields.substr(0, first)));
    for (std::size_t begin = first + 1; begin <= fields.size();) {
      const std::size_t end = std::min(fields.find(',', begin), fields.size());
      visible[r].emplace_back(fields.substr(begin, end - begin));
      begin = end + 1;
    }
  }
  return device::plan_host_gpus(visible, nodes);
}

}  // namespace

comm::MeshCarrier cuda_mesh_carrier(const TrainOptions& o, MPI_Comm world, const comm::Topology& topology,
                                    const Logger& log) {
  // Every rank's GPU from what the host's ranks see (device::assign_gpus: a GPU per rank wherever a placement allows,
  // whatever the launcher's binding left each), and what the job agrees on before any rank throws (this runs inside
  // comm::agree: every rank reaches the collectives): ranks that see no GPU, the most ranks of one mesh node on one
  // GPU (NCCL refuses two ranks of a group on one GPU), and the fewest GPUs a host's ranks see (for the advice).
  std::string reason;
  const std::vector<std::string> mine = device::visible_gpus(&reason);
  int host_rank = 0;
  const device::HostGpus host = gather_host_gpus(world, topology.node(), mine, &host_rank);
  const int blind = mine.empty() ? 1 : 0;
  int without_gpu = 0, most_on_one_gpu = 0, fewest_gpus = 0;
  MPI_Allreduce(&blind, &without_gpu, 1, MPI_INT, MPI_SUM, world);
  MPI_Allreduce(&host.most_of_a_node_on_one_gpu, &most_on_one_gpu, 1, MPI_INT, MPI_MAX, world);
  MPI_Allreduce(&host.gpus, &fewest_gpus, 1, MPI_INT, MPI_MIN, world);
  if (blind != 0) device::throw_no_gpu(reason);
  if (without_gpu > 0) {
    throw_config("device.type=cuda: " + std::to_string(without_gpu) +
                 " of the job's ranks see no CUDA device (CUDA_VISIBLE_DEVICES or the launcher's GPU binding left "
                 "them none)");
  }
  if (o.comm_intra == comm::Transport::nccl && most_on_one_gpu > 1) {
    const std::string g = std::to_string(fewest_gpus);
    throw_config("device.type=cuda with comm.intra=nccl needs a GPU per rank (NCCL refuses two ranks on one GPU): " +
                 std::to_string(most_on_one_gpu) + " ranks of a node are on one GPU, and a host's ranks see " + g +
                 " GPU(s); start at most " + g + " ranks per node (mpirun --map-by ppr:" + g +
                 ":node, srun --ntasks-per-node=" + g + "), or let ranks share GPUs with comm.intra=mpi");
  }
  const std::size_t me = static_cast<std::size_t>(host_rank);
  const device::SelectedDevice selected = device::select_gpu(host.index[me]);
  log.info("device.type=cuda: rank 0 on GPU ", selected.cuda_device, " of the ", selected.visible_devices, " it sees (",
           selected.name, "; ", host.ranks_on_gpu[me], " rank(s) of its host on it); inside a node ",
           "comm.intra=", comm::to_string(o.comm_intra), ", across nodes comm.inter=", comm::to_string(o.comm_inter));
  return comm::device_carrier(o.comm_intra, o.comm_inter, o.comm_stage, o.comm, log);
}

GpuMemory cuda_memory_available(MPI_Comm world) {
  // The host's ranks on this rank's GPU, by its identity: gathered first (every rank reaches it; nothing here
  // throws before it), checked after.
  int device = -1;
  std::string id, reason;
  if (cudaGetDevice(&device) == cudaSuccess) {
    const std::vector<std::string> ids = device::visible_gpus(&reason);
    if (device >= 0 && static_cast<std::size_t>(device) < ids.size()) id = ids[static_cast<std::size_t>(device)];
  }
  int host_rank = 0;
  const std::vector<std::string> on_host = gather_on_host(world, id, &host_rank);
  dc::check(cudaGetDevice(&device), "cudaGetDevice");
  if (id.empty()) throw_internal("cannot identify GPU " + std::to_string(device) + " (" + reason + ")");
  std::size_t free = 0, total = 0;
  dc::check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  GpuMemory m;
  m.memory.available = free;
  m.memory.source = "free memory (cudaMemGetInfo)";
  m.sharing = static_cast<int>(std::count(on_host.begin(), on_host.end(), id));
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
