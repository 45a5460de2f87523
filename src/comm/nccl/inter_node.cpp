// comm.inter = mpi | nccl for device buffers (see make_inter_node_communicator in nccl.hpp).
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI: MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support
#endif

#include <string>

#include "hsdp/comm/nccl.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/device/cuda/runtime.hpp"

namespace hsdp::comm {
namespace {

namespace cuda = hsdp::device::cuda;

// MPI collectives on device buffers: through the device pointers where MPI is CUDA-aware and the collective
// does no arithmetic, otherwise staged through pinned host buffers. One operation at a time.
class DeviceMpiCommunicator final : public Communicator {
 public:
  DeviceMpiCommunicator(std::unique_ptr<MpiCommunicator> mpi, cudaStream_t compute, bool cuda_aware)
      : mpi_(std::move(mpi)), compute_(compute), cuda_aware_(cuda_aware) {}
  ~DeviceMpiCommunicator() override { finish_current(); }

  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  const std::string& name() const override { return mpi_->name(); }
  std::span<const int> node_of_rank() const override { return mpi_->node_of_rank(); }
  const ByteCounters& counters() const override { return mpi_->counters(); }
  void reset_counters() override { mpi_->reset_counters(); }
  std::uint64_t sequence() const override { return mpi_->sequence(); }

  using Communicator::all_gather_async;
  using Communicator::all_reduce_async;
  using Communicator::reduce_scatter_async;

  CommHandle all_reduce_async(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) override {
    const std::size_t bytes = count * size_of(t);
    stage_in(send, bytes);
    return started(mpi_->all_reduce_async(send_.data(), recv_.data(), count, t, op), recv, bytes);
  }

  CommHandle reduce_scatter_async(const void* send, void* recv, std::size_t recv_count, DType t, ReduceOp op) override {
    const std::size_t bytes = recv_count * size_of(t);
    stage_in(send, bytes * static_cast<std::size_t>(size()));  // send == recv: the full input is in recv
    return started(mpi_->reduce_scatter_async(send_.data(), recv_.data(), recv_count, t, op), recv, bytes);
  }

  CommHandle all_gather_async(const void* send, void* recv, std::size_t send_count, DType t) override {
    const std::size_t bytes = send_count * size_of(t);
    if (cuda_aware_) {
      prepare_direct();
      return direct(mpi_->all_gather_async(send, recv, send_count, t));
    }
    stage_in(send, bytes);
    grow(recv_, bytes * static_cast<std::size_t>(size()));
    return started(mpi_->all_gather_async(send_.data(), recv_.data(), send_count, t), recv,
                   bytes * static_cast<std::size_t>(size()));
  }

  CommHandle all_to_all_async(const void* send, void* recv, std::size_t count_per_peer, DType t) override {
    const std::size_t bytes = count_per_peer * size_of(t) * static_cast<std::size_t>(size());
    if (cuda_aware_) {
      prepare_direct();
      return direct(mpi_->all_to_all_async(send, recv, count_per_peer, t));
    }
    stage_in(send, bytes);
    return started(mpi_->all_to_all_async(send_.data(), recv_.data(), count_per_peer, t), recv, bytes);
  }

  CommHandle broadcast_async(void* buffer, std::size_t count, DType t, int root) override {
    const std::size_t bytes = count * size_of(t);
    if (cuda_aware_) {
      prepare_direct();
      return direct(mpi_->broadcast_async(buffer, count, t, root));
    }
    stage_in(buffer, bytes);
    return started(mpi_->broadcast_async(send_.data(), count, t, root), buffer, bytes, /*from_send=*/true);
  }

  CommHandle barrier_async() override {
    prepare_direct();
    return direct(mpi_->barrier_async());
  }

 private:
  // What finishes an operation: the MPI request, then the copy of the host result back to the device.
  struct Operation {
    CommHandle request;
    void* device_out = nullptr;
    const void* host_out = nullptr;
    std::size_t bytes = 0;
    cudaStream_t stream = nullptr;
    bool finished = false;

    void finish() {
      if (finished) return;
      request.wait();
      if (bytes > 0) {
        cuda::check(cudaMemcpyAsync(device_out, host_out, bytes, cudaMemcpyHostToDevice, stream),
                    "cudaMemcpyAsync (MPI staging, host to device)");
        cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (MPI staging)");
      }
      finished = true;
    }
    bool test() {
      if (!finished && request.done()) finish();
      return finished;
    }
  };

  class StagedOp final : public PendingOp {
   public:
    explicit StagedOp(std::shared_ptr<Operation> op) : op_(std::move(op)) {}
    ~StagedOp() override { op_->finish(); }
    StagedOp(const StagedOp&) = delete;
    StagedOp& operator=(const StagedOp&) = delete;
    void wait() override { op_->finish(); }
    bool test() override { return op_->test(); }

   private:
    std::shared_ptr<Operation> op_;
  };

  void finish_current() {
    if (current_) current_->finish();
    current_.reset();
  }

  void wait_for_inputs() {
    if (compute_ != nullptr) cuda::check(cudaStreamSynchronize(compute_), "cudaStreamSynchronize (MPI inputs)");
  }

  static void grow(cuda::PinnedBuffer<std::byte>& buffer, std::size_t bytes) {
    if (buffer.size() < bytes) buffer = cuda::PinnedBuffer<std::byte>(bytes);
  }

  // Completes the previous operation, waits for the inputs and copies `bytes` of device data into send_.
  void stage_in(const void* device_in, std::size_t bytes) {
    finish_current();
    wait_for_inputs();
    grow(send_, bytes);
    grow(recv_, bytes);
    if (bytes > 0) {
      cuda::check(cudaMemcpyAsync(send_.data(), device_in, bytes, cudaMemcpyDeviceToHost, stream_.get()),
                  "cudaMemcpyAsync (MPI staging, device to host)");
      stream_.synchronize();
    }
  }

  CommHandle started(CommHandle request, void* device_out, std::size_t bytes, bool from_send = false) {
    auto op = std::make_shared<Operation>();
    op->request = std::move(request);
    op->device_out = device_out;
    op->host_out = from_send ? static_cast<const void*>(send_.data()) : static_cast<const void*>(recv_.data());
    op->bytes = bytes;
    op->stream = stream_.get();
    current_ = op;
    return CommHandle(std::make_unique<StagedOp>(std::move(op)));
  }

  CommHandle direct(CommHandle request) {
    auto op = std::make_shared<Operation>();
    op->request = std::move(request);
    current_ = op;
    return CommHandle(std::make_unique<StagedOp>(std::move(op)));
  }

  // Before MPI reads device memory itself: the previous operation is complete and the inputs are ready.
  void prepare_direct() {
    finish_current();
    wait_for_inputs();
  }

  std::unique_ptr<MpiCommunicator> mpi_;
  cudaStream_t compute_;
  bool cuda_aware_;
  cuda::Stream stream_;
  cuda::PinnedBuffer<std::byte> send_;
  cuda::PinnedBuffer<std::byte> recv_;
  std::shared_ptr<Operation> current_;
};

}  // namespace

bool mpi_is_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

std::unique_ptr<Communicator> make_inter_node_communicator(InterNodeBackend backend, const MpiCommunicator& group,
                                                           std::string name, cudaStream_t compute,
                                                           const CommOptions& options, const Logger& logger) {
  if (backend == InterNodeBackend::nccl) {
    return std::make_unique<NcclCommunicator>(group, std::move(name), options, logger);
  }
  // The MPI variant keeps group's options and logger (its duplicate inherits them).
  // A private duplicate (collective over group): this communicator's requests never mix with group's.
  auto own = group.split(0, group.rank(), std::move(name));
  return std::make_unique<DeviceMpiCommunicator>(std::move(own), compute, mpi_is_cuda_aware());
}

}  // namespace hsdp::comm
