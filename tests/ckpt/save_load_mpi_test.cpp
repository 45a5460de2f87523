// Save with one sharding, load with another (and at other world sizes): values identical bit for bit, checksums
// verified on every load, training state intact.
#include <gtest/gtest.h>

#include <filesystem>
#include <tuple>

#include "fixtures.hpp"
#include "hsdp/ckpt/checkpoint.hpp"
#include "hsdp/ckpt/inspect.hpp"
#include "mpi_context.hpp"

namespace hsdp::ckpt::testing {
namespace {

constexpr Split kSplits[] = {Split::disjoint, Split::replicas, Split::whole, Split::unit_owner, Split::interleaved};
// The checkpoints the 4-rank run leaves for the 1-, 2- and 3-rank runs: one per way of sharding at save.
constexpr Split kFixtureSplits[] = {Split::disjoint, Split::replicas, Split::whole};
constexpr std::int64_t kFixtureStep = 40;

std::string fixture_path(Split split) {
  return (std::filesystem::path(mpi().fixture_dir) / (std::string("saved_by_4_") + split_name(split)) /
          checkpoint_file_name(kFixtureStep))
      .string();
}

void expect_same_state(const TrainState& got, const TrainState& want) {
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.sampler, want.sampler);
  EXPECT_EQ(got.scaler, want.scaler);
  EXPECT_EQ(got.deck_text, want.deck_text);
  EXPECT_EQ(got.strategy, want.strategy);
  EXPECT_EQ(got.world_size, want.world_size);
  EXPECT_EQ(got.nodes, want.nodes);
  EXPECT_EQ(got.mesh, want.mesh);
}

// Declared first so that it runs first: the 4-rank run writes the checkpoints the other world sizes read.
TEST(Fixtures, FourRankRun_WritesCheckpointsForOtherWorldSizes) {
  if (!mpi().write_fixtures) GTEST_SKIP() << "only the 4-rank run (--write-fixtures) writes them";
  ASSERT_EQ(mpi().size, 4);
  ASSERT_FALSE(mpi().fixture_dir.empty());
  const model::ModelLayout layout(tiny_config());
  for (const Split split : kFixtureSplits) {
    RankShards mine(ranges_for(split, layout, mpi().rank, mpi().size));
    mine.fill(kFixtureStep);
    const std::string dir = std::filesystem::path(fixture_path(split)).parent_path().string();
    save_checkpoint(MPI_COMM_WORLD, dir, layout, mine.shards, writer_for(split, mpi().rank, mpi().size),
                    state_for(kFixtureStep, 4));
  }
}

class SaveLoad : public ::testing::TestWithParam<std::tuple<Split, Split, IoMode>> {};

TEST_P(SaveLoad, LoadWithAnotherSplit_GivesTheSavedValuesBitForBit) {
  const auto [save_split, load_split, io] = GetParam();
  const model::ModelLayout layout(tiny_config());
  SharedDir dir;
  RankShards saved(ranges_for(save_split, layout, mpi().rank, mpi().size));
  saved.fill(7);
  SaveOptions options;
  options.io = io;
  const SaveResult result =
      save_checkpoint(MPI_COMM_WORLD, dir.str(), layout, saved.shards, writer_for(save_split, mpi().rank, mpi().size),
                      state_for(7, mpi().size), options);
  EXPECT_EQ(result.path, dir / "step_7.h5");
  EXPECT_EQ(result.tensor_bytes, 3 * layout.logical_numel() * sizeof(float));
  EXPECT_FALSE(result.independent_fallback) << result.fallback_cause;

  RankShards loaded(ranges_for(load_split, layout, mpi().rank, mpi().size));
  loaded.poison();
  const TrainState state = load_checkpoint(MPI_COMM_WORLD, result.path, layout, loaded.shards, io);
  EXPECT_EQ(loaded.mismatches(layout, 7), 0u)
      << "saved " << split_name(save_split) << ", loaded " << split_name(load_split);
  expect_same_state(state, state_for(7, mpi().size));
}

std::string case_name(const ::testing::TestParamInfo<SaveLoad::ParamType>& info) {
  const auto [save_split, load_split, io] = info.param;
  return std::string(split_name(save_split)) + "_to_" + split_name(load_split) +
         (io == IoMode::per_dataset ? "_per_dataset" : "_single_call");
}

// Every split is saved once per I/O mode and loaded with the next split in the list (and once with itself).
std::vector<std::tuple<Split, Split, IoMode>> cases() {
  std::vector<std::tuple<Split, Split, IoMode>> out;
  const std::size_t n = std::size(kSplits);
  for (std::size_t i = 0; i < n; ++i) {
    out.emplace_back(kSplits[i], kSplits[(i + 1) % n], IoMode::per_dataset);
    out.emplace_back(kSplits[i], kSplits[(i + 2) % n], IoMode::single_call);
  }
  out.emplace_back(Split::disjoint, Split::disjoint, IoMode::single_call);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Splits, SaveLoad, ::testing::ValuesIn(cases()), case_name);

TEST(Fixtures, CheckpointsSavedByFourRanks_LoadAtThisWorldSizeWithEverySplit) {
  ASSERT_FALSE(mpi().fixture_dir.empty());
  const model::ModelLayout layout(tiny_config());
  for (const Split saved : kFixtureSplits) {
    for (const Split split : kSplits) {
      for (const IoMode io : {IoMode::per_dataset, IoMode::single_call}) {
        RankShards loaded(ranges_for(split, layout, mpi().rank, mpi().size));
        loaded.poison();
        const TrainState state = load_checkpoint(MPI_COMM_WORLD, fixture_path(saved), layout, loaded.shards, io);
        EXPECT_EQ(loaded.mismatches(layout, kFixtureStep), 0u)
            << "saved by 4 ranks " << split_name(saved) << ", loaded on " << mpi().size << " ranks "
            << split_name(split);
        expect_same_state(state, state_for(kFixtureStep, 4));
      }
    }
  }
}

TEST(Fixtures, ReadFullCheckpoint_OnEachRank_MatchesTheSavedValues) {
  // Every rank reads the whole file on its own (MPI_COMM_SELF), as hsdp-ckpt does.
  const FullCheckpoint full = read_full_checkpoint(fixture_path(Split::replicas));
  const model::ModelLayout layout(full.config);
  EXPECT_EQ(full.state.step, kFixtureStep);
  std::vector<Range> whole;
  for (int u = 0; u < layout.num_units(); ++u) whole.push_back({u, 0, layout.unit(u).numel});
  RankShards copy(whole);
  for (std::size_t u = 0; u < whole.size(); ++u) {
    std::copy(full.params[u].begin(), full.params[u].end(), copy.params[u].begin());
    std::copy(full.exp_avg[u].begin(), full.exp_avg[u].end(), copy.exp_avg[u].begin());
    std::copy(full.exp_avg_sq[u].begin(), full.exp_avg_sq[u].end(), copy.exp_avg_sq[u].begin());
  }
  EXPECT_EQ(copy.mismatches(layout, kFixtureStep), 0u);
}

TEST(SaveLoadState, Inspect_ShowsTheShapesAndTheMeshAtSave) {
  const model::ModelLayout layout(tiny_config());
  SharedDir dir;
  RankShards mine(ranges_for(Split::disjoint, layout, mpi().rank, mpi().size));
  mine.fill(3);
  save_checkpoint(MPI_COMM_WORLD, dir.str(), layout, mine.shards, true, state_for(3, mpi().size));
  const CheckpointInfo info = inspect_checkpoint(dir / "step_3.h5");
  EXPECT_EQ(info.format_version, kFormatVersion);
  EXPECT_EQ(info.state.world_size, mpi().size);
  EXPECT_EQ(info.state.mesh, state_for(3, mpi().size).mesh);
  EXPECT_EQ(info.config.padded_vocab_size, 64);
  EXPECT_EQ(info.datasets.size(), 3 * layout.params().size());
  bool found_wte = false;
  for (const DatasetInfo& d : info.datasets) {
    EXPECT_TRUE(d.checksum.has_value()) << d.path;
    if (d.path == "/model/transformer.wte.weight") {
      found_wte = true;
      EXPECT_EQ(d.shape, (std::vector<std::int64_t>{50, 16}));  // logical: vocab_size rows, not padded
      EXPECT_EQ(d.bytes, 50u * 16u * 4u);
    }
  }
  EXPECT_TRUE(found_wte);
}

}  // namespace
}  // namespace hsdp::ckpt::testing
