#include "plan/cost.hpp"

#include <algorithm>
#include <vector>

#include "hsdp/comm/traffic.hpp"
#include "hsdp/shard/flat_param.hpp"
#include "plan/mesh_groups.hpp"

namespace hsdp::plan {

using comm::Collective;
using shard::Sharding;

namespace {

// The bandwidth one inter-node hop of a ring over `group` gets, in GB/s. cluster.inter.gbps is per rank with every
// rank of a node sending across at once (commbench's inter-node groups: ranks-per-node flows share the node's
// network). Every rank runs the same collective on its own instance of the group, so on a node X holding m_X of the
// group's members, of which c_X send across (their next hop is on another node), ranks-per-node / m_X instances
// put c_X flows each through the node's network: per flow inter.gbps x m_X / c_X. A ring of one rank per node
// (m = c = 1) gets inter.gbps; a world ring over nodes of 2 ranks in block placement (m = 2, c = 1) twice that. The
// slowest node sets the pace, and no hop is faster than the intra-node link.
double ring_inter_gbps(const CollectiveCall& call, const Cluster& cluster) {
  const shard::GroupView& group = *call.group;
  std::vector<int> members, crossing;
  for (int r = 0; r < group.size(); ++r) {
    const auto node = static_cast<std::size_t>(group.node_of_rank[static_cast<std::size_t>(r)]);
    if (node >= members.size()) members.resize(node + 1, 0), crossing.resize(node + 1, 0);
    members[node] += 1;
    if (comm::traffic_bytes(call.op, call.count, call.elem_bytes, r, group.node_of_rank).inter > 0) crossing[node] += 1;
  }
  double per_flow = cluster.intra.gbps;
  for (std::size_t x = 0; x < members.size(); ++x) {
    if (crossing[x] > 0) per_flow = std::min(per_flow, cluster.inter.gbps * members[x] / crossing[x]);
  }
  return per_flow;
}

}  // namespace

double collective_seconds(const CollectiveCall& call, const Cluster& cluster) {
  const shard::GroupView& group = *call.group;
  const int n = group.size();
  if (n <= 1) return 0;
  const bool across = spans_nodes(group);
  const LinkClass& link = across ? cluster.inter : cluster.intra;
  const comm::LinkBytes bytes =
      comm::traffic_bytes(call.op, call.count, call.elem_bytes, group.rank, group.node_of_rank);
  const double alpha = link.latency_us * 1e-6;
  const auto per_second = [](const LinkClass& l) { return l.gbps * 1e9; };
  // A ring goes at the pace of its slowest hop: across nodes, the share of the node's network each flow gets.
  const double ring_per_second = across ? ring_inter_gbps(call, cluster) * 1e9 : per_second(link);
  switch (call.op) {
    case Collective::all_reduce:
      return 2.0 * (n - 1) * alpha + static_cast<double>(bytes.total()) / ring_per_second;
    case Collective::all_to_all:
      return (n - 1) * alpha + static_cast<double>(bytes.intra) / per_second(cluster.intra) +
             static_cast<double>(bytes.inter) / per_second(cluster.inter);
    default:
      return (n - 1) * alpha + static_cast<double>(bytes.total()) / ring_per_second;
  }
}

double StepTime::overlapped_s() const {
  return exposed_s + std::max(compute_s, comm_s - exposed_s);
}

double flops_per_token(double params, double n_layer, double n_embd, double seq_len, bool checkpointing) {
  const double attention = n_layer * n_embd * seq_len;
  double per_token = 6.0 * params + 12.0 * attention;
  if (checkpointing) per_token += 2.0 * params + 4.0 * attention;
  return per_token;
}

double step_flops(const PlanModel& model, const Workload& work, bool checkpointing) {
  return flops_per_token(static_cast<double>(model.params()), static_cast<double>(model.activation.n_layer),
                         static_cast<double>(model.activation.n_embd), static_cast<double>(work.seq_len),
                         checkpointing) *
         static_cast<double>(work.tokens_per_rank());
}

StepTime step_time(const PlanModel& model, const Workload& work, const Cluster& cluster,
                   const shard::EngineOptions& options, const shard::MeshGroups& groups, bool checkpointing) {
  StepTime t;
  t.compute_s = step_flops(model, work, checkpointing) / (cluster.compute_tflops * 1e12);
  const UnitSizes units{model.unit_numel, model.tied_head};
  const int k = options.grad_accum;
  for_each_collective(units, options, groups, [&](const CollectiveCall& call) {
    const double one = collective_seconds(call, cluster);
    const double all = one * call.times;
    t.comm_s += all;
    if (spans_nodes(*call.group)) t.comm_inter_s += all;
    if (call.op == Collective::all_to_all || call.phase == Phase::post_step_gather) {
      t.exposed_s += all;
    } else if (call.unit == 0 && call.phase == Phase::forward_gather && call.group == &groups.shard) {
      t.exposed_s += one * std::min(call.times, k);
    } else if (call.unit == 0 && (call.phase == Phase::reduce || call.phase == Phase::cross_node_reduce ||
                                  call.phase == Phase::bucket_reduce || call.phase == Phase::bucket_gather)) {
      t.exposed_s += one;
    }
  });
  return t;
}

// 2-byte parameters (whole unless freed after forward), 2-byte gradients (whole or sharded), 12 bytes of fp32
// master and moments (sharded): DDP 16P, ZeRO-1 4P + 12P/n, ZeRO-2 2P + 14P/n, ZeRO-3 16P/n.
double zero_paper_state_bytes(double p, Sharding strategy, int shard_size) {
  const shard::Strategy& st = shard::strategy(strategy);
  const double n = shard_size;
  return (st.free_after_forward ? 2 * p / n : 2 * p) + (st.grads_whole ? 2 * p : 2 * p / n) + 12 * p / n;
}

}  // namespace hsdp::plan
