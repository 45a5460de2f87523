// NcclCommunicator and make_inter_node_communicator under MPI, one rank per visible GPU (run_with_gpus.sh
// launches it with -np <GPUs>; on a single GPU that is one rank, which still exercises initialization, every
// collective, the in-place forms, ordering with a compute stream and the counters, whose bytes are then 0).
// Without a visible device it prints the skip line and exits 77 before starting MPI.
// Values are small integers, exact in every type, so results are compared exactly.
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "../mpi_gtest.hpp"
#include "hsdp/comm/nccl.hpp"
#include "hsdp/comm/topology.hpp"
#include "hsdp/comm/traffic.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/device/cuda/runtime.hpp"
#include "hsdp/device/select_device.hpp"

namespace hsdp::comm::testing {
namespace {

namespace cuda = hsdp::device::cuda;

// ncclAvg may scale each input by 1/n before summing instead of dividing the sum: an ulp or two apart.
constexpr float kAvgRel = 1e-6f;

struct NcclTestContext {
  MpiCommunicator& world;
  NcclCommunicator& nccl;
  cuda::Stream& compute;
  const Logger& logger;
};

NcclTestContext*& context_slot() {
  static NcclTestContext* slot = nullptr;
  return slot;
}
NcclTestContext& ctx() {
  return *context_slot();
}

template <typename T>
cuda::DeviceBuffer<T> upload(const std::vector<T>& host) {
  cuda::DeviceBuffer<T> device(host.size());
  cuda::copy_to_device(device.data(), host.data(), host.size(), ctx().compute);
  ctx().compute.synchronize();
  return device;
}

template <typename T>
std::vector<T> download(const cuda::DeviceBuffer<T>& device, std::size_t count = 0) {
  std::vector<T> host(count ? count : device.size());
  cuda::copy_to_host(host.data(), device.data(), host.size(), ctx().compute);
  ctx().compute.synchronize();
  return host;
}

std::vector<float> bf16_values(const std::vector<bf16_t>& x) {
  std::vector<float> out;
  for (const bf16_t v : x) out.push_back(bf16_to_float(v));
  return out;
}

// Expected counters, built call by call with the traffic model.
struct Expected {
  Communicator& comm;
  ByteCounters counters;
  std::uint64_t calls = 0;
  void add(Collective c, std::size_t count, DType t, int root = 0) {
    counters.record(c, traffic_bytes(c, count, size_of(t), comm.rank(), comm.node_of_rank(), root));
    ++calls;
  }
};

TEST(Nccl, AllReduce_SumAndAvg_EveryType_CountedByTheTrafficModel) {
  NcclCommunicator& nccl = ctx().nccl;
  const int n = nccl.size(), r = nccl.rank();
  nccl.reset_counters();
  const std::uint64_t seq0 = nccl.sequence();
  Expected expected{nccl, {}, 0};
  const std::size_t count = 1001;  // not a multiple of the group size
  std::vector<float> f(count);
  for (std::size_t i = 0; i < count; ++i) f[i] = static_cast<float>((r + 1) * static_cast<int>(i % 7 + 1));
  auto d_sum = upload(f), d_avg = upload(f);
  cuda::DeviceBuffer<float> d_out(count);
  nccl.all_reduce(d_sum.data(), d_out.data(), count, DType::f32, ReduceOp::sum);  // out of place
  expected.add(Collective::all_reduce, count, DType::f32);
  auto handle = nccl.all_reduce_async(d_avg.data(), d_avg.data(), count, DType::f32, ReduceOp::avg);  // in place
  expected.add(Collective::all_reduce, count, DType::f32);
  handle.wait();
  const auto sum = download(d_out), avg = download(d_avg);
  const int ranks_sum = n * (n + 1) / 2;
  for (std::size_t i = 0; i < count; ++i) {
    const auto k = static_cast<float>(i % 7 + 1);
    ASSERT_EQ(sum[i], static_cast<float>(ranks_sum) * k) << "f32 sum at " << i;
    const float want_avg = static_cast<float>(ranks_sum) * k / static_cast<float>(n);
    ASSERT_NEAR(avg[i], want_avg, kAvgRel * want_avg) << "f32 avg at " << i;
  }
  std::vector<bf16_t> b(count);
  std::vector<std::int8_t> q(count);
  for (std::size_t i = 0; i < count; ++i) {
    b[i] = float_to_bf16(static_cast<float>((r + 1) * static_cast<int>(i % 3 + 1)));
    q[i] = static_cast<std::int8_t>(i % 2 == 0 ? 1 : -1);
  }
  auto d_b = upload(b);
  auto d_q = upload(q);
  nccl.all_reduce(d_b.data(), d_b.data(), count, DType::bf16, ReduceOp::sum);
  expected.add(Collective::all_reduce, count, DType::bf16);
  nccl.all_reduce(d_q.data(), d_q.data(), count, DType::i8, ReduceOp::sum);
  expected.add(Collective::all_reduce, count, DType::i8);
  const auto bsum = bf16_values(download(d_b));
  const auto qsum = download(d_q);
  for (std::size_t i = 0; i < count; ++i) {
    ASSERT_EQ(bsum[i], static_cast<float>(ranks_sum * static_cast<int>(i % 3 + 1))) << "bf16 sum at " << i;
    ASSERT_EQ(qsum[i], static_cast<std::int8_t>(i % 2 == 0 ? n : -n)) << "int8 sum at " << i;
  }
  EXPECT_EQ(nccl.counters(), expected.counters);
  EXPECT_EQ(nccl.sequence(), seq0 + expected.calls);
}

TEST(Nccl, ReduceScatter_AllGather_AllToAll_Broadcast_Barrier_InPlaceForms) {
  NcclCommunicator& nccl = ctx().nccl;
  const int n = nccl.size(), r = nccl.rank();
  const auto un = static_cast<std::size_t>(n);
  nccl.reset_counters();
  Expected expected{nccl, {}, 0};
  const std::size_t block = 257;
  std::vector<float> full(block * un);
  for (std::size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(r + 1) + static_cast<float>(i % 11);
  // reduce_scatter, out of place and in place (the result lands at the start of recv).
  auto d_full = upload(full), d_inplace = upload(full);
  cuda::DeviceBuffer<float> d_block(block);
  nccl.reduce_scatter(d_full.data(), d_block.data(), block, DType::f32, ReduceOp::sum);
  expected.add(Collective::reduce_scatter, block, DType::f32);
  nccl.reduce_scatter(d_inplace.data(), d_inplace.data(), block, DType::f32, ReduceOp::sum);
  expected.add(Collective::reduce_scatter, block, DType::f32);
  const auto got_block = download(d_block), got_inplace = download(d_inplace, block);
  for (std::size_t j = 0; j < block; ++j) {
    const std::size_t i = static_cast<std::size_t>(r) * block + j;
    const float want = static_cast<float>(n * (n + 1) / 2) + static_cast<float>(n) * static_cast<float>(i % 11);
    ASSERT_EQ(got_block[j], want) << "reduce_scatter at " << j;
    ASSERT_EQ(got_inplace[j], want) << "in-place reduce_scatter at " << j;
  }
  // all_gather, out of place and from recv's own block.
  std::vector<float> mine(block, static_cast<float>(10 * (r + 1)));
  auto d_mine = upload(mine);
  cuda::DeviceBuffer<float> d_gathered(block * un);
  nccl.all_gather(d_mine.data(), d_gathered.data(), block, DType::f32);
  expected.add(Collective::all_gather, block, DType::f32);
  std::vector<float> own(block * un, -1.0f);
  for (std::size_t j = 0; j < block; ++j)
    own[static_cast<std::size_t>(r) * block + j] = static_cast<float>(10 * (r + 1));
  auto d_own = upload(own);
  nccl.all_gather(d_own.data() + static_cast<std::size_t>(r) * block, d_own.data(), block, DType::f32);
  expected.add(Collective::all_gather, block, DType::f32);
  const auto gathered = download(d_gathered), gathered_inplace = download(d_own);
  for (std::size_t i = 0; i < block * un; ++i) {
    ASSERT_EQ(gathered[i], static_cast<float>(10 * (i / block + 1))) << "all_gather at " << i;
    ASSERT_EQ(gathered_inplace[i], static_cast<float>(10 * (i / block + 1))) << "in-place all_gather at " << i;
  }
  // all_to_all on packed bytes: block p of rank r's send is (r, p); rank r receives (p, r) in block p.
  const std::size_t per_peer = 33;
  std::vector<std::uint8_t> send(per_peer * un);
  for (std::size_t i = 0; i < send.size(); ++i)
    send[i] = static_cast<std::uint8_t>(16 * r + static_cast<int>(i / per_peer));
  auto d_send = upload(send);
  cuda::DeviceBuffer<std::uint8_t> d_recv(per_peer * un);
  nccl.all_to_all(d_send.data(), d_recv.data(), per_peer, DType::u8);
  expected.add(Collective::all_to_all, per_peer, DType::u8);
  const auto received = download(d_recv);
  for (std::size_t i = 0; i < received.size(); ++i) {
    ASSERT_EQ(received[i], static_cast<std::uint8_t>(16 * static_cast<int>(i / per_peer) + r)) << "all_to_all at " << i;
  }
  // broadcast from the last rank, then a barrier (0 bytes).
  std::vector<bf16_t> data(99, float_to_bf16(static_cast<float>(r)));
  auto d_data = upload(data);
  nccl.broadcast(d_data.data(), data.size(), DType::bf16, n - 1);
  expected.add(Collective::broadcast, data.size(), DType::bf16, n - 1);
  nccl.barrier();
  expected.add(Collective::barrier, 0, DType::u8);
  for (const float v : bf16_values(download(d_data))) ASSERT_EQ(v, static_cast<float>(n - 1)) << "broadcast";
  EXPECT_EQ(nccl.counters(), expected.counters);
}

TEST(Nccl, CollectiveWaitsForAComputeEvent_AndComputeWaitsForTheCollective) {
  NcclCommunicator& nccl = ctx().nccl;
  cuda::Stream& compute = ctx().compute;
  const int n = nccl.size();
  const std::size_t count = 4096;
  cuda::DeviceBuffer<float> d_x(count);
  cuda::zero_on_device(d_x.data(), count, compute);
  compute.synchronize();
  // On the compute stream: 200 ms of work, then the values the collective must see (as an optimizer kernel would
  // write them). Without the event the all-reduce would sum the zeros.
  std::vector<float> ones(count, 1.0f);
  cuda::PinnedBuffer<float> staged(count);
  for (std::size_t i = 0; i < count; ++i) staged[i] = ones[i];
  cuda::spin_on_stream(compute, 200.0);
  cuda::copy_to_device(d_x.data(), staged.data(), count, compute);
  cuda::Event written;
  written.record(compute);
  nccl.wait_for(written.get());
  auto handle = nccl.all_reduce_async(d_x.data(), d_x.data(), count, DType::f32, ReduceOp::sum);
  // The compute stream reads the result only after the collective, with no host wait in between.
  nccl.make_stream_wait(compute);
  cuda::PinnedBuffer<float> result(count);
  cuda::copy_to_host(result.data(), d_x.data(), count, compute);
  compute.synchronize();
  for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(result[i], static_cast<float>(n)) << "element " << i;
  handle.wait();
}

TEST(Nccl, ReducingPackedInt4_IsAnInternalError) {
  cuda::DeviceBuffer<std::uint8_t> d(8);
  try {
    ctx().nccl.all_reduce(d.data(), d.data(), 8, DType::u8, ReduceOp::sum);
    FAIL() << "a uint8 all_reduce was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::internal);
  }
}

TEST(Nccl, InterNodeCommunicators_MpiStagedAndNccl_ReduceDeviceBuffers_CountLikeMpi) {
  const int n = ctx().world.size(), r = ctx().world.rank();
  for (const InterNodeBackend backend : {InterNodeBackend::mpi, InterNodeBackend::nccl}) {
    auto comm = make_inter_node_communicator(backend, ctx().world, "cross_node_test", ctx().compute.get(),
                                             CommOptions{60.0}, ctx().logger);
    Expected expected{*comm, {}, 0};
    const std::size_t count = 333;
    std::vector<float> x(count);
    for (std::size_t i = 0; i < count; ++i) x[i] = static_cast<float>((r + 1) * static_cast<int>(i % 5));
    auto d_x = upload(x);
    comm->all_reduce(d_x.data(), d_x.data(), count, DType::f32, ReduceOp::avg);
    expected.add(Collective::all_reduce, count, DType::f32);
    std::vector<bf16_t> mine(count, float_to_bf16(static_cast<float>(r + 1)));
    auto d_mine = upload(mine);
    cuda::DeviceBuffer<bf16_t> d_all(count * static_cast<std::size_t>(n));
    comm->all_gather(d_mine.data(), d_all.data(), count, DType::bf16);
    expected.add(Collective::all_gather, count, DType::bf16);
    const auto avg = download(d_x);
    const auto all = bf16_values(download(d_all));
    for (std::size_t i = 0; i < count; ++i) {
      const float want = static_cast<float>(n * (n + 1) / 2 * static_cast<int>(i % 5)) / static_cast<float>(n);
      ASSERT_NEAR(avg[i], want, kAvgRel * want)
          << "avg at " << i << (backend == InterNodeBackend::mpi ? " (mpi)" : " (nccl)");
    }
    for (std::size_t i = 0; i < all.size(); ++i) {
      ASSERT_EQ(all[i], static_cast<float>(i / count + 1)) << "all_gather at " << i;
    }
    EXPECT_EQ(comm->counters(), expected.counters);
    EXPECT_EQ(comm->sequence(), expected.calls);
  }
}

int run(int& argc, char** argv, const MpiEnvironment& mpi) {
  ::testing::InitGoogleTest(&argc, argv);
  Logger logger(mpi.world_rank(), host_name());
  const Topology topology = detect_topology(MPI_COMM_WORLD, TopologyOptions{});
  const auto device = device::select_device(device::DeviceType::cuda, topology.local_rank());
  logger.info("nccl_mpi_test: ", mpi.world_size(), " ranks, rank 0 on CUDA device ", device.cuda_device, " (",
              device.name, ")");
  const CommOptions options{60.0};
  MpiCommunicator world(MpiComm(MPI_COMM_WORLD), "world", topology.node_of_rank, options, logger);
  NcclCommunicator nccl(world, "gpu_world", options, logger);
  cuda::Stream compute;
  NcclTestContext context{world, nccl, compute, logger};
  context_slot() = &context;
  const int failures = hsdp::testing::run_all_tests_on_every_rank(MPI_COMM_WORLD);
  context_slot() = nullptr;
  return failures > 0 ? 1 : 0;
}

}  // namespace
}  // namespace hsdp::comm::testing

int main(int argc, char** argv) {
  std::string reason;
  if (hsdp::device::cuda::visible_device_count(&reason) == 0) {
    std::cout << "no CUDA device visible: " << reason << "\n";
    return 77;
  }
  hsdp::comm::MpiEnvironment mpi(&argc, &argv);
  try {
    return hsdp::comm::testing::run(argc, argv, mpi);
  } catch (const hsdp::Error& e) {
    std::cerr << "[rank " << mpi.world_rank() << "] nccl_mpi_test: " << e.what() << std::endl;
    hsdp::comm::MpiEnvironment::abort_job(e.exit_code());
  } catch (const std::exception& e) {
    std::cerr << "[rank " << mpi.world_rank() << "] nccl_mpi_test: " << e.what() << std::endl;
    hsdp::comm::MpiEnvironment::abort_job(hsdp::kExitInternal);
  }
}
