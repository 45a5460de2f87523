// The stream checker (label streams): a small FSDP-shaped pipeline on three queues (gather, compute, reduce) and the
// host, run synchronously and on worker threads with random delays; the checker finds each missing wait, early free
// and early host read by name.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "hsdp/core/error.hpp"
#include "device_pipeline.hpp"
#include "dropping_executor.hpp"
#include "hsdp/stream/queues.hpp"

namespace hsdp::stream {
namespace {

// What a pipeline leaves out, to prove the checker catches it.
struct Faults {
  bool skip_gather_wait = false;    // compute reads a gathered unit without waiting for its gather's event
  bool free_after_gather = false;   // the gathered unit goes back to the pool after the gather's event, not compute's
  bool skip_host_sync = false;      // the host reads the norm before the reduction's event
  bool reuse_without_wait = false;  // one gather buffer for all units, refilled without waiting for compute
};

struct Result {
  std::vector<float> grads;
  double norm = 0;
};

constexpr int kUnits = 4;
constexpr std::size_t kSize = 257;

// Per unit: gather (scale a shard into a full buffer), compute (read it, update the activation), reduce (read the
// activation, write the unit's gradient); then the squared norm of the gradients, read by the host.
Result run_pipeline(StreamOptions options, Faults faults = {}) {
  std::vector<std::vector<float>> shards(kUnits, std::vector<float>(kSize));
  for (int u = 0; u < kUnits; ++u) {
    for (std::size_t i = 0; i < kSize; ++i)
      shards[static_cast<std::size_t>(u)][i] = 0.001f * static_cast<float>(i + 7 * u);
  }
  std::vector<std::vector<float>> gathered(kUnits, std::vector<float>(kSize));
  std::vector<float> activation(kSize, 1.0f);
  Result result;
  result.grads.assign(kUnits * kSize, 0.0f);
  double norm = 0;
  // After the memory its work touches: destroyed (its workers joined) first.
  StreamQueues queues(options);
  const QueueId gather = queues.make_queue("gather");
  const QueueId compute = queues.make_queue("compute");
  const QueueId reduce = queues.make_queue("reduce");
  std::vector<BufferId> gathered_id;
  for (int u = 0; u < kUnits; ++u) {
    gathered_id.push_back(queues.track(faults.reuse_without_wait ? "gathered" : "gathered " + std::to_string(u)));
    if (faults.reuse_without_wait) break;
  }
  const BufferId activation_id = queues.track("activation");
  const BufferId grads_id = queues.track("gradients");
  const BufferId norm_id = queues.track("norm");

  for (int u = 0; u < kUnits; ++u) {
    const auto su = static_cast<std::size_t>(u);
    const std::size_t slot = faults.reuse_without_wait ? 0 : su;
    float* full = gathered[slot].data();
    const BufferId full_id = gathered_id[slot];
    queues.enqueue(gather, "all_gather unit " + std::to_string(u), {writes(full_id)}, [&shards, full, su] {
      for (std::size_t i = 0; i < kSize; ++i) full[i] = 2.0f * shards[su][i];
    });
    const StreamEvent gathered_event = queues.record(gather);
    if (!faults.skip_gather_wait) queues.wait(compute, gathered_event);
    queues.enqueue(compute, "forward unit " + std::to_string(u), {reads(full_id), writes(activation_id)},
                   [&activation, full] {
                     for (std::size_t i = 0; i < kSize; ++i) activation[i] = 0.5f * activation[i] + full[i];
                   });
    const StreamEvent computed = queues.record(compute);
    if (!faults.reuse_without_wait) {
      queues.release(full_id, faults.free_after_gather ? gathered_event : computed,
                     "free gathered unit " + std::to_string(u));
    }
    queues.wait(reduce, computed);
    queues.enqueue(reduce, "reduce_scatter unit " + std::to_string(u), {reads(activation_id), writes(grads_id)},
                   [&activation, &result, su] {
                     for (std::size_t i = 0; i < kSize; ++i) result.grads[su * kSize + i] = activation[i] * 0.25f;
                   });
    // The next unit's forward overwrites the activation this reduction reads (the checker found this one).
    queues.wait(compute, queues.record(reduce));
  }
  queues.enqueue(reduce, "squared sum", {reads(grads_id), writes(norm_id)}, [&result, &norm] {
    norm = std::inner_product(result.grads.begin(), result.grads.end(), result.grads.begin(), 0.0);
  });
  const StreamEvent reduced = queues.record(reduce);
  if (!faults.skip_host_sync) queues.synchronize(reduced);
  queues.host_read(norm_id, "read the norm");
  result.norm = norm;
  queues.drain();
  return result;
}

std::string violation_of(const Faults& faults) {
  try {
    run_pipeline({.check = true, .threads = false}, faults);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(StreamChecker, OrderedPipeline_OnWorkerThreadsWithRandomDelays_IsBitIdenticalToTheSynchronousRun) {
  const Result reference = run_pipeline({});
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    const Result checked = run_pipeline({.check = true, .threads = true, .seed = seed, .max_delay_us = 300});
    EXPECT_EQ(checked.grads, reference.grads) << "seed " << seed;
    EXPECT_EQ(checked.norm, reference.norm) << "seed " << seed;
  }
}

// The threads executor (CUDA's rules) losing the compute stream's first wait for the gather stream: the checker, which learns each wait
// from the executor that put it in place, names the buffer the forward then reads out of order.
TEST(StreamChecker, AnExecutorThatLosesAWait_IsCaughtNamingTheBuffer) {
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    StreamOptions options{.check = true, .threads = true, .seed = seed, .max_delay_us = 300};
    options.make_executor = [](const StreamOptions& o) -> std::unique_ptr<Executor> {
      return std::make_unique<testing::DroppingExecutor>(make_threads_executor(o.seed, o.max_delay_us), "compute",
                                                         "gather", 1);
    };
    std::string report;
    try {
      run_pipeline(options);
    } catch (const Error& e) {
      report = e.what();
    }
    EXPECT_NE(report.find("buffer 'gathered 0': a read by 'forward unit 0' on queue 'compute' is not ordered after "
                          "'all_gather unit 0' on queue 'gather'"),
              std::string::npos)
        << "seed " << seed << ": " << report;
  }
  StreamOptions faithful{.check = true, .threads = true, .seed = 1, .max_delay_us = 300};
  faithful.make_executor = [](const StreamOptions& o) -> std::unique_ptr<Executor> {
    return std::make_unique<testing::DroppingExecutor>(make_threads_executor(o.seed, o.max_delay_us), "compute",
                                                       "gather", 0);
  };
  EXPECT_EQ(run_pipeline(faithful).grads, run_pipeline({}).grads) << "the wrapper alone changes nothing";
}

TEST(StreamChecker, ComputeBeforeTheGathersEvent_IsReportedWithBufferOperationsAndQueues) {
  const std::string report = violation_of({.skip_gather_wait = true});
  EXPECT_NE(report.find("buffer 'gathered 0'"), std::string::npos) << report;
  EXPECT_NE(report.find("'forward unit 0' on queue 'compute'"), std::string::npos) << report;
  EXPECT_NE(report.find("'all_gather unit 0' on queue 'gather'"), std::string::npos) << report;
}

TEST(StreamChecker, StagingFreedAtTheGathersEventWhileComputeReadsIt_IsReported) {
  const std::string report = violation_of({.free_after_gather = true});
  EXPECT_NE(report.find("buffer 'gathered 0'"), std::string::npos) << report;
  EXPECT_NE(report.find("release to the pool (free gathered unit 0)"), std::string::npos) << report;
  EXPECT_NE(report.find("'forward unit 0' on queue 'compute'"), std::string::npos) << report;
}

TEST(StreamChecker, NormReadBeforeItsReduction_IsReported) {
  const std::string report = violation_of({.skip_host_sync = true});
  EXPECT_NE(report.find("buffer 'norm'"), std::string::npos) << report;
  EXPECT_NE(report.find("'read the norm' on queue 'host'"), std::string::npos) << report;
  EXPECT_NE(report.find("'squared sum' on queue 'reduce'"), std::string::npos) << report;
}

TEST(StreamChecker, BufferRefilledWhileComputeStillReadsIt_IsReported) {
  const std::string report = violation_of({.reuse_without_wait = true});
  EXPECT_NE(report.find("buffer 'gathered': a write over what it reads by 'all_gather unit 1' on queue 'gather'"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("'forward unit 0' on queue 'compute'"), std::string::npos) << report;
}

TEST(StreamChecker, TheOrderedPipeline_HasNoViolation_AndCountsEveryOperation) {
  EXPECT_EQ(violation_of({}), "");
  StreamChecker checker;
  const QueueId q = checker.add_queue("q");
  const BufferId b = checker.add_buffer("b");
  const BufferAccess w = writes(b);
  checker.operation(q, "write", std::span(&w, 1));
  checker.synchronize(checker.record(q));
  checker.host_read(b, "read");
  EXPECT_EQ(checker.operations(), 2u);
}

TEST(StreamChecker, AnAccessAfterRelease_IsReported) {
  StreamChecker checker;
  const QueueId q = checker.add_queue("compute");
  const BufferId b = checker.add_buffer("staging");
  const BufferAccess w = writes(b);
  checker.operation(q, "fill", std::span(&w, 1));
  checker.release(b, checker.record(q), "free staging");
  try {
    checker.operation(q, "fill again", std::span(&w, 1));
    FAIL() << "no report";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'fill again' on queue 'compute' touches it after it went back to its pool"),
              std::string::npos)
        << e.what();
  }
}

// DeviceOps calls on the threads executor (CUDA's rules, random delays), checked: bit for bit the inline run.
TEST(StreamQueues, TheDevicePipeline_OnTheThreadsExecutor_IsBitIdenticalToInline) {
  MemoryAccountant memory;
  const auto dev = make_cpu_device_ops(memory);
  StreamQueues reference_queues;
  const testing::PipelineResult reference = testing::run_device_pipeline(*dev, reference_queues);
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    StreamQueues queues({.check = true, .threads = true, .seed = seed, .max_delay_us = 300});
    const testing::PipelineResult run = testing::run_device_pipeline(*dev, queues);
    EXPECT_EQ(run.grads, reference.grads) << "seed " << seed;
    EXPECT_EQ(run.norm, reference.norm) << "seed " << seed;
  }
}

TEST(StreamQueues, AWorkersException_IsRethrownToTheHost) {
  StreamQueues queues({.threads = true});
  const QueueId q = queues.make_queue("compute");
  queues.enqueue(q, "throws", {}, [] { throw Error(ErrorKind::data, "from the worker"); });
  EXPECT_THROW(queues.drain(), Error);
}

// A collective that completes when `finished` is set (or at wait(), which blocks in the real thing), logging when
// it was issued.
class FakeOp : public comm::PendingOp {
 public:
  explicit FakeOp(const bool* finished) : finished_(finished) {}
  void wait() override { waited_ = true; }
  bool test() override { return waited_ || *finished_; }

 private:
  const bool* finished_;
  bool waited_ = false;
};

comm::CommHandle fake(std::vector<std::string>& issued, std::string name, const bool* finished) {
  issued.push_back(std::move(name));
  return comm::CommHandle(std::make_unique<FakeOp>(finished));
}

TEST(StreamQueues, Inline_WorkBehindACollectiveRunsWhenItCompletes_AndAGroupIssuesInProgramOrder) {
  StreamQueues queues;
  const QueueId gather = queues.make_queue("gather"), reduce = queues.make_queue("reduce");
  const int group = 0;  // one communicator used from both queues
  std::vector<std::string> issued, ran;
  bool first_done = false, never = false;
  queues.collective(reduce, "reduce 1", {&group}, {}, [&] { return fake(issued, "reduce 1", &first_done); });
  queues.enqueue(reduce, "unpack 1", {}, [&] { ran.push_back("unpack 1"); });
  queues.collective(reduce, "reduce 2", {&group}, {}, [&] { return fake(issued, "reduce 2", &never); });
  // Enqueued after "reduce 2", which waits behind "reduce 1": it may not be issued before it on this group.
  queues.collective(gather, "gather 3", {&group}, {}, [&] { return fake(issued, "gather 3", &never); });
  queues.progress();
  EXPECT_EQ(issued, std::vector<std::string>{"reduce 1"});
  EXPECT_TRUE(ran.empty());
  first_done = true;
  queues.progress();
  EXPECT_EQ(ran, std::vector<std::string>{"unpack 1"});
  EXPECT_EQ(issued, (std::vector<std::string>{"reduce 1", "reduce 2", "gather 3"}));
  queues.drain();  // blocks on (waits for) the two in flight
  EXPECT_EQ(issued, (std::vector<std::string>{"reduce 1", "reduce 2", "gather 3"}));
  EXPECT_GE(queues.host_waited_s(), 0.0);
}

// The synchronous engine's overlap: while compute work runs on the host, the model polls the queues between its
// kernels (progress()); a collective that completes meanwhile has the work behind it run then, not after the compute.
TEST(StreamQueues, Inline_APollDuringComputeWork_RunsTheWorkBehindACompletedCollective) {
  StreamQueues queues;
  const QueueId compute = queues.make_queue("compute", QueueRole::compute), reduce = queues.make_queue("reduce");
  const int group = 0;
  std::vector<std::string> issued, ran;
  bool reduced = false;
  queues.collective(reduce, "reduce", {&group}, {}, [&] { return fake(issued, "reduce", &reduced); });
  queues.enqueue(reduce, "accumulate", {}, [&] { ran.push_back("accumulate"); });
  queues.enqueue(compute, "forward", {}, [&] {
    ran.push_back("first kernel");
    reduced = true;  // the collective completes while compute runs
    queues.progress();  // the poll between two kernels
    ran.push_back("second kernel");
  });
  EXPECT_EQ(ran, (std::vector<std::string>{"first kernel", "accumulate", "second kernel"}));
  queues.drain();
}

TEST(StreamQueues, Threads_TheHostIssuesCollectivesInGroupOrder_AndReleasesAfterTheirEvents) {
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    StreamQueues queues({.check = true, .threads = true, .seed = seed, .max_delay_us = 300});
    const QueueId compute = queues.make_queue("compute", QueueRole::compute);
    const QueueId gather = queues.make_queue("gather"), reduce = queues.make_queue("reduce");
    const int group = 0;
    std::vector<std::string> issued;
    std::vector<int> values(8, 0);
    const bool finished = true;
    bool freed = false;
    const BufferId staging = queues.track("staging");
    for (int i = 0; i < 4; ++i) {
      const std::string n = std::to_string(i);
      queues.collective(gather, "gather " + n, {&group}, {writes(staging)},
                        [&issued, &finished, n] { return fake(issued, "gather " + n, &finished); });
      queues.wait(compute, queues.record(gather));
      queues.enqueue(compute, "use " + n, {reads(staging)},
                     [&values, i] { values[static_cast<std::size_t>(i)] = i + 1; });
      queues.wait(reduce, queues.record(compute));
      queues.collective(reduce, "reduce " + n, {&group}, {reads(staging)},
                        [&issued, &finished, n] { return fake(issued, "reduce " + n, &finished); });
      queues.wait(gather, queues.record(reduce));
    }
    queues.release(staging, queues.record(gather), "free staging", [&] { freed = true; });
    queues.drain();
    EXPECT_TRUE(freed);
    EXPECT_EQ(issued, (std::vector<std::string>{"gather 0", "reduce 0", "gather 1", "reduce 1", "gather 2", "reduce 2",
                                                "gather 3", "reduce 3"}));
    EXPECT_EQ(values, (std::vector<int>{1, 2, 3, 4, 0, 0, 0, 0}));
  }
}

}  // namespace
}  // namespace hsdp::stream
