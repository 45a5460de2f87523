#pragma once
// The GPU side of the comm layer (target hsdp_comm_nccl, built when CUDA and NCCL are found):
//
// NcclCommunicator: comm::Communicator over DEVICE buffers, for a group of ranks with one GPU each (the shard
// group inside a node). Collectives are enqueued on the communicator's own stream and return at once; the
// handle's wait() blocks the host until the collective's event has completed, under the same watchdog as
// MpiCommunicator (a collective not done within CommOptions::timeout_s, or an NCCL asynchronous error, ends
// the job with exit 4 and a line naming the collective, the group, the sequence number and the ranks that have
// not issued it, read from the communicator's own seat on `group`'s side channel, see watchdog.hpp). Byte
// counters follow comm::traffic_bytes exactly as the MPI implementation does. avg reduces with ncclAvg.
// Ordering with compute, on the GPU and without host waits: wait_for(event) makes the collectives issued next
// wait for an event recorded on the compute stream (an all-gather after the optimizer kernel), and
// make_stream_wait(stream) makes a compute stream wait for every collective issued so far.
//
// make_inter_node_communicator: the communicator for the groups that cross nodes (comm.inter = nccl | mpi),
// also over device buffers. See its comment for what the mpi variant does with and without CUDA-aware MPI.
#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hsdp/comm/communicator.hpp"
#include "hsdp/comm/mesh.hpp"
#include "hsdp/comm/mpi.hpp"
#include "hsdp/comm/staged.hpp"
#include "hsdp/core/log.hpp"
#include "hsdp/device/cuda/runtime.hpp"

namespace hsdp::comm {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `group`: its rank 0 creates the ncclUniqueId, MPI_Bcast over `group` hands it to the
  // others (set-up traffic, not counted), then ncclCommInitRank on the calling thread's current CUDA device
  // (hsdp::device::select_device sets it). NCCL ranks are `group`'s ranks, so node_of_rank is group's.
  // Also takes its own seat on `group`'s side channel (collective too), for its own sequence numbers.
  NcclCommunicator(const MpiCommunicator& group, std::string name, const CommOptions& options, const Logger& logger);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  std::span<const int> node_of_rank() const override { return node_of_rank_; }

  using Communicator::all_gather_async;
  using Communicator::all_reduce_async;
  using Communicator::reduce_scatter_async;

  // Device pointers. In place as in Communicator: all_reduce send == recv; reduce_scatter send == recv (the
  // full input in recv, this rank's block lands at its start); all_gather send == recv's own block.
  // all_to_all is not in place. Types: f32, f64, bf16, f16, int8 (sum only), uint8 (no reductions).
  CommHandle all_reduce_async(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) override;
  CommHandle reduce_scatter_async(const void* send, void* recv, std::size_t recv_count, DType t, ReduceOp op) override;
  CommHandle all_gather_async(const void* send, void* recv, std::size_t send_count, DType t) override;
  CommHandle all_to_all_async(const void* send, void* recv, std::size_t count_per_peer, DType t) override;
  CommHandle broadcast_async(void* buffer, std::size_t count, DType t, int root) override;
  CommHandle barrier_async() override;

  const ByteCounters& counters() const override { return counters_; }
  void reset_counters() override { counters_ = {}; }
  std::uint64_t sequence() const override { return sequence_; }

  // The stream the collectives run on.
  cudaStream_t stream() const;
  // Collectives issued after this call wait (on the GPU) for `event`, e.g. recorded after the optimizer kernel.
  void wait_for(cudaEvent_t event);
  // Work issued to `compute` after this call waits (on the GPU) for every collective issued so far.
  void make_stream_wait(cudaStream_t compute);
  // The host waits for every collective issued so far, under the watchdog.
  void synchronize();
  int cuda_device() const;

 private:
  CommHandle issued(Collective c, std::size_t count, DType t, int root = 0);

  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with pending ops: the NCCL communicator outlives every handle
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> node_of_rank_;
  CommOptions options_;
  const Logger& logger_;
  ByteCounters counters_;
  std::uint64_t sequence_ = 0;
  std::shared_ptr<BoardSeat> seat_;  // null for one rank; pending ops hold it weakly
};

// HostStaging on one GPU (staged.hpp), for MPI over device memory: pinned host buffers (cudaMallocHost; the
// StagedCommunicator's pool keeps them, so a step allocates none after its first), copies by cudaMemcpyAsync on the
// stream set by use_stream (the queue's: a copy in is ordered after the kernels that produced its input, a copy back
// before the work enqueued after the collective is seen complete), each followed by an event from a pool of its own
// that the host polls (done) or waits for (wait). A fence is such an event alone.
class CudaStaging final : public HostStaging {
 public:
  explicit CudaStaging(cudaStream_t stream);
  // On a stream it shares the ownership of (each of the mesh's staged groups its own: see device_carrier).
  explicit CudaStaging(std::shared_ptr<device::cuda::Stream> stream);
  ~CudaStaging() override;
  CudaStaging(const CudaStaging&) = delete;
  CudaStaging& operator=(const CudaStaging&) = delete;

  std::string_view name() const override { return "cuda"; }
  void use_stream(cudaStream_t stream) { stream_ = stream; }
  HostBlock allocate(std::size_t bytes) override;
  std::unique_ptr<StagedCopy> to_host(const void* device, void* host, std::size_t bytes) override;
  std::unique_ptr<StagedCopy> to_device(const void* host, void* device, std::size_t bytes) override;
  std::unique_ptr<StagedCopy> fence() override;

  struct Events;

 private:
  std::unique_ptr<StagedCopy> recorded();
  std::shared_ptr<device::cuda::Stream> owned_;
  cudaStream_t stream_;
  std::shared_ptr<Events> events_;  // shared with the copies in flight
};

// The collectives of a group of one rank over device memory: each is its own result, so a copy from send to recv
// (cudaMemcpyAsync on a stream of its own; nothing where in place) and an event that the handle polls. The queues
// issue a collective only once the work before it has completed, so the copy needs no other order. Byte counters
// and call counts as the MPI communicator's of one rank (no bytes).
class DeviceSelfCommunicator final : public Communicator {
 public:
  explicit DeviceSelfCommunicator(const MpiCommunicator& group);

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  std::span<const int> node_of_rank() const override { return node_of_rank_; }

  using Communicator::all_gather_async;
  using Communicator::all_reduce_async;
  using Communicator::reduce_scatter_async;

  CommHandle all_reduce_async(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) override;
  CommHandle reduce_scatter_async(const void* send, void* recv, std::size_t recv_count, DType t, ReduceOp op) override;
  CommHandle all_gather_async(const void* send, void* recv, std::size_t send_count, DType t) override;
  CommHandle all_to_all_async(const void* send, void* recv, std::size_t count_per_peer, DType t) override;
  CommHandle broadcast_async(void* buffer, std::size_t count, DType t, int root) override;
  CommHandle barrier_async() override;

  const ByteCounters& counters() const override { return counters_; }
  void reset_counters() override { counters_ = {}; }
  std::uint64_t sequence() const override { return sequence_; }

 private:
  CommHandle copied(Collective c, const void* send, void* recv, std::size_t count, DType t);

  std::string name_;
  std::vector<int> node_of_rank_;
  device::cuda::Stream stream_;
  ByteCounters counters_;
  std::uint64_t sequence_ = 0;
};

// What carries the mesh's groups over device memory on GPUs (MeshOptions::carry): a group within one node by `intra`
// (comm.intra), one that crosses nodes by `inter` (comm.inter). nccl: an NcclCommunicator over the group (one GPU
// per rank: the caller checks that the node's ranks do not share one). mpi: a
// StagedCommunicator over it with CudaStaging on a stream of the group's own (the stream queues issue a collective
// only once the work before it on its queue has completed, so the copy needs no other order); with CUDA-aware MPI
// and `stage` not host, the collectives that only move bytes get the device pointers. Collective over each group, as
// the mesh builds it; the CUDA device must be selected first (select_device).
MeshCarrier device_carrier(Transport intra, Transport inter, Staging stage, const CommOptions& options,
                           const Logger& logger);

// comm.inter's values (types.hpp: parse_transport).
using InterNodeBackend = Transport;

// True when the MPI library says it can read and write device memory: MPIX_Query_cuda_support() from
// mpi-ext.h where the MPI build has it (Open MPI built with CUDA), false otherwise (or when the header lacks it).
bool mpi_is_cuda_aware();

// The communicator over DEVICE buffers for a group that crosses nodes (`group`: e.g. the replicate group of
// HYBRID_SHARD), collective over it:
//   nccl: an NcclCommunicator over the group (NCCL's own network transports between nodes).
//   mpi:  a StagedCommunicator (staged.hpp) over a private duplicate of `group`, with CudaStaging on `compute`: the
//         copies are ordered after the work issued to `compute` before each call. With CUDA-aware MPI, all_gather,
//         all_to_all and broadcast hand the device pointers to MPI once that work is done; reductions (whose bf16/f16
//         sums and avg run on the host) and every collective without CUDA-aware MPI are staged: device -> pinned
//         host buffer -> MPI -> device. Counted by the same traffic model (the duplicate's counters).
std::unique_ptr<Communicator> make_inter_node_communicator(InterNodeBackend backend, const MpiCommunicator& group,
                                                           std::string name, cudaStream_t compute,
                                                           const CommOptions& options, const Logger& logger);

}  // namespace hsdp::comm
