// The stream checker over the whole engine (label streams), on every emulated mesh: every strategy and ZeRO++ with
// gradient accumulation, activation checkpointing, fp16 and bf16, run with every queue on its own worker thread
// after seeded random delays and every access checked, must report nothing and give bit for bit what the inline
// (synchronous) engine gives: losses, norms, overflow flags, master weights and AdamW moments, with one read of the
// device a step. And the checker must catch an ordering left out on purpose, naming the buffer and the operations.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../comm/deferred_staging.hpp"
#include "../comm/mpi_test_context.hpp"
#include "../stream/counting_device_ops.hpp"
#include "../stream/dropping_executor.hpp"
#include "hsdp/comm/staged.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/model/gpt.hpp"
#include "hsdp/model/unit_model.hpp"
#include "hsdp/optim/grad_clip.hpp"
#include "hsdp/optim/lr_schedule.hpp"
#include "hsdp/shard/engine.hpp"
#include "bf16_twin.hpp"
#include "tiny_gpt.hpp"

namespace hsdp::shard {
namespace {

using comm::testing::context;

using testing::kSeq;
using testing::tiny_config;
constexpr int kMicro = 2;  // rows per micro-batch and rank
constexpr int kAccum = 2;
constexpr int kSteps = 3;
const optim::AdamWConfig kAdam{};
const optim::CosineSchedule kSchedule{.lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 1, .max_steps = kSteps};

std::vector<std::int32_t> rows(int step, int first_row, bool targets) {
  return testing::rows(step, first_row, kMicro, targets);
}

struct Config {
  std::string name;
  EngineOptions options;
  bool activation_checkpointing = false;
};

// Everything a run produces, compared with ==.
struct Outcome {
  std::vector<double> losses;     // each step's loss sum
  std::vector<int> device_reads;  // each step's copies from device memory to the host
  std::vector<double> norms;
  std::vector<bool> overflows;
  std::vector<std::vector<float>> master, m, v;
  bool operator==(const Outcome&) const = default;
};

// Steps [first, end) of a run; `resume`: the shards loaded before them (a checkpoint's round trip); host_visible
// false: the device's memory is not the host's, so checkpoints stage through host copies (as on a GPU).
struct Segment {
  int first = 0;
  int end = kSteps;
  bool host_visible = true;
  const Outcome* resume = nullptr;
  std::uint64_t seed = 7;
  // What carries the mesh's groups (MeshOptions::carry): the harness's --comm.stage unless a test says.
  comm::MeshCarrier carry = context().carry;
  // The world the run trains on: the harness's unless a test says (a run that ends in a report trains alone).
  comm::MpiCommunicator* world = nullptr;
  const comm::Topology* topology = nullptr;
  // The engine's compute copies in bf16, read by the CPU twin of a bf16 model (bf16_twin.hpp).
  bool bf16_compute = false;
};

Outcome train(const Config& c, const StreamOptions& streams, const StreamFaults& faults = {},
              const Segment& segment = {}) {
  auto& ctx = context();
  const int hpz = c.options.zeropp.hpz_partition_size;
  comm::MeshOptions mesh_choice = mesh_options(c.options.strategy, hpz);
  mesh_choice.carry = segment.carry;
  comm::MpiCommunicator& world = segment.world != nullptr ? *segment.world : ctx.world;
  comm::ProcessMesh mesh(world, segment.topology != nullptr ? *segment.topology : ctx.topology, mesh_choice);
  const model::ModelLayout layout(tiny_config());
  MemoryAccountant memory;
  EngineOptions options = c.options;
  options.streams = streams;
  if (segment.bf16_compute) options.compute_dtype = DType::bf16;
  auto device = std::make_unique<stream::testing::CountingDeviceOps>(make_cpu_device_ops(memory, segment.host_visible));
  const auto device_reads = device->reads();
  Engine engine(layout, mesh, options, segment.seed, memory, nullptr, std::move(device));
  engine.inject(faults);
  if (segment.resume != nullptr) {
    const std::vector<UnitShard> views = engine.shard_views();
    for (std::size_t u = 0; u < views.size(); ++u) {
      std::copy(segment.resume->master[u].begin(), segment.resume->master[u].end(), views[u].params);
      std::copy(segment.resume->m[u].begin(), segment.resume->m[u].end(), views[u].exp_avg);
      std::copy(segment.resume->v[u].begin(), segment.resume->v[u].end(), views[u].exp_avg_sq);
    }
    engine.checkpoint_loaded();
  }
  model::Gpt<float> gpt(layout, kMicro, kSeq, memory, c.activation_checkpointing);
  model::CpuUnitModel fp32_units(gpt);
  testing::Bf16Twin bf16_units(fp32_units);
  model::UnitModel& units = segment.bf16_compute ? static_cast<model::UnitModel&>(bf16_units) : fp32_units;
  const bool fp16 = options.param_dtype == DType::f16;
  Outcome run;
  for (int step = segment.first; step < segment.end; ++step) {
    const int reads_before = *device_reads;
    engine.begin_step();
    for (int j = 0; j < kAccum; ++j) {
      const int first = (world.rank() * kAccum + j) * kMicro;
      engine.forward_backward(units, rows(step, first, false), rows(step, first, true), 1.0f / kAccum,
                              j + 1 == kAccum);
    }
    const StepScalars scalars = engine.step_scalars(fp16);
    run.losses.push_back(scalars.loss_sum);
    run.overflows.push_back(scalars.nonfinite);
    run.norms.push_back(scalars.norm_squared);
    const auto clip = optim::clip_coefficient(run.norms.back(), 1.0);
    engine.optimizer_step(kAdam,
                          {static_cast<float>(optim::learning_rate(kSchedule, step)), step + 1, clip.coefficient});
    run.device_reads.push_back(*device_reads - reads_before);
  }
  for (const UnitShard& s : engine.shard_views()) {
    run.master.emplace_back(s.params, s.params + s.count);
    run.m.emplace_back(s.exp_avg, s.exp_avg + s.count);
    run.v.emplace_back(s.exp_avg_sq, s.exp_avg_sq + s.count);
  }
  return run;
}

std::vector<Config> configs() {
  const comm::Topology& topo = context().topology;
  std::vector<Config> out;
  bool checkpointing = false;
  for (const Sharding s : {Sharding::no_shard, Sharding::zero1, Sharding::shard_grad_op, Sharding::full_shard,
                           Sharding::hybrid_shard, Sharding::hybrid_shard_zero2}) {
    if (strategy(s).shard_scope == comm::ShardScope::node && !topo.nodes_equal_size()) continue;
    Config c{std::string(to_string(s)), {}, checkpointing};
    c.options.strategy = s;
    c.options.grad_accum = kAccum;
    c.options.bucket_mb = 0.002;  // several no_shard buckets
    out.push_back(c);
    checkpointing = !checkpointing;
  }
  // fp16 (the overflow flag and its all-reduce), bf16 reductions.
  out.push_back({"zero1 fp16", out[1].options, false});
  out.back().options.param_dtype = DType::f16;
  out.push_back({"full_shard bf16", out[3].options, true});
  out.back().options.param_dtype = DType::bf16;
  out.back().options.reduce_dtype = DType::bf16;
  if (topo.nodes_equal_size()) {
    Config z{"full_shard fp16 qwZ hpZ qgZ", out[3].options, true};
    z.options.param_dtype = DType::f16;
    z.options.zeropp = {.quantized_weights = true,
                        .hpz_partition_size = topo.node_size(0),
                        .quantized_gradients = true,
                        .grad_bits = quant::Bits::int4,
                        .block = quant::kDefaultBlock};
    out.push_back(z);
    Config h{"hybrid_shard bf16 qwZ qgZ", out[4].options, false};
    h.options.param_dtype = DType::bf16;
    h.options.zeropp = {.quantized_weights = true,
                        .hpz_partition_size = 0,
                        .quantized_gradients = true,
                        .grad_bits = quant::Bits::int8,
                        .block = quant::kDefaultBlock};
    out.push_back(h);
  }
  return out;
}

TEST(StreamCheckerEngine, EveryConfiguration_OnWorkerThreadsWith3Seeds_HasNoViolation_AndIsBitIdenticalToInline) {
  for (const Config& c : configs()) {
    const Outcome inline_run = train(c, {});
    // The host reads the device once a step: loss sum, norm and flag in one copy (and nothing per micro-batch).
    EXPECT_EQ(inline_run.device_reads, std::vector<int>(kSteps, 1)) << c.name;
    for (const std::uint64_t seed : {1u, 2u, 3u}) {
      const Outcome threaded = train(c, {.check = true, .threads = true, .seed = seed, .max_delay_us = 100});
      EXPECT_TRUE(threaded == inline_run) << c.name << ", seed " << seed << ": differs from the inline run";
    }
    context().logger.info("streams: ", c.name, ": 3 seeds, no violation, bit-identical");
  }
}

// The GPU's staged MPI path (comm.stage=host) on the CPU: every group's collectives staged through host buffers whose
// copies land late and in another order on every rank, every queue on a worker thread: bit for bit the direct inline
// engine, because staging only moves the same bytes in and out of the same MPI calls, issued in the same order.
TEST(StreamCheckerEngine, EveryConfiguration_StagedThroughHostWithLateCopies_IsBitIdenticalToDirectInline) {
  const std::uint64_t me = static_cast<std::uint64_t>(context().world.rank());
  for (const Config& c : configs()) {
    const Outcome direct = train(c, {}, {}, {.carry = {}});
    const Outcome memcpy_inline = train(c, {}, {}, {.carry = comm::staged_carrier(comm::make_memcpy_staging())});
    EXPECT_TRUE(memcpy_inline == direct) << c.name << ": staged (memcpy, inline) differs from direct";
    for (const std::uint64_t seed : {1u, 2u, 3u}) {
      const auto late = std::make_shared<comm::testing::DeferredStaging>(seed * 100 + me);
      const Outcome staged =
          train(c, {.check = true, .threads = true, .seed = seed, .max_delay_us = 100}, {}, {.carry = comm::staged_carrier(late)});
      EXPECT_TRUE(staged == direct) << c.name << ", seed " << seed << ": staged with late copies differs from direct";
    }
    context().logger.info("streams: ", c.name, ": staged through host, 3 seeds, bit-identical to direct");
  }
}

// The engine's compute copies in bf16 (a GPU's bf16 model reads them without a conversion), read here by the CPU twin
// of such a model: every configuration with precision.param=bf16, and no_shard, zero1 and full_shard with hpZ in bf16,
// bit for bit the engine with fp32 compute copies of the same bf16-rounded values, inline and on the threads executor.
TEST(StreamCheckerEngine, ComputeCopiesInBf16_ReadByABf16Model_AreBitIdenticalToFp32ComputeCopies) {
  std::vector<Config> bf16;
  for (Config c : configs()) {
    if (c.options.param_dtype == DType::bf16) {
      bf16.push_back(c);
    } else if (c.options.param_dtype == DType::f32 &&
               (c.options.strategy == Sharding::no_shard || c.options.strategy == Sharding::zero1)) {
      c.name += " bf16";
      c.options.param_dtype = DType::bf16;
      bf16.push_back(c);
    }
  }
  if (context().topology.nodes_equal_size()) {
    Config h{"full_shard bf16 qwZ hpZ", {}, true};
    h.options.strategy = Sharding::full_shard;
    h.options.grad_accum = kAccum;
    h.options.param_dtype = DType::bf16;
    h.options.zeropp = {.quantized_weights = true,
                        .hpz_partition_size = context().topology.node_size(0),
                        .quantized_gradients = false,
                        .grad_bits = quant::Bits::int4,
                        .block = quant::kDefaultBlock};
    bf16.push_back(h);
  }
  for (const Config& c : bf16) {
    const Outcome fp32_copies = train(c, {});
    EXPECT_TRUE(train(c, {}, {}, {.bf16_compute = true}) == fp32_copies) << c.name << ": inline";
    const Outcome threaded =
        train(c, {.check = true, .threads = true, .seed = 4, .max_delay_us = 100}, {}, {.bf16_compute = true});
    EXPECT_TRUE(threaded == fp32_copies) << c.name << ": threads";
    context().logger.info("streams: ", c.name, ": bf16 compute copies, bit-identical to fp32 ones");
  }
}

// A checkpoint's round trip where device memory is not host memory: the shards staged to the host after step 2 equal
// the in-place run's, and an engine built from another seed that loads them trains step 3 as the uninterrupted run
// did (zero1's persistent full parameters rebuilt from the loaded masters).
TEST(StreamCheckerEngine, ShardsStagedThroughHostCopies_ResumeBitForBit) {
  for (const Config& c : configs()) {
    const Outcome whole = train(c, {});
    const StreamOptions checked{.check = true, .threads = true, .seed = 5, .max_delay_us = 100};
    const Outcome first = train(c, checked, {}, {.first = 0, .end = kSteps - 1, .host_visible = false});
    const Outcome in_place = train(c, {}, {}, {.first = 0, .end = kSteps - 1});
    EXPECT_TRUE(first.master == in_place.master && first.m == in_place.m && first.v == in_place.v) << c.name;
    const Outcome rest = train(
        c, checked, {}, {.first = kSteps - 1, .end = kSteps, .host_visible = false, .resume = &first, .seed = 99});
    EXPECT_TRUE(rest.master == whole.master && rest.m == whole.m && rest.v == whole.v) << c.name;
    EXPECT_EQ(rest.losses.back(), whole.losses.back()) << c.name;
  }
}

// The checker's report for a run with `faults` ("" if none). Each rank trains alone: the checker sees work in the order
// the executor receives it, which for work held behind a collective depends on when the rank sees it complete, so
// ranks would end at different collectives and leave the others waiting in theirs.
std::string report_of(const StreamFaults& faults, Sharding s = Sharding::full_shard,
                      const StreamOptions& streams = {.check = true, .threads = false}) {
  Config c{"faulty", {}, false};
  c.options.strategy = s;
  c.options.grad_accum = 1;
  auto& ctx = context();
  const std::vector<int> one_node(static_cast<std::size_t>(ctx.topology.world_size), 0);
  comm::MpiCommunicator alone(comm::MpiComm(MPI_COMM_SELF), "alone", one_node, ctx.world.options(), ctx.logger);
  const comm::Topology topology = comm::detect_topology(MPI_COMM_SELF, {.ranks_per_node = 1});
  try {
    train(c, streams, faults, {.world = &alone, .topology = &topology});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(StreamCheckerEngine, ComputeBeforeTheGathersEvent_IsReported) {
  const std::string report = report_of({.skip_gather_wait = true});
  EXPECT_NE(report.find("buffer 'gathered unit 1': a read by 'forward block unit 1' on queue 'compute' is not ordered "
                        "after 'all_gather unit 1' on queue 'gather'"),
            std::string::npos)
      << report;
}

TEST(StreamCheckerEngine, AStagingBufferFreedBeforeItsLastUse_IsReported) {
  const std::string report = report_of({.early_staging_free = true});
  EXPECT_NE(report.find("buffer 'reduce_scatter receive unit 3': 'accumulate gradient shard unit 3' on queue 'reduce' "
                        "touches it after it went back to its pool ('free reduce_scatter receive unit 3' after an "
                        "event of queue 'reduce')"),
            std::string::npos)
      << report;
}

TEST(StreamCheckerEngine, TheNormReadBeforeItsReduction_IsReported) {
  const std::string report = report_of({.early_norm_read = true});
  EXPECT_NE(report.find("buffer 'squared norm': a read by 'read the norm' on queue 'host' is not ordered after "
                        "'all_reduce squared norm' on queue 'reduce'"),
            std::string::npos)
      << report;
  const std::string unsharded = report_of({.early_norm_read = true}, Sharding::no_shard);
  EXPECT_NE(unsharded.find("buffer 'squared norm': a read by 'read the norm' on queue 'host' is not ordered after "
                           "'squared sum' on queue 'compute'"),
            std::string::npos)
      << unsharded;
}

// The engine on the threads executor (CUDA's rules) that loses the compute stream's first wait for the gather stream
// (for the embedding's gather): the checker names the buffer the forward then reads out of order.
TEST(StreamCheckerEngine, AnExecutorThatLosesTheFirstComputeWait_IsCaughtNamingTheBuffer) {
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    StreamOptions streams{.check = true, .threads = true, .seed = seed, .max_delay_us = 100};
    streams.make_executor = [](const StreamOptions& o) -> std::unique_ptr<Executor> {
      return std::make_unique<stream::testing::DroppingExecutor>(make_threads_executor(o.seed, o.max_delay_us),
                                                                 "compute", "gather", 1);
    };
    const std::string report = report_of({}, Sharding::full_shard, streams);
    EXPECT_NE(report.find("buffer 'gathered unit 0': a read by 'forward embedding' on queue 'compute' is not ordered "
                          "after 'all_gather unit 0' on queue 'gather'"),
              std::string::npos)
        << "seed " << seed << ": " << report;
  }
}

TEST(StreamCheckerEngine, WithoutFaults_TheCheckedInlineRunReportsNothing) {
  EXPECT_EQ(report_of({}), "");
}

}  // namespace
}  // namespace hsdp::shard
