#pragma once
// ProcessMesh: the communicators a sharding strategy needs, built from the Topology.
//   world       all ranks
//   node        the ranks of this rank's node
//   cross_node  the ranks with this rank's local rank, one per node
//   shard       the ranks one unit's parameters are split over
//   replicate   the ranks that hold the same shard
//   hpz         hpZ secondary group: k consecutive local ranks of this node (only when hpz k > 0)
// FULL_SHARD/SHARD_GRAD_OP/ZeRO-1: shard = world, replicate = self. HYBRID_SHARD(_ZERO2): shard = node,
// replicate = cross_node (needs nodes of equal size). NO_SHARD: shard = self, replicate = world.
#include <memory>
#include <string>

#include "hsdp/comm/mpi.hpp"
#include "hsdp/comm/topology.hpp"

namespace hsdp::comm {

enum class Sharding { no_shard, zero1, shard_grad_op, full_shard, hybrid_shard, hybrid_shard_zero2 };

Sharding parse_sharding(const std::string& text);  // config Error naming the allowed values
const char* to_string(Sharding s);
const char* kShardingChoices();                    // "no_shard|zero1|shard_grad_op|full_shard|hybrid_shard|hybrid_shard_zero2"
bool is_hybrid(Sharding s);

class ProcessMesh {
 public:
  // Collective over `world`. hpz_size k: 0 = no secondary group; else k must divide the ranks per node (k = 1:
  // each rank is its own group, so the backward gather is a local copy).
  ProcessMesh(MpiCommunicator& world, const Topology& topology, Sharding sharding, int hpz_size = 0);

  MpiCommunicator& world() { return world_; }
  MpiCommunicator& node() { return *node_; }
  MpiCommunicator& cross_node() { return *cross_node_; }
  MpiCommunicator& shard() { return *shard_; }
  MpiCommunicator& replicate() { return *replicate_; }
  const MpiCommunicator& shard() const { return *shard_; }
  const MpiCommunicator& replicate() const { return *replicate_; }
  bool has_hpz() const { return hpz_ != nullptr; }
  MpiCommunicator& hpz() { return *hpz_; }
  const Topology& topology() const { return topology_; }
  Sharding sharding() const { return sharding_; }

  // Sum of the counters of every communicator of the mesh except world (world is the caller's and may carry
  // set-up traffic); each collective is counted once, on the communicator it ran on.
  ByteCounters total_counters() const;
  void reset_counters();

  // A readable description of the whole mesh, assembled on rank 0 (collective; other ranks get "").
  std::string describe();

 private:
  MpiCommunicator& world_;
  Topology topology_;
  Sharding sharding_;
  std::unique_ptr<MpiCommunicator> node_;
  std::unique_ptr<MpiCommunicator> cross_node_;
  // shard and replicate are communicators of their own (splits with the same membership as world, node,
  // cross_node or self) so that counters and watchdog messages name the role they play.
  std::unique_ptr<MpiCommunicator> shard_;
  std::unique_ptr<MpiCommunicator> replicate_;
  std::unique_ptr<MpiCommunicator> hpz_;
};

}  // namespace hsdp::comm
