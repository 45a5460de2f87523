// The outer step's schedule (shard/outer.hpp): which fragment is exchanged after which step, how the units split
// into fragments, and the refusals of bad [outer] keys.
#include "hsdp/shard/outer.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hsdp/core/error.hpp"
#include "hsdp/model/layout.hpp"

namespace hsdp::shard {
namespace {

using ::testing::HasSubstr;

TEST(OuterSchedule, OneFragment_IsExchangedAfterEveryHthStep) {
  const OuterOptions o{.inner_steps = 8};
  for (std::int64_t step = 1; step <= 40; ++step) {
    EXPECT_EQ(fragment_due(o, step), step % 8 == 0 ? 0 : -1) << "step " << step;
  }
}

TEST(OuterSchedule, FragmentF_IsExchangedAtStepsWhereStepModHIsFTimesHOverF) {
  const OuterOptions o{.inner_steps = 8, .fragments = 4};
  std::vector<int> seen;
  for (std::int64_t step = 1; step <= 16; ++step) seen.push_back(fragment_due(o, step));
  EXPECT_EQ(seen, (std::vector<int>{-1, 1, -1, 2, -1, 3, -1, 0, -1, 1, -1, 2, -1, 3, -1, 0}));
}

TEST(OuterSchedule, Fragments_AreRunsOfConsecutiveUnits_EachNonEmpty_OfNearEqualSize) {
  const model::ModelLayout layout(
      model::GptConfig{.n_layer = 12, .n_head = 12, .n_embd = 768, .block_size = 1024, .vocab_size = 50257});
  for (const int f : {1, 2, 3, 4, 7, 14}) {
    const std::vector<int> of = unit_fragments(layout, f);
    ASSERT_EQ(static_cast<int>(of.size()), layout.num_units());
    EXPECT_EQ(of.front(), 0);
    EXPECT_EQ(of.back(), f - 1);
    for (std::size_t u = 1; u < of.size(); ++u) {
      EXPECT_TRUE(of[u] == of[u - 1] || of[u] == of[u - 1] + 1) << f << " fragments, unit " << u;
    }
    // Near-equal: no fragment holds more than its share plus the largest unit (a cut falls after a unit).
    std::vector<double> size(static_cast<std::size_t>(f), 0);
    double total = 0, largest = 0;
    for (int u = 0; u < layout.num_units(); ++u) {
      const auto n = static_cast<double>(layout.unit(u).numel);
      size[static_cast<std::size_t>(of[static_cast<std::size_t>(u)])] += n;
      total += n;
      largest = std::max(largest, n);
    }
    for (const double s : size) EXPECT_LE(s, total / f + largest) << f << " fragments";
  }
}

// Each fragment's elements in one rank's shard, and the exchange's scratch sized for the largest, recomputed here
// from the units and the wire formats.
TEST(OuterScratch, IsSizedForTheLargestFragmentOfTheShard_InEachWireFormat) {
  const std::vector<std::size_t> numel = {1100, 10, 700, 301, 5};
  // Two fragments cut after the unit whose running count first reaches half of 2116: unit 0. Over a shard of 4,
  // ceil(numel / 4) = 275 | 3, 175, 76, 2.
  ASSERT_EQ(unit_fragments(numel, 2), (std::vector<int>{0, 1, 1, 1, 1}));
  const std::vector<std::size_t> counts = fragment_counts(numel, 4, 2);
  EXPECT_EQ(counts, (std::vector<std::size_t>{275, 3 + 175 + 76 + 2}));
  EXPECT_EQ(fragment_counts(numel, 1, 1), (std::vector<std::size_t>{2116}));
  const std::uint64_t c = 275;  // the largest
  const std::uint64_t islands = 3;
  EXPECT_EQ(outer_scratch_bytes({.bits = 32}, counts, 3), 4 * c);
  EXPECT_EQ(outer_scratch_bytes({.bits = 16}, counts, 3), 8 * c + (islands + 1) * 2 * c);
  // A message at 8 and 4 bits: the packed values padded to 4 bytes (275 -> 276; 138 -> 140), then one fp32 scale
  // per block of 100 (3).
  EXPECT_EQ(outer_scratch_bytes({.bits = 8, .block = 100}, counts, 3), 8 * c + (islands + 1) * (276 + 4 * 3));
  EXPECT_EQ(outer_scratch_bytes({.bits = 4, .block = 100}, counts, 3), 8 * c + (islands + 1) * (140 + 4 * 3));
  EXPECT_EQ(outer_scratch_bytes({.bits = 4}, counts, 1), 0u) << "one island exchanges nothing";
}

TEST(OuterSchedule, BadKeys_AreConfigErrorsNamingTheKey) {
  const auto error_of = [](OuterOptions o) {
    try {
      validate(o, 14);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::config);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_THAT(error_of({.bits = 12}), HasSubstr("outer.bits=12"));
  EXPECT_THAT(error_of({.inner_steps = 10, .fragments = 4}), HasSubstr("outer.fragments=4 must divide"));
  EXPECT_THAT(error_of({.inner_steps = 30, .fragments = 15}), HasSubstr("between 1 and the model's 14 units"));
  EXPECT_THAT(error_of({.momentum = 1.0f}), HasSubstr("outer.momentum"));
  EXPECT_EQ(error_of({.inner_steps = 8, .bits = 4, .fragments = 4}), "accepted");
}

}  // namespace
}  // namespace hsdp::shard
