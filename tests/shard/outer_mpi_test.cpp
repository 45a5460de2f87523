// Islands in the process mesh and DiLoCo's outer step (shard/outer.hpp), on every emulated mesh with more than one
// node (one island per node, and two islands where there are four nodes): the groups' membership, the refusal of
// island counts that do not divide the nodes, and the outer step against an independent re-computation of its
// algebra in double from the islands' parameters and outer state before it, within the bound derived from the
// roundings it makes (fp32) or the wire format's (bf16, int8, int4); its bytes against the formula.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../comm/mpi_test_context.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/model/layout.hpp"
#include "hsdp/quant/blockwise.hpp"
#include "hsdp/shard/formulas.hpp"
#include "hsdp/shard/outer.hpp"
#include "tiny_gpt.hpp"

namespace hsdp::shard::testing {
namespace {

using comm::testing::context;
using comm::testing::members_of;
using ::testing::HasSubstr;

constexpr double kU = 0x1p-24;  // fp32's unit roundoff

comm::MeshOptions island_options(int islands) {
  comm::MeshOptions o;
  o.shard_scope = comm::ShardScope::world;
  o.islands = islands;
  o.requested_by = "parallel.sharding=full_shard";
  return context().staged(o);
}

// The island counts this mesh can run: every divisor of its node count above 1.
std::vector<int> island_counts() {
  std::vector<int> counts;
  const int nodes = context().spec.nodes();
  for (int n = 2; n <= nodes; ++n) {
    if (nodes % n == 0) counts.push_back(n);
  }
  return counts;
}

TEST(Islands, AreGroupsOfWholeNodes_AndTheOuterGroupHoldsOnePlacePerIsland) {
  const comm::testing::MeshSpec& spec = context().spec;
  if (island_counts().empty()) GTEST_SKIP() << "one node: no islands";
  for (const int islands : island_counts()) {
    comm::ProcessMesh mesh(context().world, context().topology, island_options(islands));
    const int me = context().topology.world_rank;
    const int nodes_per_island = spec.nodes() / islands;
    const auto island_of = [&](int r) { return spec.node_of(r) / nodes_per_island; };
    std::vector<int> expected_island;
    for (int r = 0; r < spec.world_size; ++r) {
      if (island_of(r) == island_of(me)) expected_island.push_back(r);
    }
    EXPECT_EQ(members_of(mesh.island()), expected_island) << islands << " islands";
    EXPECT_EQ(mesh.island_index(), island_of(me));
    // The strategy's groups live inside the island: full_shard's shard group is the island.
    EXPECT_EQ(members_of(mesh.shard()), expected_island);
    EXPECT_EQ(mesh.topology().world_size, spec.world_size / islands);
    // One rank per island, each at this rank's place in its island, in island order.
    const int place =
        static_cast<int>(std::find(expected_island.begin(), expected_island.end(), me) - expected_island.begin());
    const std::vector<int> outer = members_of(mesh.outer());
    ASSERT_EQ(static_cast<int>(outer.size()), islands);
    for (int i = 0; i < islands; ++i) {
      std::vector<int> island_i;
      for (int r = 0; r < spec.world_size; ++r) {
        if (island_of(r) == i) island_i.push_back(r);
      }
      EXPECT_EQ(outer[static_cast<std::size_t>(i)], island_i[static_cast<std::size_t>(place)]);
    }
  }
}

TEST(Islands, ThatDoNotDivideTheNodes_AreAConfigErrorNamingTheNodeCount) {
  const int nodes = context().spec.nodes();
  const int islands = nodes == 1 ? 2 : nodes + 1;
  try {
    comm::ProcessMesh mesh(context().world, context().topology, island_options(islands));
    FAIL() << "parallel.islands=" << islands << " on " << nodes << " node(s) was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_THAT(e.what(), HasSubstr("parallel.islands=" + std::to_string(islands) + " must divide the job's " +
                                    std::to_string(nodes) + " node(s)"));
  }
}

// This rank's ranges of a unit split over the island: the engine's shard views, in shape.
std::vector<UnitShard> island_views(const model::ModelLayout& layout, comm::ProcessMesh& mesh,
                                    std::vector<float>& storage) {
  const auto n = static_cast<std::size_t>(mesh.island().size());
  const auto place = static_cast<std::size_t>(mesh.island().rank());
  std::vector<UnitShard> views;
  std::size_t total = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    const std::size_t numel = layout.unit(u).numel;
    const std::size_t s = (numel + n - 1) / n;
    const std::size_t begin = std::min(numel, place * s);
    views.push_back({u, begin, std::min(s, numel - begin), nullptr, nullptr, nullptr});
    total += views.back().count;
  }
  storage.assign(3 * total, 0.0f);
  std::size_t at = 0;
  for (UnitShard& v : views) {
    v.params = storage.data() + at;
    v.exp_avg = storage.data() + total + at;
    v.exp_avg_sq = storage.data() + 2 * total + at;
    at += v.count;
  }
  return views;
}

// A value for element k of unit u in island i: the same start in every island plus island i's own drift.
float start_value(int u, std::size_t k) {
  return std::sin(0.37f * static_cast<float>(k) + static_cast<float>(u)) * 0.5f;
}
float drift(int island, int u, std::size_t k, int round) {
  return 1e-2f *
         std::cos(1.3f * static_cast<float>(k) * static_cast<float>(island + 1) + static_cast<float>(u + round));
}

std::vector<float> concat(std::span<const UnitShard> views, float* UnitShard::*field) {
  std::vector<float> out;
  for (const UnitShard& v : views) out.insert(out.end(), v.*field, v.*field + v.count);
  return out;
}

// The wire format's error bound for each element of x (one island's message): bf16 2^-8 |x|; int8/int4 half the
// block's scale, the scale amax/qmax rounded up by at most 2^-16 relative; fp32 none (the sum's rounding is apart).
std::vector<double> wire_bound(const std::vector<float>& x, const OuterOptions& o) {
  std::vector<double> b(x.size(), 0.0);
  if (o.bits == 16) {
    for (std::size_t k = 0; k < x.size(); ++k) b[k] = 0x1p-8 * std::fabs(x[k]);
  } else if (o.bits < 16) {
    const double qmax = o.bits == 8 ? 127 : 7;
    for (std::size_t first = 0; first < x.size(); first += o.block) {
      const std::size_t last = std::min(x.size(), first + o.block);
      double amax = 0;
      for (std::size_t k = first; k < last; ++k) amax = std::max(amax, static_cast<double>(std::fabs(x[k])));
      for (std::size_t k = first; k < last; ++k) b[k] = amax / qmax * (1 + 0x1p-15) / 2;
    }
  }
  return b;
}

// Two outer steps (the second with momentum and error feedback from the first) on every island count this mesh
// can run, against the algebra in double.
void check_outer_steps(const OuterOptions& options) {
  const model::ModelLayout layout(tiny_config());
  for (const int islands : island_counts()) {
    comm::ProcessMesh mesh(context().world, context().topology, island_options(islands));
    std::vector<float> storage;
    const std::vector<UnitShard> inner = island_views(layout, mesh, storage);
    MemoryAccountant memory;
    OuterOptimizer outer(options, mesh.outer(), layout, inner, memory);
    // Its state: 12 bytes per element of this rank's ranges, within the formula's bound (12 S per unit).
    std::size_t held = 0;
    for (const UnitShard& v : inner) held += v.count;
    EXPECT_EQ(memory.current(MemCategory::optimizer), 12 * held);
    EXPECT_LE(static_cast<std::int64_t>(12 * held), outer_state_bytes(UnitSizes::of(layout), mesh.island().size()));
    EXPECT_EQ(memory.current(MemCategory::comm_buffers), 0) << "no scratch before the first exchange";
    for (const UnitShard& v : inner) {
      for (std::size_t k = 0; k < v.count; ++k) v.params[k] = start_value(v.unit, v.begin + k);
    }
    outer.reset(inner);
    const int island = mesh.island_index();
    for (int round = 1; round <= 2; ++round) {
      SCOPED_TRACE(std::to_string(islands) + " islands, bits " + std::to_string(options.bits) + ", round " +
                   std::to_string(round));
      for (const UnitShard& v : inner) {
        for (std::size_t k = 0; k < v.count; ++k) v.params[k] += drift(island, v.unit, v.begin + k, round);
      }
      // Before: this island's masters, the outer parameters, momentum and error; every island's x = delta + e.
      const std::vector<UnitShard> state = outer.state_views();
      const std::vector<float> o = concat(state, &UnitShard::params);
      const std::vector<float> m = concat(state, &UnitShard::exp_avg);
      const std::vector<float> e = concat(state, &UnitShard::exp_avg_sq);
      const std::vector<float> mine = concat(inner, &UnitShard::params);
      const std::size_t c = mine.size();
      std::vector<float> x(c);
      for (std::size_t k = 0; k < c; ++k) x[k] = (o[k] - mine[k]) + e[k];
      std::vector<float> every_x(c * static_cast<std::size_t>(islands));
      MPI_Allgather(x.data(), static_cast<int>(c), MPI_FLOAT, every_x.data(), static_cast<int>(c), MPI_FLOAT,
                    mesh.outer().raw());
      const std::vector<double> my_wire_bound = wire_bound(x, options);
      std::vector<double> every_bound(c * static_cast<std::size_t>(islands));
      MPI_Allgather(my_wire_bound.data(), static_cast<int>(c), MPI_DOUBLE, every_bound.data(), static_cast<int>(c),
                    MPI_DOUBLE, mesh.outer().raw());

      const comm::LinkBytes before = mesh.outer().counters().total();
      const OuterReport report = outer.after_step(options.inner_steps * round, inner);
      const comm::LinkBytes sent = mesh.outer().counters().total();
      EXPECT_EQ(report.fragment, 0);
      EXPECT_EQ(report.count, c);
      EXPECT_EQ(sent.intra + sent.inter - before.intra - before.inter, report.bytes);
      // The formula, from the wire format alone.
      const auto n = static_cast<std::uint64_t>(islands);
      const std::uint64_t q =
          options.bits == 32 ? 2 * (n - 1) * ((c + n - 1) / n) * 4
          : options.bits == 16
              ? (n - 1) * 2 * c
              : (n - 1) *
                    ((quant::packed_bytes(c, options.bits == 8 ? quant::Bits::int8 : quant::Bits::int4) + 3) / 4 * 4 +
                     4 * quant::scale_count(c, options.block));
      EXPECT_EQ(report.bytes, q);
      // The exchange's scratch, held from the first exchange on: the pseudo-gradient, and below 32 bits one decode,
      // this island's message (q / (N - 1) bytes) and the N gathered; within the formula's bound.
      const std::uint64_t scratch = options.bits == 32 ? 4 * c : 8 * c + (n + 1) * (q / (n - 1));
      EXPECT_EQ(memory.current(MemCategory::comm_buffers), static_cast<std::int64_t>(scratch));
      EXPECT_LE(
          scratch,
          outer_scratch_bytes(
              options, fragment_counts(UnitSizes::of(layout).numel, mesh.island().size(), options.fragments), islands));

      const std::vector<UnitShard> after = outer.state_views();
      const std::vector<float> o_new = concat(after, &UnitShard::params);
      const std::vector<float> m_new = concat(after, &UnitShard::exp_avg);
      const std::vector<float> e_new = concat(after, &UnitShard::exp_avg_sq);
      const std::vector<float> inner_new = concat(inner, &UnitShard::params);
      const double lr = options.lr, mu = options.momentum, N = islands;
      int bad = 0;
      for (std::size_t k = 0; k < c && bad < 5; ++k) {
        double g = 0, a = 0, w = 0;
        for (int i = 0; i < islands; ++i) {
          const std::size_t at = static_cast<std::size_t>(i) * c + k;
          g += every_x[at];
          a += std::fabs(every_x[at]);
          w += every_bound[at];
        }
        g /= N;
        a /= N;
        w /= N;
        const double m_ref = mu * m[k] + g;
        const double o_ref = o[k] - lr * (g + mu * m_ref);
        // Roundings: x's two (in the test and the optimizer alike, so exact here), the islands' sum and mean
        // (N + 1), the wire's w; then m (2), and the outer update (4), each at most u times its result.
        const double eg = w + (N + 2) * kU * (a + w);
        const double em = eg + 2 * kU * (mu * std::fabs(m[k]) + std::fabs(g) + eg);
        const double eo =
            lr * (eg + mu * em) + 4 * kU * (std::fabs(o[k]) + lr * (std::fabs(g) + eg + mu * (std::fabs(m_ref) + em)));
        const bool ok =
            std::fabs(m_new[k] - m_ref) <= em && std::fabs(o_new[k] - o_ref) <= eo && inner_new[k] == o_new[k];
        if (!ok) {
          ++bad;
          ADD_FAILURE() << "element " << k << ": outer " << o_new[k] << " vs " << o_ref << " (bound " << eo
                        << "), momentum " << m_new[k] << " vs " << m_ref << " (bound " << em << "), inner "
                        << inner_new[k];
        }
        // Error feedback keeps what the wire took from x: within the wire's bound, zero without it.
        const double e_bound = options.error_feedback ? my_wire_bound[k] : 0.0;
        if (options.bits == 32 || !options.error_feedback) {
          EXPECT_EQ(e_new[k], 0.0f);
        } else {
          EXPECT_LE(std::fabs(e_new[k]), e_bound * (1 + 4 * kU) + 1e-30);
        }
      }
      // Every island holds the same outer parameters and masters, bit for bit.
      std::vector<float> first(c);
      std::memcpy(first.data(), o_new.data(), c * sizeof(float));
      MPI_Bcast(first.data(), static_cast<int>(c), MPI_FLOAT, 0, mesh.outer().raw());
      EXPECT_EQ(std::memcmp(first.data(), o_new.data(), c * sizeof(float)), 0);
    }
  }
}

TEST(OuterStep, Fp32_IsNesterovOnTheIslandsMeanPseudoGradient_WithinTheRoundingOfTheMean) {
  if (island_counts().empty()) GTEST_SKIP() << "one node: no islands";
  check_outer_steps({.inner_steps = 4, .lr = 0.7f, .momentum = 0.9f, .bits = 32});
}

TEST(OuterStep, Bf16Int8Int4_AreWithinTheWireFormatsBound_WithAndWithoutErrorFeedback) {
  if (island_counts().empty()) GTEST_SKIP() << "one node: no islands";
  for (const int bits : {16, 8, 4}) {
    for (const bool feedback : {true, false}) {
      check_outer_steps(
          {.inner_steps = 4, .lr = 0.7f, .momentum = 0.9f, .bits = bits, .error_feedback = feedback, .block = 64});
    }
  }
}

TEST(OuterStep, LrOneWithoutMomentum_MakesEveryIslandTheMeanOfTheIslands) {
  if (island_counts().empty()) GTEST_SKIP() << "one node: no islands";
  check_outer_steps({.inner_steps = 4, .lr = 1.0f, .momentum = 0.0f, .bits = 32});
}

// outer.overlap = tau: the exchange started after step H is applied after step H + tau, and then the outer state is
// the blocking exchange's bit for bit (the same mean of the same pseudo-gradients) and the masters are the new outer
// parameters plus what the island learnt in flight, inner(H + tau) + (outer_new - inner(H)), as that float
// expression. Settling early (what a checkpoint does) and continuing in a fresh optimizer from the state and shift
// it saved (what a resume does) gives the same bits.
void check_overlap(OuterOptions options) {
  const model::ModelLayout layout(tiny_config());
  const int tau = options.overlap;
  OuterOptions blocking = options;
  blocking.overlap = 0;
  for (const int islands : island_counts()) {
    SCOPED_TRACE(std::to_string(islands) + " islands, bits " + std::to_string(options.bits));
    comm::ProcessMesh mesh(context().world, context().topology, island_options(islands));
    std::vector<float> storage_a, storage_b, storage_c;
    const std::vector<UnitShard> a = island_views(layout, mesh, storage_a);  // blocking
    const std::vector<UnitShard> b = island_views(layout, mesh, storage_b);  // overlapped
    const std::vector<UnitShard> c = island_views(layout, mesh, storage_c);  // overlapped, settled early, resumed
    MemoryAccountant memory_a, memory_b, memory_c, memory_d;
    OuterOptimizer opt_a(blocking, mesh.outer(), layout, a, memory_a);
    OuterOptimizer opt_b(options, mesh.outer(), layout, b, memory_b);
    OuterOptimizer opt_c(options, mesh.outer(), layout, c, memory_c);
    // The shift: 4 bytes per element more, within the formula's bound.
    std::size_t held = 0;
    for (const UnitShard& v : a) held += v.count;
    EXPECT_EQ(memory_b.current(MemCategory::optimizer), 16 * held);
    EXPECT_LE(static_cast<std::int64_t>(16 * held),
              outer_state_bytes(UnitSizes::of(layout), mesh.island().size(), true));
    const int island = mesh.island_index();
    for (const auto* views : {&a, &b, &c}) {
      for (const UnitShard& v : *views) {
        for (std::size_t k = 0; k < v.count; ++k) {
          v.params[k] = start_value(v.unit, v.begin + k) + drift(island, v.unit, v.begin + k, 1);
        }
      }
    }
    // The outer parameters: the start, the same in every island.
    for (auto* opt : {&opt_a, &opt_b, &opt_c}) {
      opt->reset(a);
      for (const UnitShard& v : opt->state_views()) {
        for (std::size_t k = 0; k < v.count; ++k) v.params[k] = start_value(v.unit, v.begin + k);
      }
    }
    const std::int64_t h = options.inner_steps;
    const std::vector<float> sent = concat(b, &UnitShard::params);
    EXPECT_EQ(opt_a.after_step(h, a).applied, 0);
    const OuterReport started = opt_b.after_step(h, b);
    EXPECT_EQ(started.fragment, 0);
    EXPECT_EQ(started.applied, -1);
    EXPECT_EQ(opt_b.in_flight().fragment, 0);
    EXPECT_EQ(opt_b.in_flight().apply_step, h + tau);
    EXPECT_EQ(concat(b, &UnitShard::params), sent) << "the masters changed when the exchange started";
    EXPECT_EQ(opt_c.after_step(h, c).applied, -1);
    // C: settled now, its state and shift carried into a fresh optimizer D (a checkpoint and its resume).
    opt_c.settle();
    OuterOptimizer opt_d(options, mesh.outer(), layout, c, memory_d);
    const auto copy = [](const std::vector<UnitShard>& from, const std::vector<UnitShard>& to) {
      for (std::size_t i = 0; i < from.size(); ++i) {
        for (float* UnitShard::*field : {&UnitShard::params, &UnitShard::exp_avg, &UnitShard::exp_avg_sq}) {
          if (from[i].*field != nullptr) std::copy_n(from[i].*field, from[i].count, to[i].*field);
        }
      }
    };
    copy(opt_c.state_views(), opt_d.state_views());
    copy(opt_c.shift_views(), opt_d.shift_views());
    opt_d.resume_flight(opt_c.in_flight());
    // The steps in flight: every island moves on its own.
    for (int s = 1; s <= tau; ++s) {
      for (const auto* views : {&b, &c}) {
        for (const UnitShard& v : *views) {
          for (std::size_t k = 0; k < v.count; ++k) v.params[k] += drift(island, v.unit, v.begin + k, 1 + s);
        }
      }
      const std::vector<float> now = concat(b, &UnitShard::params);
      const OuterReport rb = opt_b.after_step(h + s, b);
      const OuterReport rd = opt_d.after_step(h + s, c);
      if (s < tau) {
        EXPECT_EQ(rb.applied, -1) << "step " << h + s;
        EXPECT_EQ(concat(b, &UnitShard::params), now);
        continue;
      }
      EXPECT_EQ(rb.applied, 0);
      EXPECT_EQ(rd.applied, 0);
      EXPECT_EQ(opt_b.in_flight().fragment, -1);
      // The outer state equals the blocking exchange's, bit for bit.
      for (float* UnitShard::*field : {&UnitShard::params, &UnitShard::exp_avg, &UnitShard::exp_avg_sq}) {
        EXPECT_EQ(concat(opt_b.state_views(), field), concat(opt_a.state_views(), field));
        EXPECT_EQ(concat(opt_d.state_views(), field), concat(opt_a.state_views(), field));
      }
      const std::vector<float> outer_new = concat(opt_a.state_views(), &UnitShard::params);
      const std::vector<float> got = concat(b, &UnitShard::params);
      int bad = 0;
      for (std::size_t k = 0; k < got.size() && bad < 5; ++k) {
        const float want = now[k] + (outer_new[k] - sent[k]);
        if (got[k] != want) {
          ++bad;
          ADD_FAILURE() << "element " << k << ": " << got[k] << " != " << now[k] << " + (" << outer_new[k] << " - "
                        << sent[k] << ")";
        }
      }
      EXPECT_EQ(concat(c, &UnitShard::params), got) << "settled early and resumed, the masters differ";
    }
  }
}

TEST(OuterStep, Overlap_AppliesTheBlockingStepPlusWhatTheIslandLearntInFlight_AndSettlingEarlyChangesNoBit) {
  if (island_counts().empty()) GTEST_SKIP() << "one node: no islands";
  check_overlap({.inner_steps = 4, .lr = 0.7f, .momentum = 0.9f, .bits = 32, .overlap = 2});
  check_overlap({.inner_steps = 4, .lr = 0.7f, .momentum = 0.9f, .bits = 4, .block = 64, .overlap = 3});
}

// A master gone non-finite on one island (the first element of island 0's first place): at every wire format the
// exchange completes on every island without a throw, and the NaN reaches the masters of every island at that place
// (the next step's loss then ends the job on every rank as a divergence); the other places stay finite.
TEST(OuterStep, ANonFiniteMasterOnOneIsland_ReachesEveryIslandAtItsPlace_WithoutAThrowOnOneAlone) {
  if (island_counts().empty()) GTEST_SKIP() << "one node: no islands";
  const model::ModelLayout layout(tiny_config());
  for (const int bits : {32, 16, 8, 4}) {
    const OuterOptions options{.inner_steps = 4, .bits = bits, .block = 64};
    for (const int islands : island_counts()) {
      SCOPED_TRACE(std::to_string(islands) + " islands, bits " + std::to_string(bits));
      comm::ProcessMesh mesh(context().world, context().topology, island_options(islands));
      std::vector<float> storage;
      const std::vector<UnitShard> inner = island_views(layout, mesh, storage);
      MemoryAccountant memory;
      OuterOptimizer outer(options, mesh.outer(), layout, inner, memory);
      for (const UnitShard& v : inner) {
        for (std::size_t k = 0; k < v.count; ++k) v.params[k] = start_value(v.unit, v.begin + k);
      }
      outer.reset(inner);
      const bool first_place = mesh.island().rank() == 0;
      if (first_place && mesh.island_index() == 0) inner[0].params[0] = std::numeric_limits<float>::quiet_NaN();
      EXPECT_EQ(outer.after_step(options.inner_steps, inner).applied, 0);
      const std::vector<float> masters = concat(inner, &UnitShard::params);
      const bool any_nan = std::any_of(masters.begin(), masters.end(), [](float x) { return std::isnan(x); });
      EXPECT_EQ(any_nan, first_place);
    }
  }
}

TEST(OuterStep, OverlapBeyondOneFragmentsPeriod_IsAConfigErrorNamingTheLimit) {
  const OuterOptions o{.inner_steps = 8, .fragments = 2, .overlap = 5};
  try {
    validate(o, 4);
    FAIL() << "outer.overlap=5 with H=8, F=2 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_THAT(e.what(), HasSubstr("outer.overlap=5 must be between 0 and outer.inner_steps / outer.fragments = 4"));
  }
  EXPECT_NO_THROW(validate({.inner_steps = 8, .fragments = 2, .overlap = 4}, 4));
}

}  // namespace
}  // namespace hsdp::shard::testing
