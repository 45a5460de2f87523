// --calibrate: hsdp-commbench --json lines in, link bandwidth and latency out; hsdp-bench-train-cpu/-gpu --json lines
// in, a compute rate per rank out.
#include "plan/calibrate.hpp"

#include <gtest/gtest.h>

#include "hsdp/core/error.hpp"
#include "plan/cost.hpp"
#include "plan/planner.hpp"
#include "plan/shapes.hpp"

namespace hsdp::plan {
namespace {

Calibration parse_commbench(const std::string& text, const std::string& origin) {
  return parse_calibration({{text, origin}});
}

// As hsdp-commbench --json writes them (2 nodes x 2 ranks): world, intra-node (2 ranks), inter-node (2 ranks).
constexpr const char* kLines =
    R"({"bench":"comm","group":"world","ranks":4,"collective":"all_reduce","bytes":8,"iters":100,"time_us":30,"algbw_gbps":0.0003,"busbw_gbps":0.0004,"bus_factor":1.5}
{"bench":"comm","group":"intra-node","ranks":2,"collective":"all_reduce","bytes":8,"iters":100,"time_us":4,"algbw_gbps":0.002,"busbw_gbps":0.002,"bus_factor":1}
{"bench":"comm","group":"intra-node","ranks":2,"collective":"all_gather","bytes":8,"iters":100,"time_us":3,"algbw_gbps":0.003,"busbw_gbps":0.001,"bus_factor":0.5}
{"bench":"comm","group":"intra-node","ranks":2,"collective":"all_reduce","bytes":1048576,"iters":10,"time_us":100,"algbw_gbps":10.5,"busbw_gbps":10.5,"bus_factor":1}
{"bench":"comm","group":"intra-node","ranks":2,"collective":"all_gather","bytes":1048576,"iters":10,"time_us":80,"algbw_gbps":13,"busbw_gbps":6.5,"bus_factor":0.5}
{"bench":"comm","group":"intra-node","ranks":2,"collective":"all_to_all","bytes":1048576,"iters":10,"time_us":80,"algbw_gbps":13,"busbw_gbps":99,"bus_factor":0.5}
{"bench":"comm","group":"inter-node","ranks":2,"collective":"reduce_scatter","bytes":16,"iters":100,"time_us":12,"algbw_gbps":0.001,"busbw_gbps":0.0007,"bus_factor":0.5}
{"bench":"comm","group":"inter-node","ranks":2,"collective":"reduce_scatter","bytes":1048576,"iters":10,"time_us":900,"algbw_gbps":1.2,"busbw_gbps":0.6,"bus_factor":0.5}
{"bench":"memcpy","bytes":67108864,"gbps":12.5}
)";

TEST(Calibrate, BandwidthIsMeanBusbwAtTheLargestSize_LatencyIsTimePerMessageAtTheSmallest) {
  const Calibration c = parse_commbench(kLines, "bench.json");
  ASSERT_TRUE(c.intra.has_value());
  ASSERT_TRUE(c.inter.has_value());
  EXPECT_DOUBLE_EQ(c.intra->gbps, (10.5 + 6.5) / 2);  // all_to_all is not a ring collective: left out
  // all_reduce on 2 ranks: 2 messages; all_gather: 1.
  EXPECT_DOUBLE_EQ(c.intra->latency_us, (4.0 / 2 + 3.0 / 1) / 2);
  EXPECT_DOUBLE_EQ(c.inter->gbps, 0.6);
  EXPECT_DOUBLE_EQ(c.inter->latency_us, 12.0);
  EXPECT_NE(c.inter->how.find("inter-node"), std::string::npos);
}

// By size: busbw with the latency of the size's messages taken out, where that latency is under half the time.
TEST(Calibrate, BandwidthBySize_TakesTheLatencyOut_AndLeavesOutLatencyBoundSizes) {
  const Calibration c = parse_commbench(kLines, "bench.json");
  // intra: latency 2.5 us; 8 B is the latency's own size: left out.
  ASSERT_EQ(c.intra->by_size.size(), 1u);
  EXPECT_DOUBLE_EQ(c.intra->by_size[0].bytes, 1048576);
  EXPECT_DOUBLE_EQ(c.intra->by_size[0].gbps, (10.5 * 100 / (100 - 2 * 2.5) + 6.5 * 80 / (80 - 2.5)) / 2);
  ASSERT_EQ(c.inter->by_size.size(), 1u);
  EXPECT_DOUBLE_EQ(c.inter->by_size[0].gbps, 0.6 * 900 / (900 - 12));
  EXPECT_NE(c.inter->how.find("by size"), std::string::npos) << c.inter->how;
}

// Between two measured sizes the bandwidth is interpolated linearly in log size; outside them the nearest one's.
TEST(Calibrate, ACollectiveGetsTheBandwidthOfItsSize) {
  LinkClass link{2, 0, {{65536, 1.0}, {4194304, 0.5}}};
  EXPECT_DOUBLE_EQ(link.gbps_at(1024), 1.0);
  EXPECT_DOUBLE_EQ(link.gbps_at(65536), 1.0);
  EXPECT_NEAR(link.gbps_at(1048576), 1.0 - 0.5 * (4.0 / 6.0), 1e-12);  // 16x of the 64x from 64 KiB to 4 MiB
  EXPECT_DOUBLE_EQ(link.gbps_at(1 << 30), 0.5);
  const LinkClass flat{2, 0, {}};
  EXPECT_DOUBLE_EQ(flat.gbps_at(1024), 2.0);
  // An all_gather of 262144 fp32 elements per rank on 2 ranks across 2 nodes is 2 MiB in commbench's convention.
  shard::GroupView g;
  g.node_of_rank = {0, 1};
  Cluster cluster;
  cluster.inter = link;
  const CollectiveCall call{&g, comm::Collective::all_gather, 262144, 4, 1, 1, Phase::forward_gather};
  EXPECT_NEAR(collective_seconds(call, cluster), 1048576.0 / (link.gbps_at(2097152) * 1e9), 1e-15);
}

// The world's ring over nodes of several ranks is measured as it runs: a ring collective over a group of that shape
// (the same number of its members on every node) takes the world ring's bandwidth and latency instead of twice the
// per-flow share of the inter-node pairs (measured with both ranks of a node sending at once); one rank per node,
// or a group of another shape, keeps the inter-node link's.
TEST(Calibrate, AGroupShapedLikeTheMeasuredWorldRing_TakesItsTimeFromIt) {
  const Calibration c = parse_commbench(kLines, "bench.json");
  ASSERT_TRUE(c.node_ring.has_value());
  EXPECT_EQ(c.node_ring_members, 2);
  EXPECT_DOUBLE_EQ(c.node_ring->gbps, 0.0004);
  EXPECT_DOUBLE_EQ(c.node_ring->latency_us, 30.0 / 6);  // all_reduce on 4 ranks: 6 messages
  Cluster cluster;
  cluster.inter = {1.0, 10, {}};
  cluster.node_ring = {3.0, 2, {}};
  cluster.node_ring_members = 2;
  // all_gather of 1000 fp32 per rank: (n-1) messages of 4000 B per rank
  shard::GroupView world;
  world.node_of_rank = {0, 0, 1, 1};
  const CollectiveCall ring{&world, comm::Collective::all_gather, 1000, 4, 1, 1, Phase::forward_gather};
  EXPECT_NEAR(collective_seconds(ring, cluster), 3 * 2e-6 + 3 * 4000.0 / 3e9, 1e-15);
  shard::GroupView pair;
  pair.node_of_rank = {0, 1};
  const CollectiveCall across{&pair, comm::Collective::all_gather, 1000, 4, 1, 1, Phase::forward_gather};
  EXPECT_NEAR(collective_seconds(across, cluster), 10e-6 + 4000.0 / 1e9, 1e-15);
  shard::GroupView uneven;  // 2 ranks on node 0, 1 on node 1: the inter-node per-flow share (1 GB/s at its pace)
  uneven.node_of_rank = {0, 0, 1};
  const CollectiveCall other{&uneven, comm::Collective::all_gather, 1000, 4, 1, 1, Phase::forward_gather};
  EXPECT_NEAR(collective_seconds(other, cluster), 2 * 10e-6 + 2 * 4000.0 / 1e9, 1e-15);
  // One node of ranks: no node ring.
  const Calibration one = parse_commbench(
      R"({"bench":"comm","group":"world","ranks":4,"collective":"all_gather","bytes":64,"iters":2,"time_us":9,"algbw_gbps":1,"busbw_gbps":2,"bus_factor":0.75}
{"bench":"comm","group":"intra-node","ranks":4,"collective":"all_gather","bytes":64,"iters":2,"time_us":9,"algbw_gbps":1,"busbw_gbps":2,"bus_factor":0.75})",
      "one.json");
  EXPECT_FALSE(one.node_ring.has_value());
}

TEST(Calibrate, OneNode_HasNoInterNodeLink) {
  const Calibration c = parse_commbench(
      R"({"bench":"comm","group":"intra-node","ranks":4,"collective":"all_gather","bytes":64,"iters":2,"time_us":9,"algbw_gbps":1,"busbw_gbps":2,"bus_factor":0.75})",
      "one.json");
  ASSERT_TRUE(c.intra.has_value());
  EXPECT_FALSE(c.inter.has_value());
  EXPECT_DOUBLE_EQ(c.intra->gbps, 2);
  EXPECT_DOUBLE_EQ(c.intra->latency_us, 3);
}

TEST(Calibrate, ALineThatIsNotJson_IsAConfigErrorNamingTheLine) {
  try {
    parse_commbench(std::string(kLines) + "# size time algbw\n", "bench.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(std::string(e.what()).find("bench.json:10"), std::string::npos) << e.what();
  }
}

TEST(Calibrate, NoCommLines_IsAConfigError) {
  EXPECT_THROW(parse_commbench(R"({"bench":"memcpy","bytes":64,"gbps":1})", "x.json"), Error);
  EXPECT_THROW(read_calibration({"/nonexistent/bench.json"}), Error);
}

// As hsdp-bench-train-cpu --json writes it (abridged: the fields --calibrate reads and achieved_gflops, quoted).
constexpr const char* kTrainCpu =
    R"({"bench":"train_cpu","n_layer":2,"n_embd":64,"n_head":2,"vocab_size":64,"padded_vocab_size":64,"params":110000,"batch":4,"seq_len":32,"threads":2,"checkpointing":false,"steps":10,"step_ms":2.5,"achieved_gflops":40.2})";

// Compute = hsdp-plan's FLOPs of the measured step / its mean step_ms: (6 P + 12 L C T) x B T / step. Exact up to
// the rounding of one division (1e-12 relative).
TEST(Calibrate, TrainCpuLine_GivesHsdpPlansFlopsOfTheStepOverItsMeanStepTime) {
  const Calibration c = parse_calibration({{kTrainCpu, "train.json"}});
  ASSERT_TRUE(c.compute.has_value());
  EXPECT_FALSE(c.intra.has_value());
  EXPECT_FALSE(c.inter.has_value());
  const double flops = (6.0 * 110000 + 12.0 * 2 * 64 * 32) * 4 * 32;
  EXPECT_NEAR(c.compute->tflops, flops / 2.5e-3 / 1e12, 1e-12 * flops / 2.5e-3 / 1e12);
  EXPECT_NE(c.compute->how.find("40.2"), std::string::npos) << c.compute->how;  // the bench's own count, quoted
}

// A GPU bench line says checkpointing as "activation_checkpointing" (a CPU line as "checkpointing"): its step's FLOPs
// count the recomputation, (8 P + 16 L C T) per token, as the CPU line's do.
TEST(Calibrate, TrainGpuLineWithActivationCheckpointing_CountsTheRecomputation) {
  const std::string line = R"({"bench":"train_gpu","n_layer":2,"n_embd":64,"params":110000,"batch":4,"seq_len":32,)"
                           R"("activation_checkpointing":true,"step_ms":2.5})";
  const Calibration c = parse_calibration({{line, "gpu.json"}});
  ASSERT_TRUE(c.compute.has_value());
  const double flops = (8.0 * 110000 + 16.0 * 2 * 64 * 32) * 4 * 32;
  EXPECT_NEAR(c.compute->tflops, flops / 2.5e-3 / 1e12, 1e-12 * flops / 2.5e-3 / 1e12);
}

// The point of the definition: planning the benchmarked model on one rank with the calibrated rate predicts the
// measured step's time as its compute (1e-12 relative: two divisions).
TEST(Calibrate, PlanOfTheBenchmarkedModelOnOneRank_ComputesInTheMeasuredStepTime) {
  model::GptConfig g;
  g.n_layer = 2;
  g.n_head = 2;
  g.n_embd = 64;
  g.block_size = 32;
  g.vocab_size = 64;
  g.padded_vocab_size = 64;
  const PlanModel m = gpt_model(g, "bench");
  const std::string line = R"({"bench":"train_gpu","n_layer":2,"n_embd":64,"params":)" + std::to_string(m.params()) +
                           R"(,"batch":4,"seq_len":32,"step_ms":7.5,"tflops":0.01})";
  const Calibration c = parse_calibration({{line, "gpu.json"}});
  ASSERT_TRUE(c.compute.has_value());
  Cluster cluster;
  cluster.nodes = 1;
  cluster.ranks_per_node = 1;
  cluster.compute_tflops = c.compute->tflops;
  const Workload work{4, 32, 1};
  EXPECT_NEAR(step_flops(m, work, false) / (cluster.compute_tflops * 1e12), 7.5e-3, 7.5e-3 * 1e-12);
}

TEST(Calibrate, CommbenchAndTrainFiles_TogetherGiveLinksAndCompute) {
  const Calibration c = parse_calibration({{kLines, "bench.json"}, {kTrainCpu, "train.json"}});
  EXPECT_TRUE(c.intra.has_value());
  EXPECT_TRUE(c.inter.has_value());
  EXPECT_TRUE(c.compute.has_value());
  EXPECT_EQ(c.source, "bench.json, train.json");
}

TEST(Calibrate, TrainLineWithoutStepTime_IsAConfigErrorNamingTheLine) {
  try {
    parse_calibration(
        {{R"({"bench":"train_cpu","n_layer":2,"n_embd":64,"params":1,"batch":1,"seq_len":8})", "t.json"}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(std::string(e.what()).find("t.json:1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hsdp::plan
