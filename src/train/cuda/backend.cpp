// device.type = cuda: see hsdp/train/cuda_backend.hpp.
#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "hsdp/comm/nccl.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/timer.hpp"
#include "hsdp/device/cuda/runtime.hpp"
#include "hsdp/device/cuda/select_device.hpp"
#include "hsdp/model/cuda/gpt.hpp"
#include "hsdp/optim/cuda/adamw.hpp"
#include "hsdp/train/cuda/parameters.hpp"
#include "hsdp/train/cuda_backend.hpp"

namespace hsdp::train {

namespace {

namespace dc = hsdp::device::cuda;
namespace oc = hsdp::optim::cuda;

class CudaBackend final : public Backend {
 public:
  CudaBackend(const TrainOptions& o, const model::ModelLayout& layout, comm::ProcessMesh& mesh,
              MemoryAccountant& memory, const Logger& log)
      : layout_(layout),
        mesh_(mesh),
        selected_(device::select_device(device::DeviceType::cuda, mesh.topology().local_rank())),
        world_size_(mesh.topology().world_size),
        gpt_(layout, o.micro_batch, o.seq_len),
        total_(layout.total_numel()),
        params_(layout, o.model_seed, compute_),
        tokens_(gpt_.tokens()),
        targets_(gpt_.tokens()),
        host_tokens_(gpt_.tokens()),
        host_targets_(gpt_.tokens()),
        host_losses_(gpt_.tokens()),
        norm_(1),
        norm_scratch_(oc::kSumOfSquaresScratch) {
    comm::MpiCommunicator& node = comm::as_mpi(mesh.node());
    comm::MpiCommunicator& cross = comm::as_mpi(mesh.cross_node());
    const bool nccl_inside = o.comm_intra == comm::Transport::nccl;
    // NCCL would stop at two ranks on one GPU, less clearly.
    if (nccl_inside && node.size() > selected_.visible_devices) {
      throw_config("device.type=cuda with comm.intra=nccl needs a GPU per rank: this node runs " +
                   std::to_string(node.size()) + " ranks but sees " + std::to_string(selected_.visible_devices) +
                   " GPU(s); start at most " + std::to_string(selected_.visible_devices) +
                   " ranks per node (mpirun --map-by ppr:" + std::to_string(selected_.visible_devices) +
                   ":node, srun --ntasks-per-node), or let ranks share GPUs with comm.intra=mpi");
    }
    if (node.size() > 1 && nccl_inside) intra_ = std::make_unique<comm::NcclCommunicator>(node, "gpu_node", o.comm, log);
    if (node.size() > 1 && !nccl_inside) {
      intra_staged_ = comm::make_inter_node_communicator(comm::Transport::mpi, node, "gpu_node", compute_.get(), o.comm,
                                                         log);
    }
    if (cross.size() > 1) {
      inter_ = comm::make_inter_node_communicator(o.comm_inter, cross, "gpu_cross_node", compute_.get(), o.comm, log);
    }
    memory.allocate(MemCategory::params, params_.master_bytes());
    memory.allocate(MemCategory::grads, params_.grad_bytes());
    memory.allocate(MemCategory::optimizer, params_.optimizer_bytes());
    memory.allocate(MemCategory::activations, gpt_.activation_bytes() + tokens_.size_bytes() + targets_.size_bytes());
    std::string reduction = intra_          ? "gradients all-reduced over the node's " + std::to_string(node.size()) +
                                                " GPUs with NCCL during backward"
                            : intra_staged_ ? "gradients all-reduced over the node's " + std::to_string(node.size()) +
                                                " ranks with MPI after backward (comm.intra=mpi)"
                                            : std::string("one rank per node: no reduction inside the node");
    if (inter_) {
      reduction +=
          ", then across " + std::to_string(cross.size()) + " nodes with comm.inter=" + comm::to_string(o.comm_inter);
    }
    log.info("device.type=cuda: rank 0 on GPU ", selected_.cuda_device, " of ", selected_.visible_devices, " (",
             selected_.name, "); ", reduction);
  }

  void begin_step() override {
    params_.zero_grads(compute_);
    timing_ = {};
    if (intra_) intra_->reset_counters();
    if (intra_staged_) intra_staged_->reset_counters();
    if (inter_) inter_->reset_counters();
  }

  float forward_backward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets, float dloss,
                         bool last) override {
    upload(tokens, targets);
    // Sum-reduced gradients of the per-rank mean losses, divided by the world size: the global mean.
    const float per_row = dloss / static_cast<float>(gpt_.tokens()) / static_cast<float>(world_size_);
    gpt_.forward(params_.compute(), tokens_.data(), targets_.data(), per_row, compute_);
    request_losses();
    if (last && intra_) {
      gpt_.backward(params_.compute(), params_.grads(), tokens_.data(), compute_, [&](int unit) { reduce_unit(unit); });
      backward_done_.record(compute_);
      comm_done_.record(intra_->stream());
      intra_->make_stream_wait(compute_);
    } else {
      gpt_.backward(params_.compute(), params_.grads(), tokens_.data(), compute_);
    }
    return mean_loss();  // waits for the forward only: backward and its reductions run on
  }

  // Timing: comm_ms spans the NCCL stream from the first unit's all-reduce to the last one's end, exposed_comm_ms
  // the part of it after backward's last kernel (both from CUDA events); a cross-node all-reduce adds its host time
  // to both (it starts after backward).
  double grad_norm_squared() override {
    for (auto& h : pending_) h.wait();  // the collectives are waited for here, after the whole step was enqueued
    if (!pending_.empty()) {
      timing_.comm_ms = comm_done_.elapsed_ms_since(comm_start_);
      timing_.exposed_comm_ms = std::max(0.0f, comm_done_.elapsed_ms_since(backward_done_));
    }
    pending_.clear();
    if (intra_staged_) {  // comm.intra=mpi: after backward, staged through pinned host memory (or CUDA-aware MPI)
      Stopwatch intra;
      intra_staged_->all_reduce(std::span<float>(params_.grads(), total_), comm::ReduceOp::sum);
      timing_.comm_ms += intra.milliseconds();
      timing_.exposed_comm_ms += intra.milliseconds();
    }
    if (inter_) {
      Stopwatch inter;
      inter_->all_reduce(std::span<float>(params_.grads(), total_), comm::ReduceOp::sum);
      timing_.comm_ms += inter.milliseconds();
      timing_.exposed_comm_ms += inter.milliseconds();
    }
    oc::sum_of_squares(norm_.data(), params_.grads(), total_, norm_scratch_.data(), compute_);
    double norm = 0;
    dc::copy_to_host(&norm, norm_.data(), 1, compute_);
    compute_.synchronize();
    return norm;
  }

  // fp16 is refused for cuda (check_cuda_options); a non-finite gradient shows in the norm, which the loop checks.
  bool found_nonfinite() override { return false; }

  void optimizer_step(const optim::AdamWConfig& config, const optim::AdamWStep& step) override {
    params_.adamw_update(oc::adamw_values(config, step), compute_);
  }

  double evaluate_loss_sum(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                           std::size_t rows) override {
    upload(tokens, targets);
    gpt_.forward(params_.compute(), tokens_.data(), targets_.data(), 0.0f, compute_);
    request_losses();
    losses_ready_.synchronize();
    const std::size_t positions = rows * static_cast<std::size_t>(gpt_.seq_len());
    return std::accumulate(host_losses_.data(), host_losses_.data() + positions, 0.0);
  }

  const shard::StepTiming& timing() const override { return timing_; }

  comm::LinkBytes own_bytes() const override {
    comm::LinkBytes bytes;
    if (intra_) bytes += intra_->counters().total();
    if (intra_staged_) bytes += intra_staged_->counters().total();
    if (inter_) bytes += inter_->counters().total();
    return bytes;
  }

  // Every rank holds the whole model (no_shard): the views cover every unit; world rank 0 writes.
  std::vector<ckpt::UnitShard> checkpoint_shards() override {
    if (host_params_.empty()) {
      host_params_.resize(total_);
      host_m_.resize(total_);
      host_v_.resize(total_);
    }
    dc::copy_to_host(host_params_.data(), params_.master(), total_, compute_);
    dc::copy_to_host(host_m_.data(), params_.exp_avg(), total_, compute_);
    dc::copy_to_host(host_v_.data(), params_.exp_avg_sq(), total_, compute_);
    compute_.synchronize();
    std::vector<ckpt::UnitShard> shards;
    for (int u = 0; u < layout_.num_units(); ++u) {
      const std::size_t at = gpt_.unit_offset(u);
      shards.push_back(
          {u, 0, layout_.unit(u).numel, host_params_.data() + at, host_m_.data() + at, host_v_.data() + at});
    }
    return shards;
  }

  void checkpoint_loaded() override {
    dc::copy_to_device(params_.master(), host_params_.data(), total_, compute_);
    dc::copy_to_device(params_.exp_avg(), host_m_.data(), total_, compute_);
    dc::copy_to_device(params_.exp_avg_sq(), host_v_.data(), total_, compute_);
    params_.refresh_compute_copy(compute_);
    compute_.synchronize();
  }

  bool is_checkpoint_writer() const override { return mesh_.replicate().rank() == 0; }

 private:
  // Issues the all-reduce of one unit's gradient on the NCCL stream, after the compute work enqueued so far.
  void reduce_unit(int unit) {
    // One event serves every unit: a stream waiting for an event waits for its record at the time of the call.
    unit_ready_.record(compute_);
    intra_->wait_for(unit_ready_.get());
    if (pending_.empty()) comm_start_.record(intra_->stream());
    float* g = params_.grads() + gpt_.unit_offset(unit);
    pending_.push_back(intra_->all_reduce_async(g, g, layout_.unit(unit).numel, DType::f32, comm::ReduceOp::sum));
  }

  void upload(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) {
    if (tokens.size() != gpt_.tokens() || targets.size() != gpt_.tokens()) {
      throw_internal("cuda backend: a micro-batch of " + std::to_string(tokens.size()) + " tokens, expected " +
                     std::to_string(gpt_.tokens()));
    }
    // The pinned buffers are free again: the copies of the previous micro-batch's tokens came before its forward,
    // whose losses the host has waited for.
    std::memcpy(host_tokens_.data(), tokens.data(), tokens.size_bytes());
    std::memcpy(host_targets_.data(), targets.data(), targets.size_bytes());
    dc::copy_to_device(tokens_.data(), host_tokens_.data(), tokens.size(), compute_);
    dc::copy_to_device(targets_.data(), host_targets_.data(), targets.size(), compute_);
  }

  // After the forward: the per-position losses go to pinned host memory, and an event marks them.
  void request_losses() {
    dc::copy_to_host(host_losses_.data(), gpt_.losses(), gpt_.tokens(), compute_);
    losses_ready_.record(compute_);
  }

  // Waits for the losses of the last forward (not for the work enqueued after it): their mean, summed in double.
  float mean_loss() {
    losses_ready_.synchronize();
    const double sum = std::accumulate(host_losses_.data(), host_losses_.data() + gpt_.tokens(), 0.0);
    return static_cast<float>(sum / static_cast<double>(gpt_.tokens()));
  }

  const model::ModelLayout& layout_;
  comm::ProcessMesh& mesh_;
  device::SelectedDevice selected_;
  int world_size_;
  dc::Stream compute_;
  model::cuda::GptCuda<bf16_t> gpt_;
  std::size_t total_;
  cuda::GptParameters params_;
  dc::DeviceBuffer<std::int32_t> tokens_, targets_;
  dc::PinnedBuffer<std::int32_t> host_tokens_, host_targets_;
  dc::PinnedBuffer<float> host_losses_;
  dc::DeviceBuffer<double> norm_, norm_scratch_;
  std::unique_ptr<comm::NcclCommunicator> intra_;
  std::unique_ptr<comm::Communicator> intra_staged_;  // comm.intra=mpi: ranks may share a GPU
  std::unique_ptr<comm::Communicator> inter_;
  dc::Event unit_ready_;
  dc::Event losses_ready_;
  std::vector<comm::CommHandle> pending_;
  dc::Event comm_start_{dc::Event::Timing::on}, comm_done_{dc::Event::Timing::on},
      backward_done_{dc::Event::Timing::on};
  shard::StepTiming timing_;
  std::vector<float> host_params_, host_m_, host_v_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const TrainOptions& options, const model::ModelLayout& layout,
                                           comm::ProcessMesh& mesh, MemoryAccountant& memory, const Logger& log) {
  return std::make_unique<CudaBackend>(options, layout, mesh, memory, log);
}

}  // namespace hsdp::train
