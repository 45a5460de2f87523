// train::check_memory_fits (hsdp/train/memory_check.hpp): what it refuses before anything is allocated, and that the
// strategy it suggests instead fits with the memory its step holds beyond state and activations.
#include "hsdp/train/memory_check.hpp"

#include <gtest/gtest.h>

#include <string>

#include "hsdp/core/error.hpp"
#include "hsdp/shard/formulas.hpp"

namespace hsdp::train {
namespace {

constexpr double kGiB = 1073741824.0;

// Llama 2 7B's shape, micro-batch 1 x 1024 tokens, on 2 nodes of 8 CPU ranks.
TrainOptions llama7b(shard::Sharding strategy) {
  TrainOptions o;
  o.model = model::GptConfig{.n_layer = 32,
                             .n_head = 32,
                             .n_embd = 4096,
                             .block_size = 1024,
                             .vocab_size = 32000,
                             .padded_vocab_size = 32000,
                             .arch = model::Arch::llama,
                             .ffn_dim = 11008};
  o.engine.strategy = strategy;
  o.micro_batch = 1;
  o.seq_len = 1024;
  return o;
}

comm::Topology two_nodes_of_8() {
  comm::Topology t;
  t.world_size = 16;
  for (int r = 0; r < 16; ++r) t.node_of_rank.push_back(r / 8);
  return t;
}

std::string refusal(const TrainOptions& o, double gib) {
  const model::ModelLayout layout(o.model);
  try {
    check_memory_fits(o, layout, two_nodes_of_8(), 1, HostMemory{static_cast<std::uint64_t>(gib * kGiB), "test"}, 1,
                      "host test");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    return e.what();
  }
  return "";
}

// no_shard needs 16 P = 100 GiB of state; with 40 GiB, shard_grad_op's state and activations (6.3 + 12.4 GiB) would
// fit but not the units it keeps gathered through the step (about 4 P / 16 + 2 P of transient, hsdp-plan's 47.6 GiB
// in all): the suggestion is full_shard, which fits with its transient.
TEST(MemoryCheck, SuggestsOnlyAStrategyThatFitsWithItsTransientMemory) {
  const TrainOptions o = llama7b(shard::Sharding::no_shard);
  const std::string m = refusal(o, 40);
  ASSERT_NE(m.find("memory: this rank needs at least"), std::string::npos) << m;
  EXPECT_EQ(m.find("shard_grad_op"), std::string::npos) << m;
  EXPECT_NE(m.find("parallel.sharding=full_shard"), std::string::npos) << m;
  // The suggestion, recomputed from the formulas hsdp-plan uses: full_shard fits in 40 GiB, shard_grad_op does not.
  const model::ModelLayout layout(o.model);
  const shard::UnitSizes units = shard::UnitSizes::of(layout);
  const double act = static_cast<double>(model::activation_bytes(model::activation_shape(o.model), 1, 1024, false));
  using Case = std::pair<shard::Sharding, bool>;  // a strategy and whether it fits in 40 GiB
  for (const auto& [s, fits] : {Case{shard::Sharding::shard_grad_op, false}, Case{shard::Sharding::full_shard, true}}) {
    shard::EngineOptions e;
    e.strategy = s;
    const double peak = static_cast<double>(shard::model_state_bytes(units, s, 16, DType::f32) +
                                            shard::transient_bytes(units, e, 16, 2, 8)) +
                        act;
    EXPECT_EQ(peak <= 40 * kGiB, fits) << shard::to_string(s) << ": " << peak / kGiB << " GiB";
  }
  EXPECT_EQ(refusal(o, 200), "") << "100 GiB of state and the activations fit in 200 GiB";
}

}  // namespace
}  // namespace hsdp::train
