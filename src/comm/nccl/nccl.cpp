#include "hsdp/comm/nccl.hpp"

#include <nccl.h>

#include <cstdio>
#include <string>

#include "hsdp/comm/sequence_board.hpp"
#include "hsdp/comm/traffic.hpp"
#include "hsdp/comm/watchdog.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/timer.hpp"
#include "hsdp/device/cuda/runtime.hpp"

namespace hsdp::comm {
namespace {

namespace cuda = hsdp::device::cuda;

void check_nccl(ncclResult_t result, const std::string& what) {
  if (result != ncclSuccess) {
    const char* detail = ncclGetLastError(nullptr);
    throw Error(ErrorKind::comm, what + " failed: " + ncclGetErrorString(result) +
                                     (detail != nullptr && *detail != '\0' ? " (" + std::string(detail) + ")" : ""));
  }
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i8:
      return ncclInt8;
    case DType::u8:
      return ncclUint8;
  }
  throw_internal("nccl: unknown element type");
}

}  // namespace

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  int device = 0;
  cuda::Stream stream;
  cuda::Event last;  // recorded by make_stream_wait / synchronize
  cuda::DeviceBuffer<float> barrier_word{1};

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (comm == nullptr) return;
    cudaStreamSynchronize(stream.get());
    ncclCommDestroy(comm);
  }
};

namespace {

// A collective in flight: an event recorded after it on the communicator's stream; the shared watchdog waits on it.
class NcclPendingOp final : public WatchedOp {
 public:
  // keep_alive: the communicator's state, so that the NCCL communicator outlives this op.
  NcclPendingOp(std::shared_ptr<void> keep_alive, ncclComm_t comm, OpIdentity identity)
      : WatchedOp(std::move(identity)), keep_alive_(std::move(keep_alive)), comm_(comm) {}
  ~NcclPendingOp() override {
    if (!done()) wait();
  }
  NcclPendingOp(const NcclPendingOp&) = delete;
  NcclPendingOp& operator=(const NcclPendingOp&) = delete;

  void record(cudaStream_t stream) { event_.record(stream); }

 protected:
  bool poll() override {
    const cudaError_t status = cudaEventQuery(event_.get());
    if (status == cudaSuccess) return true;
    if (status != cudaErrorNotReady) fail(std::string("CUDA error ") + cudaGetErrorName(status));
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
      fail(std::string("NCCL asynchronous error: ") + ncclGetErrorString(async));
    }
    return false;
  }
  void before_abort() const override { ncclCommAbort(comm_); }  // frees the GPU from a hung collective's kernels

 private:
  std::shared_ptr<void> keep_alive_;
  ncclComm_t comm_;
  cuda::Event event_;
};

}  // namespace

NcclCommunicator::NcclCommunicator(const MpiCommunicator& group, std::string name, const CommOptions& options,
                                   const Logger& logger)
    : impl_(std::make_shared<Impl>()),
      name_(std::move(name)),
      rank_(group.rank()),
      size_(group.size()),
      node_of_rank_(group.node_of_rank().begin(), group.node_of_rank().end()),
      options_(options),
      logger_(logger) {
  cuda::check(cudaGetDevice(&impl_->device), "cudaGetDevice");
  // The id with rank 0's outcome, so that a failure there (no usable network interface) is thrown by every member
  // alike instead of leaving the others in the broadcast.
  struct {
    ncclUniqueId id;
    char error[512];
  } unique{};
  if (rank_ == 0) {
    try {
      check_nccl(ncclGetUniqueId(&unique.id), "ncclGetUniqueId for group '" + name_ + "'");
    } catch (const Error& e) {
      std::snprintf(unique.error, sizeof unique.error, "%s", e.what());
    }
  }
  const int code = MPI_Bcast(&unique, static_cast<int>(sizeof unique), MPI_BYTE, 0, group.raw());
  if (code != MPI_SUCCESS) throw Error(ErrorKind::comm, "MPI_Bcast of the NCCL id of group '" + name_ + "' failed");
  if (unique.error[0] != '\0') throw Error(ErrorKind::comm, std::string(unique.error) + " (on the group's rank 0)");
  const ncclUniqueId& id = unique.id;
  check_nccl(ncclCommInitRank(&impl_->comm, size_, id, rank_),
             "ncclCommInitRank for group '" + name_ + "' (rank " + std::to_string(rank_) + " of " +
                 std::to_string(size_) + ", CUDA device " + std::to_string(impl_->device) + ")");
  if (size_ > 1 && group.side_channel() != nullptr) seat_ = group.side_channel()->take_seat(group.raw());
}

NcclCommunicator::~NcclCommunicator() = default;

cudaStream_t NcclCommunicator::stream() const {
  return impl_->stream.get();
}

int NcclCommunicator::cuda_device() const {
  return impl_->device;
}

void NcclCommunicator::wait_for(cudaEvent_t event) {
  cuda::check(cudaStreamWaitEvent(impl_->stream.get(), event, 0), "cudaStreamWaitEvent (group '" + name_ + "')");
}

void NcclCommunicator::make_stream_wait(cudaStream_t compute) {
  impl_->last.record(impl_->stream.get());
  impl_->last.make_wait(compute);
}

void NcclCommunicator::synchronize() {
  // An op of its own (counted as nothing) whose wait() carries the watchdog.
  OpIdentity info{Collective::barrier, name_, sequence_, size_, rank_, options_.timeout_s, &logger_, "NCCL", seat_};
  auto op = std::make_unique<NcclPendingOp>(impl_, impl_->comm, std::move(info));
  op->record(impl_->stream.get());
  op->wait();
}

CommHandle NcclCommunicator::all_reduce_async(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) {
  check_reduction(t, op, name_, Collective::all_reduce);
  check_nccl(ncclAllReduce(send, recv, count, nccl_type(t), op == ReduceOp::avg ? ncclAvg : ncclSum, impl_->comm,
                           impl_->stream.get()),
             "ncclAllReduce on '" + name_ + "'");
  return issued(Collective::all_reduce, count, t);
}

CommHandle NcclCommunicator::reduce_scatter_async(const void* send, void* recv, std::size_t recv_count, DType t,
                                                  ReduceOp op) {
  check_reduction(t, op, name_, Collective::reduce_scatter);
  const ncclRedOp_t nccl_op = op == ReduceOp::avg ? ncclAvg : ncclSum;
  const std::size_t block_bytes = recv_count * size_of(t);
  if (send == recv) {
    // NCCL's in-place form leaves the block at this rank's offset; move it to the start as the interface says.
    auto* own = static_cast<char*>(recv) + static_cast<std::size_t>(rank_) * block_bytes;
    check_nccl(ncclReduceScatter(recv, own, recv_count, nccl_type(t), nccl_op, impl_->comm, impl_->stream.get()),
               "ncclReduceScatter on '" + name_ + "'");
    if (rank_ != 0 && block_bytes > 0) {
      cuda::check(cudaMemcpyAsync(recv, own, block_bytes, cudaMemcpyDeviceToDevice, impl_->stream.get()),
                  "cudaMemcpyAsync after in-place reduce_scatter");
    }
  } else {
    check_nccl(ncclReduceScatter(send, recv, recv_count, nccl_type(t), nccl_op, impl_->comm, impl_->stream.get()),
               "ncclReduceScatter on '" + name_ + "'");
  }
  return issued(Collective::reduce_scatter, recv_count, t);
}

CommHandle NcclCommunicator::all_gather_async(const void* send, void* recv, std::size_t send_count, DType t) {
  check_nccl(ncclAllGather(send, recv, send_count, nccl_type(t), impl_->comm, impl_->stream.get()),
             "ncclAllGather on '" + name_ + "'");
  return issued(Collective::all_gather, send_count, t);
}

CommHandle NcclCommunicator::all_to_all_async(const void* send, void* recv, std::size_t count_per_peer, DType t) {
  if (send == recv && size_ > 1) {
    throw_internal("all_to_all on group '" + name_ + "' (NCCL): send and recv must be different buffers");
  }
  const std::size_t block_bytes = count_per_peer * size_of(t);
  const auto* from = static_cast<const char*>(send);
  auto* to = static_cast<char*>(recv);
  // Point-to-point pairs in one group call: NCCL schedules them together (what ncclAlltoAll does, on any NCCL).
  check_nccl(ncclGroupStart(), "ncclGroupStart on '" + name_ + "'");
  for (int peer = 0; peer < size_; ++peer) {
    const auto offset = static_cast<std::size_t>(peer) * block_bytes;
    check_nccl(ncclSend(from + offset, count_per_peer, nccl_type(t), peer, impl_->comm, impl_->stream.get()),
               "ncclSend on '" + name_ + "'");
    check_nccl(ncclRecv(to + offset, count_per_peer, nccl_type(t), peer, impl_->comm, impl_->stream.get()),
               "ncclRecv on '" + name_ + "'");
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd (all_to_all) on '" + name_ + "'");
  return issued(Collective::all_to_all, count_per_peer, t);
}

CommHandle NcclCommunicator::broadcast_async(void* buffer, std::size_t count, DType t, int root) {
  if (root < 0 || root >= size_) {
    throw_internal("broadcast on group '" + name_ + "': root " + std::to_string(root) +
                   " is not a rank of a group of " + std::to_string(size_));
  }
  check_nccl(ncclBroadcast(buffer, buffer, count, nccl_type(t), root, impl_->comm, impl_->stream.get()),
             "ncclBroadcast on '" + name_ + "'");
  return issued(Collective::broadcast, count, t, root);
}

CommHandle NcclCommunicator::barrier_async() {
  // NCCL has no barrier: a one-element all-reduce stands in for it (0 bytes in the traffic model, as MPI's).
  float* word = impl_->barrier_word.data();
  check_nccl(ncclAllReduce(word, word, 1, ncclFloat32, ncclSum, impl_->comm, impl_->stream.get()),
             "ncclAllReduce (barrier) on '" + name_ + "'");
  return issued(Collective::barrier, 0, DType::u8);
}

CommHandle NcclCommunicator::issued(Collective c, std::size_t count, DType t, int root) {
  ++sequence_;
  if (seat_ != nullptr) seat_->publish(sequence_);
  counters_.record(c, traffic_bytes(c, count, size_of(t), rank_, node_of_rank_, root));
  OpIdentity info{c, name_, sequence_, size_, rank_, options_.timeout_s, &logger_, "NCCL", seat_};
  auto op = std::make_unique<NcclPendingOp>(impl_, impl_->comm, std::move(info));
  op->record(impl_->stream.get());
  return CommHandle(std::move(op));
}

}  // namespace hsdp::comm
