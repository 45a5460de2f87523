#pragma once
// The replica check (check.replicas_every): ranks that hold the same state must hold the same bits.
//
// Every rank holds ranges of the model's units (the engine's shard views: unit, first element, count, with the
// master weights and AdamW's m and v). Ranks whose ranges are the same range of the same unit in the same island are
// replicas of it: no_shard's whole world, hybrid_shard's ranks at the same place of every node, hybrid_shard_zero2's
// likewise; zero1's gathered full parameters (and no_shard's rounded copies below fp32) on every rank of the
// island. Across islands the outer state (shard/outer.hpp: outer parameters and momentum; the error feedback is
// each island's own) is the same on every island's rank at the same place. A check is one all_gather over the world
// of one record per range held: its key and the hsdp-sum64 checksums (ckpt/checksum.hpp) of its tensors, a function
// of every bit, position by position: a single flipped bit always changes it. Every rank then compares the records
// of each replica group the same way and reaches the same verdict: the members outside the group's majority differ
// (with no majority, two replicas say, every member is named).
//
// What it does not see: state no two ranks hold (full_shard's and shard_grad_op's shards, zero1's optimizer shards,
// an island's own masters against another island's), and what lives only inside a step (the gathered parameters of
// the sharded strategies, hpZ's secondary partition, the gradients): between steps there is nothing of it to
// compare, and a fault there reaches the checked state through the update, or no replica at all.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hsdp/comm/communicator.hpp"
#include "hsdp/model/layout.hpp"
#include "hsdp/shard/engine.hpp"
#include "hsdp/shard/flat_param.hpp"

namespace hsdp::train {

// One range a rank holds, with its checksums (tensors it lacks: 0).
struct ReplicaRecord {
  // 0: the island's model state (masters, m, v); 1: the outer state (parameters, momentum); 2: the persistent full
  // parameters (their bytes: begin 0, count = bytes).
  std::uint64_t kind = 0;
  std::uint64_t island = 0;  // kinds 0 and 2: the rank's island; kind 1: 0 (the outer state is every island's)
  std::uint64_t unit = 0, begin = 0, count = 0;
  std::uint64_t sums[3] = {0, 0, 0};
};

// Records of this rank's ranges: the island's state of `inner` (params, exp_avg, exp_avg_sq), of `outer`
// (params, exp_avg = momentum; its third buffer, the error feedback, is each island's own), and `full`.
std::vector<ReplicaRecord> replica_records(int island, std::span<const shard::UnitShard> inner,
                                           std::span<const shard::UnitShard> outer,
                                           std::span<const shard::Engine::ReplicatedParams> full = {});

// The verdict on every rank's records (records[r]: world rank r's; hosts[r]: its host name): `text` is "" when
// every replica group agrees, else one line naming the first group that does not (the unit, the tensor, the ranks
// and hosts outside its majority, or every member where there is none) and how many more do not; `groups` counts
// the groups of more than one member.
struct ReplicaVerdict {
  std::string text;
  std::size_t groups = 0;
};
ReplicaVerdict replica_verdict(const std::vector<std::vector<ReplicaRecord>>& records,
                               const std::vector<std::string>& hosts, const model::ModelLayout& layout);

// Every rank's host name (host_name()), indexed by rank in `world`. Collective.
std::vector<std::string> rank_host_names(comm::Communicator& world);

class ReplicaChecker {
 public:
  // hosts: every rank's host name (rank_host_names), to name the ranks that differ.
  ReplicaChecker(comm::Communicator& world, const model::ModelLayout& layout, std::vector<std::string> hosts);
  // Collective over `world`: this rank's records against every other rank's. Returns the verdict (the same on
  // every rank) and counts the groups it compared.
  std::string check(int island, std::span<const shard::UnitShard> inner, std::span<const shard::UnitShard> outer,
                    std::span<const shard::Engine::ReplicatedParams> full = {});
  // Replica groups of more than one member in the last check (0: nothing this job holds twice).
  std::size_t groups() const { return groups_; }

 private:
  comm::Communicator& world_;
  const model::ModelLayout& layout_;
  std::vector<std::string> hosts_;
  std::size_t groups_ = 0;
};

}  // namespace hsdp::train
