// StagedCommunicator's own logic, against a fake carrier that records what it is asked to do and completes only when
// the test says, and a staging whose copies land only when the test says: the carrier's collectives are issued in
// call order whatever order the inputs land in, on host buffers laid out as the device ranges are (in-place forms
// stay in place), the result reaches device memory only after the carrier completed, and a second step of the same
// collectives allocates no host buffer.
#include "hsdp/comm/staged.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "deferred_staging.hpp"

namespace hsdp::comm {
namespace {

// A rank of a group of two whose peer holds the same data: all_reduce sums to twice the input, all_gather repeats the
// block, reduce_scatter gives twice this rank's block (f32 only). Completes when `complete` is set.
class FakeCarrier final : public Communicator {
 public:
  struct Call {
    Collective collective;
    const void* send;
    void* recv;
  };

  int rank() const override { return 0; }
  int size() const override { return 2; }
  const std::string& name() const override { return name_; }
  std::span<const int> node_of_rank() const override { return nodes_; }
  const ByteCounters& counters() const override { return counters_; }
  void reset_counters() override { counters_ = {}; }
  std::uint64_t sequence() const override { return calls.size(); }

  CommHandle all_reduce_async(const void* send, void* recv, std::size_t count, DType, ReduceOp) override {
    return issued(Collective::all_reduce, send, recv, [=] {
      for (std::size_t i = 0; i < count; ++i) static_cast<float*>(recv)[i] = 2 * static_cast<const float*>(send)[i];
    });
  }
  CommHandle reduce_scatter_async(const void* send, void* recv, std::size_t recv_count, DType, ReduceOp) override {
    return issued(Collective::reduce_scatter, send, recv, [=] {
      for (std::size_t i = 0; i < recv_count; ++i) {
        static_cast<float*>(recv)[i] = 2 * static_cast<const float*>(send)[i];
      }
    });
  }
  CommHandle all_gather_async(const void* send, void* recv, std::size_t send_count, DType) override {
    return issued(Collective::all_gather, send, recv, [=] {
      const std::vector<float> block(static_cast<const float*>(send), static_cast<const float*>(send) + send_count);
      for (std::size_t b = 0; b < 2; ++b)
        std::memcpy(static_cast<float*>(recv) + b * send_count, block.data(), send_count * 4);
    });
  }
  CommHandle all_to_all_async(const void* send, void* recv, std::size_t count_per_peer, DType) override {
    return issued(Collective::all_to_all, send, recv, [=] { std::memmove(recv, send, 2 * count_per_peer * 4); });
  }
  CommHandle broadcast_async(void* buffer, std::size_t, DType, int) override {
    return issued(Collective::broadcast, buffer, buffer, [] {});
  }
  CommHandle barrier_async() override {
    return issued(Collective::barrier, nullptr, nullptr, [] {});
  }

  std::vector<Call> calls;
  std::shared_ptr<bool> complete = std::make_shared<bool>(true);

 private:
  class Op final : public PendingOp {
   public:
    Op(std::function<void()> result, std::shared_ptr<bool> complete)
        : result_(std::move(result)), complete_(std::move(complete)) {}
    ~Op() override { wait(); }
    Op(const Op&) = delete;
    Op& operator=(const Op&) = delete;
    void wait() override {
      *complete_ = true;  // the test's "wait" lets it complete
      test();
    }
    bool test() override {
      if (!*complete_) return false;
      if (result_) result_();
      result_ = nullptr;
      return true;
    }

   private:
    std::function<void()> result_;
    std::shared_ptr<bool> complete_;
  };

  CommHandle issued(Collective c, const void* send, void* recv, std::function<void()> result) {
    calls.push_back({c, send, recv});
    return CommHandle(std::make_unique<Op>(std::move(result), complete));
  }

  std::string name_ = "fake";
  std::vector<int> nodes_ = {0, 0};
  ByteCounters counters_;
};

// Copies that land when the test lands them (land(i): the i-th copy made), or when waited for.
class HeldStaging final : public HostStaging {
 public:
  std::string_view name() const override { return "held"; }
  HostBlock allocate(std::size_t bytes) override {
    ++allocations;
    return memcpy_->allocate(bytes);
  }
  std::unique_ptr<StagedCopy> to_host(const void* device, void* host, std::size_t bytes) override {
    return held(device, host, bytes);
  }
  std::unique_ptr<StagedCopy> to_device(const void* host, void* device, std::size_t bytes) override {
    return held(host, device, bytes);
  }
  std::unique_ptr<StagedCopy> fence() override { return held(nullptr, nullptr, 0); }
  void land(std::size_t i) { *landed.at(i) = true; }

  int allocations = 0;
  std::vector<std::shared_ptr<bool>> landed;

 private:
  std::unique_ptr<StagedCopy> held(const void* from, void* to, std::size_t bytes) {
    landed.push_back(std::make_shared<bool>(false));
    return std::make_unique<testing::LateCopy>(from, to, bytes, [flag = landed.back()] { return *flag; });
  }

  std::shared_ptr<HostStaging> memcpy_ = make_memcpy_staging();
};

TEST(Staged, TheCarriersCollectivesAreIssuedInCallOrder_WhateverOrderTheInputsLand) {
  FakeCarrier carrier;
  auto staging = std::make_shared<HeldStaging>();
  StagedCommunicator staged(carrier, staging);
  std::vector<float> a{1, 2}, b{3, 4, 5, 6}, c{7};
  std::vector<float> b_out(2);
  CommHandle ha = staged.all_reduce_async(a.data(), a.data(), 2, DType::f32, ReduceOp::sum);
  CommHandle hb = staged.reduce_scatter_async(b.data(), b_out.data(), 2, DType::f32, ReduceOp::sum);
  CommHandle hc = staged.all_reduce_async(c.data(), c.data(), 1, DType::f32, ReduceOp::sum);
  staging->land(2);
  staging->land(1);
  EXPECT_FALSE(hc.done());
  EXPECT_FALSE(hb.done());
  EXPECT_TRUE(carrier.calls.empty()) << "issued before the first collective's input landed";
  staging->land(0);
  EXPECT_FALSE(ha.done());  // issued now; its result's copy back has not landed
  ASSERT_EQ(carrier.calls.size(), 3u);
  EXPECT_EQ(carrier.calls[0].collective, Collective::all_reduce);
  EXPECT_EQ(carrier.calls[1].collective, Collective::reduce_scatter);
  EXPECT_EQ(carrier.calls[2].send, carrier.calls[2].recv) << "in place on the device, in place on the host";
  ha.wait();
  hb.wait();
  hc.wait();
  EXPECT_EQ(a, (std::vector<float>{2, 4}));
  EXPECT_EQ(b_out, (std::vector<float>{6, 8}));
  EXPECT_EQ(c, (std::vector<float>{14}));
  EXPECT_EQ(b, (std::vector<float>{3, 4, 5, 6})) << "an out-of-place input is not written";
}

TEST(Staged, WaitingForALaterCollective_IssuesEveryEarlierOneFirst) {
  FakeCarrier carrier;
  auto staging = std::make_shared<HeldStaging>();
  StagedCommunicator staged(carrier, staging);
  std::vector<float> a{1}, b{2};
  CommHandle ha = staged.all_reduce_async(a.data(), a.data(), 1, DType::f32, ReduceOp::sum);
  CommHandle hb = staged.all_reduce_async(b.data(), b.data(), 1, DType::f32, ReduceOp::sum);
  hb.wait();
  ASSERT_EQ(carrier.calls.size(), 2u);
  EXPECT_EQ(carrier.calls[0].send, carrier.calls[0].recv);
  EXPECT_EQ(b, (std::vector<float>{4}));
  ha.wait();
  EXPECT_EQ(a, (std::vector<float>{2}));
}

TEST(Staged, TheResultReachesDeviceMemory_OnlyAfterTheCarrierCompleted_AndItsCopyBackLanded) {
  FakeCarrier carrier;
  *carrier.complete = false;
  auto staging = std::make_shared<HeldStaging>();
  StagedCommunicator staged(carrier, staging);
  std::vector<float> x{1, 2};
  CommHandle h = staged.all_reduce_async(x.data(), x.data(), 2, DType::f32, ReduceOp::sum);
  staging->land(0);
  EXPECT_FALSE(h.done());
  EXPECT_EQ(carrier.calls.size(), 1u);
  *carrier.complete = true;
  EXPECT_FALSE(h.done()) << "the copy back has not landed";
  EXPECT_EQ(x, (std::vector<float>{1, 2}));
  staging->land(1);
  EXPECT_TRUE(h.done());
  EXPECT_EQ(x, (std::vector<float>{2, 4}));
}

TEST(Staged, InPlaceForms_StayInPlaceOnTheHost) {
  FakeCarrier carrier;
  StagedCommunicator staged(carrier, make_memcpy_staging());
  std::vector<float> gathered{9, 8, 0, 0};  // the fake is rank 0: its block is the first
  staged.all_gather(gathered.data(), gathered.data(), 2, DType::f32);
  EXPECT_EQ(carrier.calls.back().send, carrier.calls.back().recv);
  EXPECT_EQ(gathered, (std::vector<float>{9, 8, 9, 8}));
  std::vector<float> scattered{1, 2, 3, 4};
  staged.reduce_scatter(scattered.data(), scattered.data(), 2, DType::f32, ReduceOp::sum);
  EXPECT_EQ(carrier.calls.back().send, carrier.calls.back().recv);
  EXPECT_EQ(scattered, (std::vector<float>{2, 4, 3, 4})) << "the result at the start, the rest as it was";
  std::vector<float> exchanged_in{1, 2, 3, 4}, exchanged_out(4);
  staged.all_to_all(exchanged_in.data(), exchanged_out.data(), 2, DType::f32);
  EXPECT_NE(carrier.calls.back().send, carrier.calls.back().recv);
  EXPECT_EQ(exchanged_out, exchanged_in);
}

TEST(Staged, ASecondStepOfTheSameCollectives_AllocatesNoHostBuffer) {
  FakeCarrier carrier;
  auto staging = std::make_shared<HeldStaging>();
  StagedCommunicator staged(carrier, staging);
  std::vector<float> big(1000, 1.0f), small(10, 1.0f), out(500);
  const auto step = [&] {
    std::vector<CommHandle> handles;
    handles.push_back(staged.all_reduce_async(big.data(), big.data(), 1000, DType::f32, ReduceOp::sum));
    handles.push_back(staged.reduce_scatter_async(big.data(), out.data(), 500, DType::f32, ReduceOp::sum));
    handles.push_back(staged.all_reduce_async(small.data(), small.data(), 10, DType::f32, ReduceOp::sum));
    for (CommHandle& h : handles) h.wait();
  };
  step();
  const int first = staging->allocations;
  EXPECT_EQ(static_cast<std::size_t>(first), staged.host_buffers_allocated());
  step();
  step();
  EXPECT_EQ(staging->allocations, first);
}

// CUDA-aware MPI: collectives that only move bytes run on the device ranges once the fence says the stream's work
// before them is done; reductions stay staged; all in call order.
TEST(Staged, DirectDataMovement_HandsTheDevicePointersOverAfterTheFence_AndStagesReductions) {
  FakeCarrier carrier;
  auto staging = std::make_shared<HeldStaging>();
  StagedCommunicator staged(carrier, staging, DirectCollectives::data_movement);
  std::vector<float> gathered{5, 6, 0, 0}, summed{1};
  CommHandle hg = staged.all_gather_async(gathered.data(), gathered.data(), 2, DType::f32);
  CommHandle hs = staged.all_reduce_async(summed.data(), summed.data(), 1, DType::f32, ReduceOp::sum);
  staging->land(1);  // the reduction's input
  EXPECT_FALSE(hs.done());
  EXPECT_TRUE(carrier.calls.empty()) << "issued before the fence of the collective called first";
  staging->land(0);  // the fence
  EXPECT_TRUE(hg.done());
  ASSERT_EQ(carrier.calls.size(), 2u);
  EXPECT_EQ(carrier.calls[0].send, gathered.data()) << "the device pointer itself";
  EXPECT_NE(carrier.calls[1].send, summed.data()) << "a reduction is staged";
  hs.wait();
  EXPECT_EQ(gathered, (std::vector<float>{5, 6, 5, 6}));
  EXPECT_EQ(summed, (std::vector<float>{2}));
}

TEST(Staged, CountersSequenceAndNames_AreTheCarriers) {
  FakeCarrier carrier;
  StagedCommunicator staged(carrier, make_memcpy_staging());
  staged.barrier();
  EXPECT_EQ(staged.sequence(), 1u);
  EXPECT_EQ(&staged.counters(), &carrier.counters());
  EXPECT_EQ(staged.name(), "fake");
  EXPECT_EQ(staged.size(), 2);
  EXPECT_EQ(&staged.carrier(), &carrier);
}

}  // namespace
}  // namespace hsdp::comm
