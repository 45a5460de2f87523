// DeviceSelfCommunicator: the collectives of a one-rank group over device memory (nccl.hpp).
#include <string>

#include "hsdp/comm/nccl.hpp"
#include "hsdp/comm/traffic.hpp"
#include "hsdp/core/error.hpp"

namespace hsdp::comm {

namespace cuda = hsdp::device::cuda;

namespace {

// The copy (or nothing) recorded on the communicator's stream: done once its event has completed.
class SelfOp final : public PendingOp {
 public:
  explicit SelfOp(cuda::Event event) : event_(std::move(event)) {}
  void wait() override { event_.synchronize(); }
  bool test() override { return event_.query(); }

 private:
  cuda::Event event_;
};

}  // namespace

DeviceSelfCommunicator::DeviceSelfCommunicator(const MpiCommunicator& group)
    : name_(group.name()), node_of_rank_(group.node_of_rank().begin(), group.node_of_rank().end()) {
  if (group.size() != 1) {
    throw_internal("DeviceSelfCommunicator over group '" + name_ + "' of " + std::to_string(group.size()) +
                   " ranks");
  }
}

CommHandle DeviceSelfCommunicator::copied(Collective c, const void* send, void* recv, std::size_t count, DType t) {
  counters_.record(c, traffic_bytes(c, count, size_of(t), 0, node_of_rank_, 0));
  ++sequence_;
  const std::size_t bytes = count * size_of(t);
  if (send != recv && bytes > 0) {
    cuda::check(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, stream_),
                "cudaMemcpyAsync (" + std::string(to_string(c)) + " of one rank, group " + name_ + ")");
  }
  cuda::Event event;
  event.record(stream_);
  return CommHandle(std::make_unique<SelfOp>(std::move(event)));
}

CommHandle DeviceSelfCommunicator::all_reduce_async(const void* send, void* recv, std::size_t count, DType t,
                                                    ReduceOp op) {
  check_reduction(t, op, name_, Collective::all_reduce);
  return copied(Collective::all_reduce, send, recv, count, t);
}

CommHandle DeviceSelfCommunicator::reduce_scatter_async(const void* send, void* recv, std::size_t recv_count, DType t,
                                                        ReduceOp op) {
  check_reduction(t, op, name_, Collective::reduce_scatter);
  return copied(Collective::reduce_scatter, send, recv, recv_count, t);
}

CommHandle DeviceSelfCommunicator::all_gather_async(const void* send, void* recv, std::size_t send_count, DType t) {
  return copied(Collective::all_gather, send, recv, send_count, t);
}

CommHandle DeviceSelfCommunicator::all_to_all_async(const void* send, void* recv, std::size_t count_per_peer,
                                                    DType t) {
  return copied(Collective::all_to_all, send, recv, count_per_peer, t);
}

CommHandle DeviceSelfCommunicator::broadcast_async(void* buffer, std::size_t count, DType t, int) {
  return copied(Collective::broadcast, buffer, buffer, count, t);
}

CommHandle DeviceSelfCommunicator::barrier_async() {
  return copied(Collective::barrier, nullptr, nullptr, 0, DType::u8);
}

}  // namespace hsdp::comm
