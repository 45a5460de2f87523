#include "plan/cost.hpp"

#include <algorithm>
#include <cmath>
#include <map>
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
  double per_flow = cluster.intra.gbps;
  if (call.count == 0) return per_flow;
  std::map<int, int> members;  // node -> the group's members on it
  for (const int node : call.group->node_of_rank) members[node] += 1;
  if (members.size() < 2) return per_flow;
  // In the node-major ring, the last member of each node sends to the next node; in an all_to_all every member
  // sends across (comm/traffic.hpp).
  for (const auto& [node, m] : members) {
    const int crossing = call.op == Collective::all_to_all ? m : 1;
    per_flow = std::min(per_flow, cluster.inter.gbps * m / crossing);
  }
  return per_flow;
}

// Whether `group` spans nodes with node_ring_members of its members on every node (a calibrated node ring).
bool shaped_like_node_ring(const shard::GroupView& group, const Cluster& cluster) {
  if (cluster.node_ring.gbps <= 0 || cluster.node_ring_members < 2) return false;
  std::map<int, int> members;
  for (const int node : group.node_of_rank) members[node] += 1;
  for (const auto& [node, m] : members) {
    if (m != cluster.node_ring_members) return false;
  }
  return members.size() > 1;
}

}  // namespace

double LinkClass::gbps_at(double bytes) const {
  if (by_size.empty()) return gbps;
  if (bytes <= by_size.front().bytes) return by_size.front().gbps;
  if (bytes >= by_size.back().bytes) return by_size.back().gbps;
  std::size_t i = 1;
  while (by_size[i].bytes < bytes) ++i;
  const SizedBandwidth& lo = by_size[i - 1];
  const SizedBandwidth& hi = by_size[i];
  const double t = std::log(bytes / lo.bytes) / std::log(hi.bytes / lo.bytes);
  return lo.gbps + t * (hi.gbps - lo.gbps);
}

double collective_seconds(const CollectiveCall& call, const Cluster& cluster) {
  const shard::GroupView& group = *call.group;
  const int n = group.size();
  if (n <= 1) return 0;
  const bool across = spans_nodes(group);
  const bool node_ring = across && call.op != Collective::all_to_all && shaped_like_node_ring(group, cluster);
  const LinkClass& link = node_ring ? cluster.node_ring : across ? cluster.inter : cluster.intra;
  const comm::LinkBytes bytes =
      comm::traffic_bytes(call.op, call.count, call.elem_bytes, group.rank, group.node_of_rank);
  const double alpha = link.latency_us * 1e-6;
  // The collective's size as commbench measures it (nccl-tests' convention): the buffer for all_reduce and
  // broadcast, the gathered or scattered whole for all_gather and reduce_scatter, the send buffer for all_to_all.
  const double size = static_cast<double>(call.count * call.elem_bytes) *
                      (call.op == Collective::all_reduce || call.op == Collective::broadcast ? 1 : n);
  const auto per_second = [size](const LinkClass& l) { return l.gbps_at(size) * 1e9; };
  // A ring goes at the pace of its slowest hop: across nodes, the share of the node's network each flow gets.
  const double ring_per_second =
      across && !node_ring ? ring_inter_gbps(call, cluster) * cluster.inter.gbps_at(size) / cluster.inter.gbps * 1e9
                           : per_second(link);
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

double collective_steps(const CollectiveCall& call) {
  const auto n = static_cast<double>(call.group->size());
  switch (call.op) {
    case Collective::all_reduce:
      return 2 * (n - 1);
    case Collective::all_to_all:
      return 1;
    default:
      return n - 1;
  }
}

double StepTime::overlapped_s() const {
  return compute_s + exposed_s;
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

namespace {

// One link class (inside a node, across nodes): it carries one collective at a time. A collective takes the first
// gap of the link at or after the time it is ready (issued and its inputs there), so a collective issued later
// may still run before one waiting for its inputs.
class Link {
 public:
  double run(double ready, double seconds) {
    double start = ready;
    auto it = busy_.begin();
    for (; it != busy_.end(); ++it) {
      if (it->second <= start) continue;
      if (it->first >= start + seconds) break;
      start = it->second;
    }
    busy_.insert(it, {start, start + seconds});
    return start + seconds;
  }

 private:
  std::vector<std::pair<double, double>> busy_;  // [start, end), by start, disjoint
};

// The engine's schedule of one step (docs/architecture.md, "The engine's schedule") replayed on a clock: the host
// computes unit by unit and waits where the engine waits (a gather before the unit that needs it, every reduction
// before the next micro-batch and the optimizer step); collectives run on their link when issued and when the one
// they follow has completed (qgZ's second hop, hybrid's cross-node all-reduce after the unit's reduce-scatter,
// hierarchical no_shard's three hops).
class Schedule {
 public:
  // step_poll_s: what each step of a collective waits for its ranks to poll (Cluster::host_polls).
  Schedule(const Cluster& cluster, const UnitSizes& units, const shard::EngineOptions& options,
           const shard::MeshGroups& groups, double step_poll_s)
      : cluster_(cluster),
        k_(options.grad_accum),
        n_units_(static_cast<int>(units.numel.size())),
        step_poll_s_(step_poll_s) {
    calls_.resize(static_cast<std::size_t>(n_units_));
    for_each_collective(units, options, groups, [&](const CollectiveCall& call) {
      calls_[static_cast<std::size_t>(call.unit)].push_back(call);
    });
  }

  // forward[u], backward[u]: the host's compute per micro-batch (unit 0's is the tied head's where tied).
  double step(const std::vector<double>& forward, const std::vector<double>& backward, bool tied_head) {
    const int final_unit = n_units_ - 1;
    const auto at = [](const std::vector<double>& v, int u) { return v[static_cast<std::size_t>(u)]; };
    for (int j = 0; j < k_; ++j) {
      const bool last = j == k_ - 1;
      // forward: ensure(emb) prefetch(1) embedding; per block ensure(i) prefetch(i+1 / emb for the head) block i
      const double embedding = gather(0, Phase::forward_gather, 0, host_);
      double next = final_unit > 1 ? gather(1, Phase::forward_gather, 0, host_) : host_;
      wait(embedding);
      if (!tied_head) host_ += at(forward, 0);
      for (int u = 1; u < final_unit; ++u) {
        wait(next);
        // the next block's gather, or after the last block the embedding's again for the head
        next = gather(u + 1 < final_unit ? u + 1 : 0, Phase::forward_gather, u + 1 < final_unit ? 0 : 1, host_);
        host_ += at(forward, u);
      }
      const double emb_head = final_unit > 1 ? next : gather(0, Phase::forward_gather, 1, host_);
      wait(gather(final_unit, Phase::forward_gather, 0, host_));
      wait(emb_head);
      double backward_next = gather(final_unit - 1, Phase::backward_gather, 0, host_);
      host_ += at(forward, final_unit) + (tied_head ? at(forward, 0) : 0.0);
      // backward: head, final unit's reduction; blocks last to first; the embedding's reduction last
      host_ += at(backward, final_unit) + (tied_head ? at(backward, 0) : 0.0);
      reduce(final_unit, last);
      for (int u = final_unit - 1; u >= 1; --u) {
        wait(backward_next);
        if (u > 1) backward_next = gather(u - 1, Phase::backward_gather, 0, host_);
        host_ += at(backward, u);
        reduce(u, last);
      }
      if (!tied_head) host_ += at(backward, 0);
      reduce(0, last);
      wait(pending_);
    }
    for (int u = 0; u < n_units_; ++u) {
      for (const CollectiveCall& c : of(u, Phase::post_step_gather)) host_ = run(c, host_);
    }
    return host_;
  }

 private:
  std::vector<CollectiveCall> of(int u, Phase phase) const {
    std::vector<CollectiveCall> out;
    for (const CollectiveCall& c : calls_[static_cast<std::size_t>(u)])
      if (c.phase == phase) out.push_back(c);
    return out;
  }
  double run(const CollectiveCall& c, double ready) {
    const double polls = c.group->size() > 1 ? collective_steps(c) * step_poll_s_ : 0.0;
    return (spans_nodes(*c.group) ? inter_ : intra_).run(ready, collective_seconds(c, cluster_) + polls);
  }
  void wait(double t) { host_ = std::max(host_, t); }
  // The i-th gather of unit u in this phase and micro-batch (the embedding's second: the tied head's), issued at
  // `issued`; its completion (`issued` when there is none).
  double gather(int u, Phase phase, int i, double issued) {
    if (u < 0 || u >= n_units_) return issued;
    const std::vector<CollectiveCall> calls = of(u, phase);
    const std::size_t per_micro_batch =
        calls.size() == 1 ? static_cast<std::size_t>(calls[0].times / k_) : calls.size();
    if (static_cast<std::size_t>(i) >= per_micro_batch) return issued;
    return run(calls[calls.size() == 1 ? 0 : static_cast<std::size_t>(i)], issued);
  }
  // Unit u's gradient reduction, issued now: its hops one after the other (qgZ's two all-to-alls included: queue
  // steps, like the reduce-scatter they replace), then the cross-node all-reduce and the node's all-gather, on the
  // micro-batches they run on.
  void reduce(int u, bool last) {
    double ready = host_;
    for (const Phase phase : {Phase::bucket_reduce, Phase::reduce, Phase::cross_node_reduce, Phase::bucket_gather}) {
      for (const CollectiveCall& c : of(u, phase)) {
        if (c.times < k_ && !last) continue;  // once per step: on the last micro-batch
        ready = run(c, ready);
      }
    }
    pending_ = std::max(pending_, ready);
  }

  const Cluster& cluster_;
  int k_, n_units_;
  std::vector<std::vector<CollectiveCall>> calls_;
  Link intra_, inter_;
  double step_poll_s_;
  double host_ = 0, pending_ = 0;
};

}  // namespace

StepTime step_time(const PlanModel& model, const Workload& work, const Cluster& cluster,
                   const shard::EngineOptions& options, const shard::MeshGroups& groups, bool checkpointing) {
  StepTime t;
  t.compute_s = step_flops(model, work, checkpointing) / (cluster.compute_tflops * 1e12);
  const UnitSizes units{model.unit_numel, model.tied_head};
  for_each_collective(units, options, groups, [&](const CollectiveCall& call) {
    const double all = collective_seconds(call, cluster) * call.times;
    t.comm_s += all;
    if (spans_nodes(*call.group)) t.comm_inter_s += all;
  });
  // Each unit's share of the step's FLOPs (6 N + 12 C T per token for a block of N elements, + 2 N + 4 C T
  // recomputed with checkpointing: the sum is step_flops), a third in forward (2 N + 4 C T), the rest in backward.
  const double c = checkpointing ? 1 : 0;
  const double ct = static_cast<double>(model.activation.n_embd) * static_cast<double>(work.seq_len);
  const int n_units = static_cast<int>(units.numel.size());
  std::vector<double> forward(units.numel.size()), backward(units.numel.size());
  double total = 0;
  for (int u = 0; u < n_units; ++u) {
    const double n = static_cast<double>(units.numel[static_cast<std::size_t>(u)]);
    const double block = (u >= 1 && u < n_units - 1) ? 1 : 0;
    forward[static_cast<std::size_t>(u)] = 2 * n + block * 4 * ct;
    backward[static_cast<std::size_t>(u)] = (4 + 2 * c) * n + block * (8 + 4 * c) * ct;
    total += forward[static_cast<std::size_t>(u)] + backward[static_cast<std::size_t>(u)];
  }
  const double per_micro_batch = t.compute_s / options.grad_accum;
  for (int u = 0; u < n_units; ++u) {
    forward[static_cast<std::size_t>(u)] *= per_micro_batch / total;
    backward[static_cast<std::size_t>(u)] *= per_micro_batch / total;
  }
  const double segments = 12.0 * static_cast<double>(model.activation.n_layer) + 6.0;  // Cluster::host_polls
  const double step_poll_s = cluster.host_polls ? per_micro_batch / segments / 2 : 0.0;
  Schedule schedule(cluster, units, options, groups, step_poll_s);
  t.exposed_s = std::max(0.0, schedule.step(forward, backward, model.tied_head) - t.compute_s);
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
