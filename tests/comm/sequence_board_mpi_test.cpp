// The watchdog's side channel over MPI: every member reads every member's published sequence number on a group
// (seats on the world's board for the world and for the node), groups that share ranks keep apart (the
// communicators' own seats publish their counters meanwhile), and a seat taken again starts from zero.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "hsdp/comm/sequence_board.hpp"
#include "mpi_test_context.hpp"

namespace hsdp::comm::testing {
namespace {

// The side channel's reading on `seat` agrees with `expected` (sequence of group rank i) and with the members.
void expect_reading(const BoardSeat& seat, const MpiCommunicator& group, const std::vector<std::uint64_t>& expected) {
  const std::vector<MemberSequence> members = seat.read(5.0);
  const std::vector<int> world_ranks = members_of(group);
  ASSERT_EQ(members.size(), expected.size());
  for (std::size_t i = 0; i < members.size(); ++i) {
    EXPECT_EQ(members[i].rank, static_cast<int>(i));
    EXPECT_TRUE(members[i].answered) << "group '" << group.name() << "' rank " << i;
    EXPECT_EQ(members[i].sequence, expected[i]) << "group '" << group.name() << "' rank " << i;
    EXPECT_EQ(members[i].world_rank, world_ranks[i]);
    EXPECT_EQ(members[i].host, host_name());  // one machine here
  }
}

TEST(SideChannel, EveryMemberReadsEveryMembersPublishedSequence_OnEachOfItsGroups) {
  MpiCommunicator& world = context().world;
  MpiCommunicator& node = as_mpi(context().meshes.at(ShardScope::world)->node());
  ASSERT_NE(world.side_channel(), nullptr);
  const std::shared_ptr<BoardSeat> on_world = world.side_channel()->take_seat(world.raw());
  const std::shared_ptr<BoardSeat> on_node = world.side_channel()->take_seat(node.raw());
  ASSERT_NE(on_world, nullptr);
  ASSERT_NE(on_node, nullptr);
  on_world->publish(100 + static_cast<std::uint64_t>(world.rank()));
  on_node->publish(200 + static_cast<std::uint64_t>(node.rank()));
  world.barrier();  // counted on world's own seat, which must not disturb ours
  std::vector<std::uint64_t> world_expected;
  std::vector<std::uint64_t> node_expected;
  for (int r = 0; r < world.size(); ++r) world_expected.push_back(100 + static_cast<std::uint64_t>(r));
  for (int r = 0; r < node.size(); ++r) node_expected.push_back(200 + static_cast<std::uint64_t>(r));
  expect_reading(*on_world, world, world_expected);
  expect_reading(*on_node, node, node_expected);
  MPI_Barrier(world.raw());  // nobody gives a seat back while another still reads it
}

TEST(SideChannel, ASeatTakenAgain_StartsFromZero) {
  MpiCommunicator& world = context().world;
  std::shared_ptr<BoardSeat> seat = world.side_channel()->take_seat(world.raw());
  ASSERT_NE(seat, nullptr);
  seat->publish(7);
  MPI_Barrier(world.raw());
  seat.reset();
  seat = world.side_channel()->take_seat(world.raw());  // the same slot, the lowest free on every rank
  ASSERT_NE(seat, nullptr);
  MPI_Barrier(world.raw());
  expect_reading(*seat, world, std::vector<std::uint64_t>(static_cast<std::size_t>(world.size()), 0));
  MPI_Barrier(world.raw());
}

}  // namespace
}  // namespace hsdp::comm::testing
