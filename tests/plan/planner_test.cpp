// hsdp-plan's numbers for large models (Llama shapes) against the closed forms of docs/architecture.md ("The
// formulas"), and its recommendations on clusters where the answer is known.
#include "plan/planner.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "hsdp/core/error.hpp"
#include "plan/report.hpp"
#include "plan/shapes.hpp"
#include "plan/cost.hpp"

namespace hsdp::plan {
namespace {

using shard::Sharding;

const StrategyPlan& row(const Plan& plan, const std::string& name) {
  for (const auto& s : plan.strategies) {
    if (s.variant.name == name) return s;
  }
  throw std::runtime_error("no row " + name);
}

// A GPT-2 of n_layer blocks, width 64, 2 heads, vocabulary 64.
model::GptConfig tiny_config(int n_layer) {
  model::GptConfig tiny;
  tiny.n_layer = n_layer;
  tiny.n_head = 2;
  tiny.n_embd = 64;
  tiny.block_size = 64;
  tiny.vocab_size = 64;
  tiny.padded_vocab_size = 64;
  return tiny;
}

PlanInputs inputs(const PlanModel& model, int nodes, int ranks_per_node) {
  PlanInputs in;
  in.model = model;
  in.cluster.nodes = nodes;
  in.cluster.ranks_per_node = ranks_per_node;
  in.base.grad_accum = in.work.grad_accum;
  return in;
}

TEST(Shapes, LlamaParameterCounts_AreThePublishedOnes) {
  // Published: 6.74e9, 13.0e9 (13.02e9), 68.98e9; to the digits given.
  EXPECT_NEAR(static_cast<double>(named_model("llama-7b").params()), 6.74e9, 0.005e9);
  EXPECT_NEAR(static_cast<double>(named_model("llama-13b").params()), 13.0e9, 0.05e9);
  EXPECT_NEAR(static_cast<double>(named_model("llama-70b").params()), 68.98e9, 0.005e9);
  EXPECT_EQ(named_model("llama-70b").unit_numel.size(), 82u);  // embedding, 80 blocks, norm + head
  EXPECT_EQ(named_model("gpt2-124m").params(), 124475904u);    // with the vocabulary padded to 50304 rows
  EXPECT_THROW(named_model("llama-8b"), Error);
}

// hsdp's accounting on 8 ranks (1 node x 8 and 2 x 4): full_shard 16P/8, no_shard 16P, zero1 8P + 16P/8. Each of
// the U = 82 units is padded to a multiple of n = 8 elements, i.e. by at most n - 1 = 7 elements; so full_shard may
// exceed 16P/n by at most 16 U (n-1)/n bytes and zero1 8P + 16P/n by at most 8 U (n-1) + 16 U (n-1)/n. (Llama-70B's
// units all divide by 8, so both are in fact exact.)
TEST(Llama70b, ModelStateOn8Ranks_IsTheClosedFormUpToUnitPadding) {
  const PlanModel llama = named_model("llama-70b");
  const double p = static_cast<double>(llama.params());
  const double units = static_cast<double>(llama.unit_numel.size());
  const int n = 8;
  for (const auto& [nodes, per_node] : {std::pair{1, 8}, std::pair{2, 4}}) {
    const Plan plan = make_plan(inputs(llama, nodes, per_node));
    const double full = static_cast<double>(row(plan, "full_shard").model_state);
    EXPECT_GE(full, 16 * p / n);
    EXPECT_LE(full - 16 * p / n, 16 * units * (n - 1) / n);
    EXPECT_EQ(row(plan, "no_shard").model_state, static_cast<std::int64_t>(16 * llama.params()));
    const double zero1 = static_cast<double>(row(plan, "zero1").model_state);
    EXPECT_GE(zero1, 8 * p + 16 * p / n);
    EXPECT_LE(zero1 - (8 * p + 16 * p / n), 8 * units * (n - 1) + 16 * units * (n - 1) / n);
    // The ZeRO paper's mixed-precision numbers, printed next to hsdp's.
    EXPECT_DOUBLE_EQ(row(plan, "no_shard").zero_paper_state, 16 * p);
    EXPECT_DOUBLE_EQ(row(plan, "zero1").zero_paper_state, 4 * p + 12 * p / n);
    EXPECT_DOUBLE_EQ(row(plan, "shard_grad_op").zero_paper_state, 2 * p + 14 * p / n);
    EXPECT_DOUBLE_EQ(row(plan, "full_shard").zero_paper_state, 16 * p / n);
    EXPECT_DOUBLE_EQ(row(plan, "hybrid_shard").zero_paper_state, 16 * p / per_node);
  }
}

TEST(Llama70b, NoShardWithBf16Params_Is20P) {
  const PlanModel llama = named_model("llama-70b");
  EXPECT_EQ(model_state_bytes(UnitSizes{llama.unit_numel, false}, Sharding::no_shard, 1, DType::bf16),
            static_cast<std::int64_t>(20 * llama.params()));
}

TEST(Recommendation, TinyModelOnAFastCluster_IsNoShard) {
  const model::GptConfig tiny = tiny_config(2);
  for (const int nodes : {1, 2}) {
    PlanInputs in = inputs(gpt_model(tiny, "tiny"), nodes, 4);
    in.cluster.intra = {300, 2, {}};
    in.cluster.inter = {200, 3, {}};
    const Plan plan = make_plan(in);
    EXPECT_EQ(plan.strategies[static_cast<std::size_t>(plan.recommended)].variant.name, "no_shard") << plan.reason;
    EXPECT_NE(plan.reason.find("first of no_shard"), std::string::npos) << plan.reason;
    EXPECT_EQ(plan.reason.find("Predicted faster"), std::string::npos) << plan.reason;  // it is the fastest
    EXPECT_EQ(plan.deck_keys, std::vector<std::string>{"--parallel.sharding=no_shard"});
  }
}

PlanInputs cluster_of(const std::string& model, int nodes, double intra_gbps, double inter_gbps, double memory_gib,
                      std::int64_t micro_batch) {
  PlanInputs in = inputs(named_model(model), nodes, 8);
  in.cluster.intra.gbps = intra_gbps;
  in.cluster.inter.gbps = inter_gbps;
  in.cluster.memory_per_rank_gib = memory_gib;
  in.work.micro_batch = micro_batch;
  return in;
}

std::string picked(const Plan& plan) {
  return plan.strategies[static_cast<std::size_t>(plan.recommended)].variant.name;
}

// GPT-2 1.5B on 8 x 16 GiB: no_shard is predicted a hair faster than shard_grad_op but needs 23 GiB.
TEST(Recommendation, AFasterRowThatDoesNotFit_TheReasonSaysItDoesNotFit) {
  PlanInputs in = cluster_of("gpt2-1.5b", 1, 150, 25, 16, 4);
  in.work.seq_len = 1024;
  const Plan plan = make_plan(in);
  EXPECT_EQ(picked(plan), "shard_grad_op") << plan.reason;
  EXPECT_EQ(plan.strategies[static_cast<std::size_t>(plan.fastest)].variant.name, "no_shard");
  EXPECT_NE(plan.reason.find("Predicted faster but not recommended: no_shard ("), std::string::npos) << plan.reason;
  EXPECT_NE(plan.reason.find("does not fit: it needs"), std::string::npos) << plan.reason;
}

// GPT-2 124M on 2 nodes x 8, intra 150 / inter 25 GB/s: full_shard+qwZ+hpZ+qgZ is predicted faster than the pick
// (hybrid_shard_zero2, rule 2), but by less than 10%: the pick stays, and the reason says by how much.
TEST(Recommendation, ZeroPPUnderTheTenPercentGain_TheReasonGivesItsGain) {
  const Plan plan = make_plan(cluster_of("gpt2-124m", 2, 150, 25, 16, 1));
  EXPECT_EQ(picked(plan), "hybrid_shard_zero2") << plan.reason;
  const double gain = 1 - row(plan, "full_shard+qwZ+hpZ+qgZ").step_s / row(plan, "hybrid_shard_zero2").step_s;
  EXPECT_GT(gain, 0);
  EXPECT_LT(gain, kZeroPPMinimumGain);
  EXPECT_NE(plan.reason.find("full_shard+qwZ+hpZ+qgZ ("), std::string::npos) << plan.reason;
  EXPECT_NE(plan.reason.find("% faster than hybrid_shard_zero2: rule 3 asks >= 10.0%"), std::string::npos)
      << plan.reason;
}

// Llama-7B on 2 nodes x 8 of 80 GiB, micro-batch 6 x 1024 tokens, intra 150 / inter 25 GB/s: the fastest
// (no_shard) does not fit, and the fastest that fits (full_shard+qwZ+hpZ+qgZ) is ZeRO++, which rule 3 leaves out
// while the pick's inter-node communication stays under its compute: both are explained.
TEST(Recommendation, FastestAndFastestThatFits_AreBothExplained) {
  PlanInputs in = cluster_of("llama-7b", 2, 150, 25, 80, 6);
  in.work.seq_len = 1024;
  const Plan plan = make_plan(in);
  EXPECT_EQ(picked(plan), "hybrid_shard_zero2") << plan.reason;
  EXPECT_NE(plan.reason.find("no_shard ("), std::string::npos) << plan.reason;
  EXPECT_NE(plan.reason.find("does not fit"), std::string::npos) << plan.reason;
  EXPECT_NE(plan.reason.find("full_shard+qwZ+hpZ+qgZ ("), std::string::npos) << plan.reason;
  EXPECT_NE(plan.reason.find("which rule 3 considers only when inter-node communication exceeds compute"),
            std::string::npos)
      << plan.reason;
}

TEST(DeckKeys, ZeroPPPick_SelectsItsShardingAndEachZeroPPKey) {
  const Plan plan = make_plan(inputs(named_model("gpt2-124m"), 2, 4));  // hpZ: groups of the 4 ranks of a node
  ASSERT_EQ(picked(plan), "full_shard+qwZ+hpZ+qgZ") << plan.reason;
  const std::vector<std::string> expected = {"--parallel.sharding=full_shard", "--zeropp.quantized_weights=true",
                                             "--zeropp.hpz_partition_size=4", "--zeropp.quantized_gradients=true"};
  EXPECT_EQ(plan.deck_keys, expected);
}

TEST(DeckKeys, DeckWithZeroPPOn_AndAPlainPick_TurnsOffWhatThePickDoesNotUse) {
  PlanInputs in = inputs(named_model("gpt2-124m"), 1, 8);
  in.deck_zeropp.quantized_weights = true;
  in.deck_zeropp.hpz_partition_size = 2;
  const Plan plan = make_plan(in);
  ASSERT_EQ(picked(plan), "no_shard") << plan.reason;
  const std::vector<std::string> expected = {"--parallel.sharding=no_shard", "--zeropp.quantized_weights=false",
                                             "--zeropp.hpz_partition_size=0"};
  EXPECT_EQ(plan.deck_keys, expected);
}

TEST(DeckKeys, ARowPlannedWithCheckpointing_TurnsItOn) {
  const PlanInputs in = inputs(named_model("gpt2-124m"), 1, 8);
  StrategyPlan p = make_plan(in).strategies.front();
  p.checkpointing = true;
  p.fit = Fit::with_checkpointing;
  const std::vector<std::string> expected = {"--parallel.sharding=no_shard", "--train.activation_checkpointing=true"};
  EXPECT_EQ(deck_keys(p, in), expected);
}

// train.activation_checkpointing=true in the deck: every row keeps one block's activations and recomputes the
// forward, (8P + 16 LCT) / (6P + 12 LCT) of the compute (1e-12 relative: one division each).
TEST(ActivationCheckpointing, DeckAsksForIt_EveryRowIsPlannedWithIt) {
  PlanInputs in = inputs(named_model("gpt2-124m"), 1, 8);
  const Plan without = make_plan(in);
  in.activation_checkpointing = true;
  const Plan with = make_plan(in);
  const PlanModel& m = in.model;
  const double p = static_cast<double>(m.params()), lct = 12.0 * 768 * 64;
  for (std::size_t i = 0; i < with.strategies.size(); ++i) {
    const StrategyPlan& s = with.strategies[i];
    EXPECT_TRUE(s.checkpointing) << s.variant.name;
    EXPECT_EQ(s.fit, Fit::with_checkpointing) << s.variant.name;
    EXPECT_EQ(without.strategies[i].fit, Fit::yes) << s.variant.name;
    const double ratio = s.time.compute_s / without.strategies[i].time.compute_s;
    EXPECT_NEAR(ratio, (8 * p + 16 * lct) / (6 * p + 12 * lct), 1e-12);
  }
}

TEST(Recommendation, Llama70bOn8x80GiB_SlowInterNode_IsSharded_AndSaysWhatItNeeds) {
  PlanInputs in = inputs(named_model("llama-70b"), 2, 4);
  in.cluster.memory_per_rank_gib = 80;
  in.cluster.inter = {3, 20, {}};
  in.work = {1, 2048, 1};
  const Plan plan = make_plan(in);
  const std::string pick = plan.strategies[static_cast<std::size_t>(plan.recommended)].variant.name;
  EXPECT_TRUE(pick == "full_shard" || pick.find("qgZ") != std::string::npos) << pick << ": " << plan.reason;
  // 16P/8 = 128 GiB of model state per rank: nothing fits on 8 x 80 GiB, and the reason says how many nodes would.
  EXPECT_EQ(row(plan, "full_shard").fit, Fit::no);
  EXPECT_NE(plan.reason.find("nothing fits"), std::string::npos) << plan.reason;
  EXPECT_NE(plan.reason.find("full_shard fits on"), std::string::npos) << plan.reason;
}

// "full_shard fits on N nodes": the plan on N nodes has a full_shard row that fits, on N - 1 it does not; on the
// CPU (fp32 compute copies) and on GPUs (bf16), whose transient memory differs.
TEST(Recommendation, NothingFits_NamesTheSmallestNodeCountWhereFullShardFits_OnCpuAndGpu) {
  for (const bool cuda : {false, true}) {
    SCOPED_TRACE(cuda ? "cuda" : "cpu");
    PlanInputs in = inputs(named_model("llama-70b"), 2, 4);
    in.cuda = cuda;
    in.cluster.inter = {3, 20, {}};
    in.work = {1, 2048, 1};
    const Plan plan = make_plan(in);
    const std::string key = "full_shard fits on ";
    const std::size_t at = plan.reason.find(key);
    ASSERT_NE(at, std::string::npos) << plan.reason;
    const int nodes = std::stoi(plan.reason.substr(at + key.size()));
    in.cluster.nodes = nodes;
    EXPECT_NE(row(make_plan(in), "full_shard").fit, Fit::no) << nodes << " nodes";
    in.cluster.nodes = nodes - 1;
    EXPECT_EQ(row(make_plan(in), "full_shard").fit, Fit::no) << nodes - 1 << " nodes";
  }
}

// On GPUs (bf16 compute copies): on the CPU's fp32 copies the 3 gathers in flight stage 1.7 GB each in bf16 and
// full_shard+qwZ+hpZ+qgZ needs 75.8 GiB of the 72 usable.
TEST(Recommendation, Llama70bOn8GpuNodes_SlowInterNode_IsZeroPP) {
  PlanInputs in = inputs(named_model("llama-70b"), 8, 8);
  in.cuda = true;
  in.cluster.inter = {3, 20, {}};
  in.work = {1, 2048, 1};
  in.base.param_dtype = DType::bf16;
  in.base.reduce_dtype = DType::bf16;
  const Plan plan = make_plan(in);
  const std::string pick = plan.strategies[static_cast<std::size_t>(plan.recommended)].variant.name;
  EXPECT_NE(pick.find("qgZ"), std::string::npos) << pick << ": " << plan.reason;
  EXPECT_NE(plan.reason.find("exceeds its compute"), std::string::npos) << plan.reason;
}

TEST(Report, JsonHasOneObjectPerStrategy_AndOneRecommendation) {
  const PlanInputs in = inputs(named_model("gpt2-124m"), 2, 2);
  const Plan plan = make_plan(in);
  std::istringstream lines(json_report(in, plan));
  int objects = 0, recommended = 0, islands = 0;
  for (std::string line; std::getline(lines, line);) {
    EXPECT_EQ(line.front(), '{');
    EXPECT_EQ(line.back(), '}');
    if (line.find("\"strategy\":\"islands\"") != std::string::npos) {  // after the strategies, one per island row
      ++islands;
      for (const char* key : {"\"islands\":", "\"inner_strategy\":", "\"exchange_ms\":", "\"step_ms\":",
                              "\"bytes_inter\":", "\"model_state_bytes\":", "\"offered\":"}) {
        EXPECT_NE(line.find(key), std::string::npos) << key;
      }
      continue;
    }
    EXPECT_EQ(islands, 0) << "a strategy row after the island rows";
    ++objects;
    for (const char* key :
         {"\"strategy\":", "\"model_state_bytes\":", "\"bytes_intra\":", "\"bytes_inter\":",
          "\"bytes_intra_max_rank\":",
          "\"bytes_inter_max_rank\":", "\"bytes_intra_rank0\":", "\"bytes_inter_rank0\":",
          "\"activation_bytes_checkpointed\":", "\"step_ms\":", "\"fits\":"}) {
      EXPECT_NE(line.find(key), std::string::npos) << key;
    }
    if (line.find("\"recommended\":true") != std::string::npos) {
      ++recommended;
      EXPECT_NE(line.find("\"deck_keys\":\"--parallel.sharding="), std::string::npos) << line;
      EXPECT_NE(line.find("\"fastest\":"), std::string::npos) << line;
    }
  }
  EXPECT_EQ(objects, 8);
  EXPECT_EQ(islands, 1);  // one island per node
  EXPECT_EQ(recommended, 1);
}

// The job-wide sum, the busiest rank and rank 0, per link class: on 2 x 2, zero1's rank 0 sends nothing across
// nodes (its ring neighbour is on its node) while the ranks at the node boundary do: the maximum is not rank 0's.
TEST(Report, BytesPerLink_JobWideFirst_ThenBusiestRank_ThenRankZero) {
  const PlanInputs in = inputs(named_model("gpt2-124m"), 2, 2);
  const Plan plan = make_plan(in);
  for (const StrategyPlan& p : plan.strategies) {
    EXPECT_GE(p.all_ranks.intra, p.max_rank.intra) << p.variant.name;
    EXPECT_GE(p.all_ranks.inter, p.max_rank.inter) << p.variant.name;
    EXPECT_GE(p.max_rank.intra, p.rank0.intra) << p.variant.name;
    EXPECT_GE(p.max_rank.inter, p.rank0.inter) << p.variant.name;
  }
  EXPECT_EQ(row(plan, "zero1").rank0.inter, 0u);
  EXPECT_GT(row(plan, "zero1").max_rank.inter, 0u);
  const std::string table = table_report(in, plan, {});
  EXPECT_NE(table.find("intra job  inter job  intra max  inter max   intra r0   inter r0"), std::string::npos) << table;
  EXPECT_NE(table.find("\ndeck keys: --parallel.sharding="), std::string::npos) << table;
}

TEST(Cost, AllReduceOnTwoNodes_IsTwoStepsOfAlphaPlusBytesOverInterBandwidth) {
  shard::GroupView g;
  g.rank = 0;
  g.node_of_rank = {0, 1};
  Cluster c;
  c.inter = {10, 5, {}};
  const CollectiveCall call{&g, comm::Collective::all_reduce, 1000, 4, 1, 0, Phase::cross_node_reduce};
  // 2 (n-1) alpha + 2 (n-1) ceil(1000/2) 4 B / 10 GB/s
  EXPECT_DOUBLE_EQ(collective_seconds(call, c), 2 * 5e-6 + 4000.0 / 10e9);
}

// The step replays the engine's schedule (cost.hpp). Links that cost nothing: the step is the compute.
TEST(StepSchedule, FreeLinks_TheStepIsTheCompute) {
  const model::GptConfig tiny = tiny_config(3);
  PlanInputs in = inputs(gpt_model(tiny, "tiny"), 2, 2);
  in.cluster.intra = {1e9, 0, {}};
  in.cluster.inter = {1e9, 0, {}};
  in.cluster.compute_tflops = 1e-3;
  for (const StrategyPlan& s : make_plan(in).strategies) {
    EXPECT_NEAR(s.step_s, s.time.compute_s, 1e-9 * s.time.compute_s) << s.variant.name;
    EXPECT_NEAR(s.time.exposed_s, 0, 1e-9 * s.time.compute_s) << s.variant.name;
  }
}

// hybrid_shard on 2 nodes of 1 rank: nothing to gather, each unit's gradient all-reduced across the nodes when its
// backward is done. With the link far slower than compute, the all-reduces follow each other on it from the first
// one on: step = forward (a third of the compute) + the head's backward (final unit and tied embedding) + the sum of
// the all-reduces. The former max(compute, comm) overlapped them with the forward too.
TEST(StepSchedule, HybridOnASlowLink_GradientReductionsStartAfterTheHeadsBackward) {
  const model::GptConfig tiny = tiny_config(3);
  const PlanModel m = gpt_model(tiny, "tiny");
  PlanInputs in = inputs(m, 2, 1);
  in.cluster.inter = {1e-4, 0, {}};  // 100 KB/s
  const StrategyPlan& hybrid = row(make_plan(in), "hybrid_shard");
  const double compute = hybrid.time.compute_s;
  const double per_token = 6.0 * static_cast<double>(m.params()) + 12.0 * 3 * 64 * static_cast<double>(in.work.seq_len);
  const double head = 6.0 * static_cast<double>(m.unit_numel.front() + m.unit_numel.back());
  const double expected = compute / 3 + (2.0 / 3) * compute * head / per_token + hybrid.time.comm_s;
  EXPECT_GT(hybrid.time.comm_s, 10 * compute);
  EXPECT_NEAR(hybrid.step_s, expected, 1e-9 * expected);
  EXPECT_GT(hybrid.step_s, std::max(compute, hybrid.time.comm_s));
}

// The CPU engine (host_polls): each step of a collective waits half the compute between two polls. no_shard on 2
// nodes of 1 rank, free links: the one bucket's all-reduce (2 steps on 2 ranks) goes after the backward, so the step
// is the compute and one poll interval (a micro-batch's compute over 12 L + 6 stretches). Without host_polls: the
// compute.
TEST(StepSchedule, HostPolls_EachStepOfACollectiveWaitsHalfAPollInterval) {
  const model::GptConfig tiny = tiny_config(3);
  PlanInputs in = inputs(gpt_model(tiny, "tiny"), 2, 1);
  in.cluster.intra = {1e9, 0, {}};
  in.cluster.inter = {1e9, 0, {}};
  in.cluster.compute_tflops = 1e-3;
  const StrategyPlan off = row(make_plan(in), "no_shard");
  EXPECT_NEAR(off.step_s, off.time.compute_s, 1e-9 * off.time.compute_s);
  in.cluster.host_polls = true;
  const StrategyPlan on = row(make_plan(in), "no_shard");
  const double interval = on.time.compute_s / (12.0 * 3 + 6);
  EXPECT_NEAR(on.step_s, on.time.compute_s + 2 * interval / 2, 1e-9 * on.step_s);
}

}  // namespace
}  // namespace hsdp::plan

namespace hsdp::plan {
namespace {

// Islands (parallel.islands): one island per node of a 2-node cluster. The exchange's bytes are the library's
// formula for the island row's shard; the step is the island's plus the exchange over H; on a slow link the row is
// offered, with its deck keys; on a fast one it is not.
TEST(Islands, StepIsTheIslandsPlusTheExchangeOverH_AndSlowLinksOfferIt) {
  PlanInputs in = inputs(gpt_model(tiny_config(4), "tiny"), 2, 2);
  in.outer.inner_steps = 16;
  in.outer.bits = 4;
  in.outer.block = 256;
  in.cluster.compute_tflops = 0.005;  // a CPU rank's
  in.cluster.inter = {0.003, 100, {}};  // 24 Mbit/s
  const Plan slow = make_plan(in);
  ASSERT_EQ(slow.islands.size(), 1u);
  const IslandPlan& r = slow.islands.front();
  EXPECT_EQ(r.islands, 2);
  std::size_t shard = 0;
  for (const std::size_t n : in.model.unit_numel) {
    shard += (n + static_cast<std::size_t>(r.inner.shard_size) - 1) / static_cast<std::size_t>(r.inner.shard_size);
  }
  EXPECT_EQ(r.exchange_bytes_rank, shard::outer_exchange_bytes(in.outer, shard, 2));
  EXPECT_DOUBLE_EQ(r.step_s, r.inner.step_s + r.exchange_s / 16);
  // The outer state, 12 bytes per element, and the exchange's scratch for the one fragment: the pseudo-gradient and
  // a decode (8 per element), this island's message and the two gathered (3 M, M = the bytes sent over N - 1 = 1).
  EXPECT_EQ(r.model_state, r.inner.model_state + static_cast<std::int64_t>(12 * shard + 8 * shard) +
                               3 * static_cast<std::int64_t>(r.exchange_bytes_rank));
  // The exchange is all_gather(M(c)) across the two nodes: alpha + M / bw.
  EXPECT_NEAR(r.exchange_s, 100e-6 + static_cast<double>(r.exchange_bytes_rank) / 0.003e9, 1e-9);
  const StrategyPlan& pick = slow.strategies[static_cast<std::size_t>(slow.recommended)];
  EXPECT_TRUE(r.offered) << pick.variant.name << " inter " << pick.time.comm_inter_s << " compute "
                         << pick.time.compute_s << " step " << pick.step_s << "; islands " << r.step_s << " inside "
                         << r.inner.step_s << " exchange " << r.exchange_s;
  EXPECT_NE(slow.islands_offer.find("--parallel.islands=2"), std::string::npos) << slow.islands_offer;
  EXPECT_NE(slow.islands_offer.find("--outer.inner_steps=16 --outer.bits=4"), std::string::npos);

  in.cluster.inter = {25, 10, {}};
  const Plan fast = make_plan(in);
  ASSERT_EQ(fast.islands.size(), 1u);
  EXPECT_FALSE(fast.islands.front().offered);
  EXPECT_TRUE(fast.islands_offer.empty());
}

// An island row fits by the island's peak with the outer state and scratch on top (the CPU's memory), with
// checkpointing (and its recomputation in the island's time) where only that fits; a row that does not fit is never
// offered. Over budgets from below the smallest island to above the largest, some island rows whose own strategy
// fits do not fit with the outer state: the planner must not offer them. The offer's deck keys are the island row's
// own (ZeRO++ keys and checkpointing with them).
TEST(Islands, FitByTheIslandsPeakWithTheOuterState_AndTheOfferCarriesTheRowsKeys) {
  PlanInputs in = inputs(named_model("gpt2-1.5b"), 4, 8);
  in.cluster.inter = {0.5, 10, {}};  // slow links: islands are offered
  int hidden = 0, offers = 0;
  for (double gib = 4; gib <= 96; gib *= 1.15) {
    in.cluster.memory_per_rank_gib = gib;
    const Plan plan = make_plan(in);
    for (const IslandPlan& r : plan.islands) {
      SCOPED_TRACE(std::to_string(gib) + " GiB, " + std::to_string(r.islands) + " islands of " + r.inner.variant.name);
      const double outer = static_cast<double>(r.model_state - r.inner.model_state);
      const double peak = static_cast<double>(r.inner.peak()) + outer;
      const double peak_ckpt = static_cast<double>(r.inner.peak_checkpointed()) + outer;
      switch (r.fit) {
        case Fit::yes:
          EXPECT_LE(peak, plan.budget_bytes);
          break;
        case Fit::with_checkpointing:
          EXPECT_LE(peak_ckpt, plan.budget_bytes);
          EXPECT_GT(peak, plan.budget_bytes);
          EXPECT_TRUE(r.inner.checkpointing) << "planned without the recomputation it needs";
          break;
        case Fit::no:
          EXPECT_GT(peak_ckpt, plan.budget_bytes);
          EXPECT_FALSE(r.offered);
          if (r.inner.fit != Fit::no) ++hidden;
          break;
      }
      if (!r.offered) continue;
      ++offers;
      for (const std::string& key : deck_keys(r.inner, in)) {
        EXPECT_NE(plan.islands_offer.find(key), std::string::npos) << key << " not in: " << plan.islands_offer;
      }
    }
  }
  EXPECT_GT(hidden, 0) << "no budget where the outer state decides: the sweep does not test the rule";
  EXPECT_GT(offers, 0);
}

// outer.overlap = tau: the exchange runs behind tau inner steps; the step carries what they do not cover,
// max(0, exchange - tau x island step) / H, and the outer state the shift (16 bytes per element, with the scratch). The
// island row is the fastest island strategy, which hiding the exchange can change (a bigger exchange, hidden, for a
// faster step).
TEST(Islands, Overlap_HidesTheExchangeBehindTauInnerSteps_AndAddsTheShiftToTheOuterState) {
  PlanInputs in = inputs(gpt_model(tiny_config(4), "tiny"), 2, 2);
  in.outer.inner_steps = 16;
  in.cluster.compute_tflops = 0.005;
  in.cluster.inter = {0.003, 100, {}};
  const IslandPlan blocking = make_plan(in).islands.front();
  double previous = blocking.step_s;
  for (const int tau : {1, 4, 16}) {
    in.outer.overlap = tau;
    const IslandPlan r = make_plan(in).islands.front();
    const double exposed = std::max(0.0, r.exchange_s - tau * r.inner.step_s);
    EXPECT_DOUBLE_EQ(r.step_s, r.inner.step_s + exposed / 16) << "tau " << tau;
    EXPECT_LE(r.step_s, previous) << "tau " << tau << " is slower than a shorter overlap";
    previous = r.step_s;
    std::size_t shard = 0;
    for (const std::size_t n : in.model.unit_numel) {
      shard += (n + static_cast<std::size_t>(r.inner.shard_size) - 1) / static_cast<std::size_t>(r.inner.shard_size);
    }
    EXPECT_EQ(r.model_state, r.inner.model_state + static_cast<std::int64_t>(16 * shard + 8 * shard) +
                                 3 * static_cast<std::int64_t>(r.exchange_bytes_rank))
        << "the outer state with the shift, and the exchange's scratch";
  }
  EXPECT_LT(previous, blocking.step_s) << "tau = H hides nothing";
  EXPECT_NE(make_plan(in).islands_offer.find("--outer.overlap=16"), std::string::npos) << make_plan(in).islands_offer;
}

TEST(Islands, OneNode_HasNoIslandRows_AndTheDecksIslandCountIsPlannedWhereItDividesTheNodes) {
  PlanInputs in = inputs(gpt_model(tiny_config(2), "tiny"), 1, 4);
  EXPECT_TRUE(make_plan(in).islands.empty());
  in.cluster.nodes = 4;
  in.islands = 2;
  const Plan plan = make_plan(in);
  ASSERT_EQ(plan.islands.size(), 2u);
  EXPECT_EQ(plan.islands[0].islands, 2);
  EXPECT_EQ(plan.islands[1].islands, 4);
}

}  // namespace
}  // namespace hsdp::plan
