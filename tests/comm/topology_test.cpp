// Topology's pure constructors, the placement parser and the Slurm launch check (no MPI needed).
#include "hsdp/comm/topology.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "hsdp/core/error.hpp"

namespace hsdp::comm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(Topology, EmulateBlock_PutsConsecutiveRanksOnANode) {
  const Topology t = Topology::emulate(3, 6, 2, Placement::block);
  EXPECT_THAT(t.node_of_rank, ElementsAre(0, 0, 1, 1, 2, 2));
  EXPECT_EQ(t.num_nodes(), 3);
  EXPECT_EQ(t.node(), 1);
  EXPECT_EQ(t.local_rank(), 1);
  EXPECT_TRUE(t.emulated);
  EXPECT_EQ(t.ranks_per_node, 2);
  EXPECT_TRUE(t.nodes_equal_size());
}

TEST(Topology, EmulateCyclic_DealsRanksRoundRobinOverNodes) {
  const Topology t = Topology::emulate(2, 4, 2, Placement::cyclic);
  EXPECT_THAT(t.node_of_rank, ElementsAre(0, 1, 0, 1));
  EXPECT_THAT(t.ranks_on_node(0), ElementsAre(0, 2));
  EXPECT_THAT(t.ranks_on_node(1), ElementsAre(1, 3));
  EXPECT_EQ(t.local_rank(), 1);
  EXPECT_EQ(t.local_rank_of(3), 1);
  EXPECT_EQ(t.placement, Placement::cyclic);
}

TEST(Topology, EmulateBlock_WithRanksPerNodeNotDividingTheWorld_GivesUnequalNodes) {
  const Topology t = Topology::emulate(0, 4, 3, Placement::block);
  EXPECT_THAT(t.node_of_rank, ElementsAre(0, 0, 0, 1));
  EXPECT_EQ(t.node_size(0), 3);
  EXPECT_EQ(t.node_size(1), 1);
  EXPECT_FALSE(t.nodes_equal_size());
}

TEST(Topology, EmulateCyclic_UsesCeilOfWorldOverRanksPerNodeNodes) {
  // ceil(4 / 3) = 2 nodes: ranks 0 2 and 1 3.
  EXPECT_THAT(Topology::emulate(0, 4, 3, Placement::cyclic).node_of_rank, ElementsAre(0, 1, 0, 1));
  EXPECT_THAT(Topology::emulate(0, 4, 1, Placement::cyclic).node_of_rank, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(Topology::emulate(0, 4, 4, Placement::cyclic).node_of_rank, ElementsAre(0, 0, 0, 0));
}

TEST(Topology, EmulateWithRanksPerNodeBelowOne_IsAConfigError) {
  for (const int rpn : {0, -2}) {
    try {
      Topology::emulate(0, 4, rpn, Placement::block);
      ADD_FAILURE() << "no error for ranks_per_node " << rpn;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::config);
      EXPECT_THAT(e.what(), HasSubstr("topology.ranks_per_node"));
    }
  }
}

TEST(Topology, FromNodeIds_RenumbersNodesByTheirLowestRank) {
  const Topology t = Topology::from_node_ids(1, {7, 3, 7, 3});
  EXPECT_THAT(t.node_of_rank, ElementsAre(0, 1, 0, 1));
  EXPECT_EQ(t.world_size, 4);
  EXPECT_FALSE(t.emulated);
  EXPECT_THAT(Topology::from_node_ids(0, {5, 5, 2, 9, 2}).node_of_rank, ElementsAre(0, 0, 1, 2, 1));
}

TEST(Topology, ParsePlacement_AcceptsBlockAndCyclic_AndNamesTheKeyOtherwise) {
  EXPECT_EQ(parse_placement("block"), Placement::block);
  EXPECT_EQ(parse_placement("cyclic"), Placement::cyclic);
  EXPECT_STREQ(to_string(Placement::cyclic), "cyclic");
  try {
    parse_placement("scatter");
    ADD_FAILURE() << "no error for 'scatter'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_THAT(e.what(), HasSubstr("topology.placement"));
    EXPECT_THAT(e.what(), HasSubstr("block|cyclic"));
  }
}

// Sets (or unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value->c_str(), 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(SlurmCheck, WorldSmallerThanTheAllocatedTasks_IsAConfigErrorThatSaysUseSrunPmix) {
  const ScopedEnv orte("OMPI_MCA_orte_hnp_uri", std::nullopt);
  const ScopedEnv step("SLURM_STEP_NUM_TASKS", std::nullopt);
  const ScopedEnv tasks("SLURM_NTASKS", "8");
  try {
    check_slurm_world_size(1);
    ADD_FAILURE() << "no error for a singleton start";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_THAT(e.what(), HasSubstr("Slurm allocated 8 tasks but MPI sees a world of 1 ranks"));
    EXPECT_THAT(e.what(), HasSubstr("srun --mpi=pmix"));
  }
  EXPECT_NO_THROW(check_slurm_world_size(8));
}

TEST(SlurmCheck, StepTaskCount_TakesPrecedenceOverTheJobTaskCount) {
  const ScopedEnv orte("OMPI_MCA_orte_hnp_uri", std::nullopt);
  const ScopedEnv step("SLURM_STEP_NUM_TASKS", "4");
  const ScopedEnv tasks("SLURM_NTASKS", "8");
  EXPECT_NO_THROW(check_slurm_world_size(4));
  EXPECT_THROW(check_slurm_world_size(8), Error);
}

TEST(SlurmCheck, OutsideSlurmOrUnderMpirun_NothingIsChecked) {
  const ScopedEnv step("SLURM_STEP_NUM_TASKS", std::nullopt);
  {
    const ScopedEnv orte("OMPI_MCA_orte_hnp_uri", std::nullopt);
    const ScopedEnv tasks("SLURM_NTASKS", std::nullopt);
    EXPECT_NO_THROW(check_slurm_world_size(3));
  }
  const ScopedEnv orte("OMPI_MCA_orte_hnp_uri", "1234.0;tcp://127.0.0.1:1");
  const ScopedEnv tasks("SLURM_NTASKS", "2");
  EXPECT_NO_THROW(check_slurm_world_size(6));
}

}  // namespace
}  // namespace hsdp::comm
