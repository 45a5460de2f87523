// Which GPU each rank of a host takes (device::assign_gpus, plan_host_gpus in select_device.hpp), from what each rank
// sees: a plain launch (every rank sees every GPU), Slurm's --gpu-bind=closest on a two-socket node with its default
// task distribution (tasks alternate between the sockets), a GPU per task, more ranks than GPUs, a rank that sees none,
// a rank with fewer choices, emulated nodes on one host, lists that overlap in part, and the busiest GPU against every
// placement of random small hosts. Runs in every build: the choice is made from identities, not devices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hsdp/device/select_device.hpp"

namespace hsdp::device {
namespace {

using Seen = std::vector<std::vector<std::string>>;

// The GPU (identity) each rank took.
std::vector<std::string> taken(const Seen& visible, const std::vector<int>& index) {
  std::vector<std::string> gpus;
  for (std::size_t i = 0; i < visible.size(); ++i) {
    gpus.push_back(index[i] < 0 ? "-" : visible[i][static_cast<std::size_t>(index[i])]);
  }
  return gpus;
}

TEST(AssignGpus, EveryRankSeesEveryGpu_TakesRankModuloCount) {
  const std::vector<std::string> all = {"a", "b", "c", "d"};
  for (const int ranks : {1, 3, 4, 8, 10}) {
    const Seen visible(static_cast<std::size_t>(ranks), all);
    const std::vector<int> index = assign_gpus(visible);
    for (int r = 0; r < ranks; ++r) EXPECT_EQ(index[static_cast<std::size_t>(r)], r % 4) << ranks << " ranks";
  }
}

// A node with 4 GPUs, 2 near each socket; srun --gpu-bind=closest gives a task the GPUs of its socket, and the
// default distribution (block:cyclic) puts the node's tasks 0, 2 on socket 0 and 1, 3 on socket 1. Each task sees its
// socket's GPUs as its devices 0 and 1: rank modulo 2 put tasks 0 and 2 on GPU a, 1 and 3 on c, and b, d idle.
TEST(AssignGpus, ClosestBindingAcrossSockets_GivesEachRankAGpuOfItsOwn) {
  const Seen visible = {{"a", "b"}, {"c", "d"}, {"a", "b"}, {"c", "d"}};
  EXPECT_EQ(taken(visible, assign_gpus(visible)), (std::vector<std::string>{"a", "c", "b", "d"}));
  // 8 tasks on 2 sockets of 4 GPUs each, distributed cyclically: still one GPU each.
  const std::vector<std::string> s0 = {"g0", "g1", "g2", "g3"}, s1 = {"g4", "g5", "g6", "g7"};
  const Seen eight = {s0, s1, s0, s1, s0, s1, s0, s1};
  EXPECT_EQ(taken(eight, assign_gpus(eight)),
            (std::vector<std::string>{"g0", "g4", "g1", "g5", "g2", "g6", "g3", "g7"}));
  const HostGpus plan = plan_host_gpus(eight, std::vector<int>(8, 0));
  EXPECT_EQ(plan.most_of_a_node_on_one_gpu, 1);
  EXPECT_EQ(plan.ranks_on_gpu, std::vector<int>(8, 1));
  EXPECT_EQ(plan.gpus, 8);
}

// --gpu-bind=single:1 or map_gpu: each task sees one GPU, its device 0.
TEST(AssignGpus, AGpuPerTask_EachTakesItsOwn) {
  const Seen visible = {{"d"}, {"c"}, {"b"}, {"a"}};
  EXPECT_EQ(assign_gpus(visible), (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(plan_host_gpus(visible, {0, 0, 0, 0}).most_of_a_node_on_one_gpu, 1);
}

// A rank that sees one GPU chooses before one that sees more, whatever their order: it keeps its only GPU.
TEST(AssignGpus, TheRankWithFewerChoices_ChoosesFirst) {
  const Seen visible = {{"a", "b"}, {"a"}};
  EXPECT_EQ(taken(visible, assign_gpus(visible)), (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(plan_host_gpus(visible, {0, 0}).most_of_a_node_on_one_gpu, 1);
  EXPECT_EQ(plan_host_gpus(visible, {0, 0}).gpus, 2);
}

// More ranks than GPUs: shared evenly, the sharing counted per GPU and per node.
TEST(AssignGpus, MoreRanksThanGpus_ShareEvenly_AndTheSharingIsCounted) {
  const Seen visible(5, std::vector<std::string>{"a", "b"});
  const HostGpus plan = plan_host_gpus(visible, {0, 0, 0, 0, 0});
  EXPECT_EQ(taken(visible, plan.index), (std::vector<std::string>{"a", "b", "a", "b", "a"}));
  EXPECT_EQ(plan.ranks_on_gpu, (std::vector<int>{3, 2, 3, 2, 3}));
  EXPECT_EQ(plan.most_of_a_node_on_one_gpu, 3);
  EXPECT_EQ(plan.gpus, 2);
  // The same five ranks as emulated nodes {0, 1}, {2, 3}, {4}: within each node every rank has a GPU of its own,
  // though the host's GPUs still carry three and two ranks.
  const HostGpus emulated = plan_host_gpus(visible, {0, 0, 1, 1, 2});
  EXPECT_EQ(emulated.most_of_a_node_on_one_gpu, 1);
  EXPECT_EQ(emulated.ranks_on_gpu, (std::vector<int>{3, 2, 3, 2, 3}));
  // Two emulated nodes of two ranks on one GPU (tests/gpu/device_check.sh's 2x2 sharing the GPU).
  EXPECT_EQ(plan_host_gpus(Seen(4, {"a"}), {0, 0, 1, 1}).most_of_a_node_on_one_gpu, 2);
}

// A rank that sees no GPU takes none (-1) and shares with nobody; the others are placed as without it.
TEST(AssignGpus, ARankThatSeesNone_TakesNone) {
  const Seen visible = {{"a", "b"}, {}, {"a", "b"}};
  const HostGpus plan = plan_host_gpus(visible, {0, 0, 0});
  EXPECT_EQ(plan.index, (std::vector<int>{0, -1, 1}));
  EXPECT_EQ(plan.ranks_on_gpu, (std::vector<int>{1, 0, 1}));
  EXPECT_EQ(plan.most_of_a_node_on_one_gpu, 1);
  EXPECT_TRUE(assign_gpus({}).empty());
}

// Lists that overlap in part: a rank whose GPUs are both taken moves one of their takers to a GPU of its own (taking
// the first free GPU in rank order left a, c for rank 2 to share while b and d stayed idle).
TEST(AssignGpus, PartlyOverlappingLists_MoveARankAlongSoThatNoneShares) {
  const Seen visible = {{"a", "b"}, {"c", "d"}, {"a", "c"}};
  EXPECT_EQ(taken(visible, assign_gpus(visible)), (std::vector<std::string>{"b", "c", "a"}));
  // A longer path: rank 2's GPUs a and b are taken; a's taker moves to b, b's to c.
  const Seen chain = {{"a", "b"}, {"b", "c"}, {"a", "b"}};
  EXPECT_EQ(taken(chain, assign_gpus(chain)), (std::vector<std::string>{"b", "c", "a"}));
  EXPECT_EQ(plan_host_gpus(chain, std::vector<int>(3, 0)).most_of_a_node_on_one_gpu, 1);
}

// The most ranks on one GPU is the least any placement allows, against every placement of small random hosts (up to
// 6 ranks, 4 GPUs, each rank seeing a random subset in a random order): an independent count by enumeration.
TEST(AssignGpus, TheMostRanksOnOneGpu_IsTheLeastAnyPlacementAllows) {
  const std::vector<std::string> gpus = {"a", "b", "c", "d"};
  std::uint64_t state = 12345;
  const auto next = [&](std::uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  const auto most_on_one = [](const Seen& visible, const std::vector<int>& index) {
    std::map<std::string, int> load;
    int most = 0;
    for (std::size_t i = 0; i < visible.size(); ++i) {
      if (index[i] >= 0) most = std::max(most, ++load[visible[i][static_cast<std::size_t>(index[i])]]);
    }
    return most;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    Seen visible(1 + next(6));
    for (auto& sees : visible) {
      for (const std::string& g : gpus) {
        if (next(2) == 1) sees.insert(sees.begin() + static_cast<std::ptrdiff_t>(next(sees.size() + 1)), g);
      }
    }
    // Every placement (each rank any GPU it sees): the least "most ranks on one GPU".
    int least = static_cast<int>(visible.size()) + 1;
    std::vector<int> choice(visible.size(), 0);
    for (bool more = true; more;) {
      std::vector<int> index(visible.size());
      for (std::size_t i = 0; i < visible.size(); ++i) index[i] = visible[i].empty() ? -1 : choice[i];
      least = std::min(least, most_on_one(visible, index));
      more = false;
      for (std::size_t i = 0; i < visible.size() && !more; ++i) {
        if (++choice[i] < static_cast<int>(std::max<std::size_t>(1, visible[i].size()))) {
          more = true;
        } else {
          choice[i] = 0;
        }
      }
    }
    const std::vector<int> index = assign_gpus(visible);
    for (std::size_t i = 0; i < visible.size(); ++i) {
      ASSERT_EQ(index[i] < 0, visible[i].empty()) << "trial " << trial << " rank " << i;
      if (index[i] >= 0) {
        ASSERT_LT(static_cast<std::size_t>(index[i]), visible[i].size());
      }
    }
    ASSERT_EQ(most_on_one(visible, index), least) << "trial " << trial;
  }
}

}  // namespace
}  // namespace hsdp::device
