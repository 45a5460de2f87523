// The watchdog's account of who is behind a stuck collective, from a reading of the side channel (no MPI).
#include <gtest/gtest.h>

#include <vector>

#include "hsdp/comm/watchdog.hpp"

namespace hsdp::comm {
namespace {

// Two ranks a host: n0, n1, ... A silent member keeps the host the board learnt when it was made.
MemberSequence member(int rank, std::uint64_t sequence, bool answered = true) {
  return MemberSequence{rank, 10 + rank, "n" + std::to_string(rank / 2), answered ? sequence : 0, answered};
}

TEST(Laggards, NamesExactlyTheRanksBehindTheSequence_WithWhereTheyAre) {
  const std::vector<MemberSequence> members{member(0, 17), member(1, 18), member(2, 16), member(3, 3)};
  EXPECT_EQ(laggards_text(members, 17, "shard", 5.0),
            "ranks 2, 3 of group 'shard' have not reached it (rank 2: world rank 12 on host n1, last issued #16; "
            "rank 3: world rank 13 on host n1, last issued #3)");
}

TEST(Laggards, OneRankBehind_IsSingular) {
  const std::vector<MemberSequence> members{member(0, 1), member(1, 2)};
  EXPECT_EQ(laggards_text(members, 2, "world", 5.0),
            "rank 0 of group 'world' has not reached it (world rank 10 on host n0, last issued #1)");
}

TEST(Laggards, SilentRanks_AreNamedApartFromTheOnesBehind) {
  const std::vector<MemberSequence> members{member(0, 4), member(1, 3), member(2, 0, false), member(3, 0, false)};
  EXPECT_EQ(laggards_text(members, 4, "node", 5.0),
            "rank 1 of group 'node' has not reached it (world rank 11 on host n0, last issued #3); "
            "ranks 2, 3 of group 'node' did not answer on the side channel within 5 s (host n1: stopped or "
            "unreachable)");
}

TEST(Laggards, SilentRanksOnSeveralHosts_NameEachHostOnce) {
  const std::vector<MemberSequence> members{member(0, 4), member(1, 0, false), member(2, 0, false),
                                            member(3, 0, false)};
  EXPECT_EQ(laggards_text(members, 4, "world", 5.0),
            "ranks 1, 2, 3 of group 'world' did not answer on the side channel within 5 s (hosts n0, n1: stopped "
            "or unreachable)");
}

TEST(Laggards, NoneBehind_SaysTheCollectiveItselfIsStuck) {
  const std::vector<MemberSequence> members{member(0, 5), member(1, 6)};
  const std::string text = laggards_text(members, 5, "replicate", 5.0);
  EXPECT_EQ(text.rfind("every rank of group 'replicate' has reached it (", 0), 0u) << text;
}

TEST(Laggards, ManyBehind_AreAllListedButOnlyTheFirstEightDescribed) {
  std::vector<MemberSequence> members;
  for (int r = 0; r < 12; ++r) members.push_back(member(r, r == 0 ? 9 : 8));
  const std::string text = laggards_text(members, 9, "world", 5.0);
  EXPECT_EQ(text.rfind("ranks 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 of group 'world' have not reached it (", 0), 0u)
      << text;
  EXPECT_NE(text.find("rank 8: world rank 18"), std::string::npos) << text;
  EXPECT_EQ(text.find("rank 9: "), std::string::npos) << text;
  EXPECT_NE(text.find("; and 3 more)"), std::string::npos) << text;
}

}  // namespace
}  // namespace hsdp::comm
