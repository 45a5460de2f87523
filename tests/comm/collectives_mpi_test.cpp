// Every collective x every element type it supports, blocking and async, on odd sizes, on every communicator of
// every strategy's mesh, against a serial reference computed locally from every rank's deterministic inputs
// (typed_values.hpp says why the comparisons are exact). After each collective the byte counters must equal
// traffic_bytes() exactly, and on world also an independent closed form of the emulated mesh.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "hsdp/core/error.hpp"
#include "link_bytes_print.hpp"
#include "mpi_test_context.hpp"
#include "typed_values.hpp"

namespace hsdp::comm::testing {
namespace {

constexpr std::array<std::size_t, 4> kCounts = {1, 7, 13, 1001};

enum class Role { world, node, cross_node, shard, replicate };

const char* to_string(Role r) {
  switch (r) {
    case Role::world: return "world";
    case Role::node: return "node";
    case Role::cross_node: return "cross_node";
    case Role::shard: return "shard";
    case Role::replicate: return "replicate";
  }
  return "?";
}

struct GroupCase {
  ShardScope scope;
  Role role;
};

std::vector<GroupCase> all_group_cases() {
  std::vector<GroupCase> cases;
  for (const ShardScope s : kScopes) {
    for (const Role r : {Role::world, Role::node, Role::cross_node, Role::shard, Role::replicate}) {
      cases.push_back({s, r});
    }
  }
  return cases;
}

// Bytes this world rank sends in one collective, from the mesh spec alone (nodes of equal size, as every mesh in
// HSDP_MESHES has): the node-major ring crosses nodes only from the last local rank of each node.
LinkBytes world_closed_form(Collective c, std::size_t count, std::size_t elem_bytes, int root) {
  const MeshSpec& m = context().spec;
  const int me = context().topology.world_rank;
  const std::uint64_t n = static_cast<std::uint64_t>(m.world_size);
  const std::uint64_t per_node = static_cast<std::uint64_t>(m.ranks_per_node);
  const std::uint64_t b = elem_bytes;
  const bool successor_off_node = m.nodes() > 1 && m.local_of(me) == m.ranks_per_node - 1;
  const auto to_successor = [&](std::uint64_t bytes) {
    return successor_off_node ? LinkBytes{0, bytes} : LinkBytes{bytes, 0};
  };
  switch (c) {
    case Collective::all_reduce: return to_successor(2 * (n - 1) * ((count + n - 1) / n) * b);
    case Collective::reduce_scatter:
    case Collective::all_gather: return to_successor((n - 1) * count * b);
    case Collective::all_to_all: return {(per_node - 1) * count * b, (n - per_node) * count * b};
    case Collective::broadcast: {
      const int root_node = m.node_of(root);
      const int root_local = m.local_of(root);
      // The root's ring predecessor: the previous local rank, or the last rank of the previous node.
      const int previous_node = (root_node + m.nodes() - 1) % m.nodes();
      const int last_in_chain = root_local > 0 ? m.rank_at(root_node, root_local - 1)
                                               : m.rank_at(previous_node, m.ranks_per_node - 1);
      return me == last_in_chain ? LinkBytes{} : to_successor(count * b);
    }
    case Collective::barrier: return {};
  }
  return {};
}

// Snapshot of one collective's counters; expect() checks that exactly one call of it was counted since.
class CountsOneCall {
 public:
  CountsOneCall(const Communicator& comm, Collective c)
      : comm_(comm), collective_(c), before_(comm.counters().of(c)), sequence_(comm.sequence()) {}

  void expect(std::size_t count, std::size_t elem_bytes, int root = 0) const {
    const CollectiveStats& after = comm_.counters().of(collective_);
    const LinkBytes sent{after.bytes.intra - before_.bytes.intra, after.bytes.inter - before_.bytes.inter};
    const std::string what = std::string(comm::to_string(collective_)) + " of " + std::to_string(count) + " x " +
                             std::to_string(elem_bytes) + " bytes on '" + comm_.name() + "'";
    EXPECT_EQ(after.calls, before_.calls + 1) << what;
    EXPECT_EQ(comm_.sequence(), sequence_ + 1) << what;
    EXPECT_EQ(sent, traffic_bytes(collective_, count, elem_bytes, comm_.rank(), comm_.node_of_rank(), root)) << what;
    const MeshSpec& m = context().spec;
    const bool equal_nodes = m.world_size % m.ranks_per_node == 0;
    if (&comm_ == &context().world && equal_nodes) {
      EXPECT_EQ(sent, world_closed_form(collective_, count, elem_bytes, root)) << what;
    }
  }

 private:
  const Communicator& comm_;
  Collective collective_;
  CollectiveStats before_;
  std::uint64_t sequence_;
};

// Compares `got` with `want(i)` exactly and reports the number of mismatches and the first one.
template <typename T, typename Want>
void expect_elements(const std::vector<T>& got, std::size_t count, Want want, const std::string& what) {
  std::size_t mismatches = 0;
  std::string first;
  for (std::size_t i = 0; i < count; ++i) {
    const T expected = want(i);
    if (to_double(got[i]) != to_double(expected)) {
      if (mismatches++ == 0) {
        first = "element " + std::to_string(i) + ": got " + std::to_string(to_double(got[i])) + ", want " +
                std::to_string(to_double(expected));
      }
    }
  }
  EXPECT_EQ(mismatches, 0u) << what << ": " << first;
}

// The reference reduction: exact sum over ranks (see typed_values.hpp), divided by n for avg.
template <typename T, typename Input>
T reduced(int n, ReduceOp op, Input input) {
  double sum = 0.0;
  for (int r = 0; r < n; ++r) sum += to_double(input(r));
  return from_double<T>(op == ReduceOp::avg ? sum / n : sum);
}

template <typename T>
std::string label(const char* collective, std::size_t count, bool in_place, ReduceOp op = ReduceOp::sum) {
  return std::string(collective) + " " + std::string(comm::to_string(op)) + " " +
         std::string(hsdp::to_string(dtype_of<T>())) + " count " + std::to_string(count) +
         (in_place ? " in place" : "");
}

class Collectives : public ::testing::TestWithParam<GroupCase> {
 protected:
  void SetUp() override {
    if (!context().meshes.contains(GetParam().scope)) {
      GTEST_SKIP() << "shard scope " << comm::to_string(GetParam().scope) << " needs nodes of equal size";
    }
  }
  Communicator& group() const {
    ProcessMesh& mesh = *context().meshes.at(GetParam().scope);
    switch (GetParam().role) {
      case Role::world: return mesh.world();
      case Role::node: return mesh.node();
      case Role::cross_node: return mesh.cross_node();
      case Role::shard: return mesh.shard();
      case Role::replicate: return mesh.replicate();
    }
    return mesh.world();
  }
};

TEST_P(Collectives, AllReduce_SumAndAvg_MatchTheSerialReference_InEveryReducibleDtype) {
  Communicator& comm = group();
  const int n = comm.size();
  for_each_dtype([&]<typename T>(std::type_identity<T>) {
    if constexpr (kReducible<T>) {
      for (const ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        if (op == ReduceOp::avg && !kAveragable<T>) continue;
        for (std::size_t k = 0; k < kCounts.size(); ++k) {
          const std::size_t count = kCounts[k];
          const bool in_place = k % 2 == 1;
          const int salt = static_cast<int>(k);
          std::vector<T> send(count), recv(count);
          for (std::size_t i = 0; i < count; ++i) send[i] = input_value<T>(comm.rank(), i, salt);
          if (in_place) recv = send;
          const CountsOneCall counted(comm, Collective::all_reduce);
          comm.all_reduce(in_place ? recv.data() : send.data(), recv.data(), count, dtype_of<T>(), op);
          counted.expect(count, sizeof(T));
          expect_elements(recv, count, [&](std::size_t i) {
            return reduced<T>(n, op, [&](int r) { return input_value<T>(r, i, salt); });
          }, label<T>("all_reduce", count, in_place, op));
        }
      }
    }
  });
}

TEST_P(Collectives, ReduceScatter_SumAndAvg_MatchTheSerialReference_InEveryReducibleDtype) {
  Communicator& comm = group();
  const int n = comm.size();
  const auto base = static_cast<std::size_t>(comm.rank());
  for_each_dtype([&]<typename T>(std::type_identity<T>) {
    if constexpr (kReducible<T>) {
      for (const ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        if (op == ReduceOp::avg && !kAveragable<T>) continue;
        for (std::size_t k = 0; k < kCounts.size(); ++k) {
          const std::size_t count = kCounts[k];
          const bool in_place = k % 2 == 1;
          const int salt = 10 + static_cast<int>(k);
          std::vector<T> send(count * static_cast<std::size_t>(n));
          for (std::size_t i = 0; i < send.size(); ++i) send[i] = input_value<T>(comm.rank(), i, salt);
          std::vector<T> recv = in_place ? send : std::vector<T>(count);
          const CountsOneCall counted(comm, Collective::reduce_scatter);
          comm.reduce_scatter(in_place ? recv.data() : send.data(), recv.data(), count, dtype_of<T>(), op);
          counted.expect(count, sizeof(T));
          expect_elements(recv, count, [&](std::size_t i) {
            return reduced<T>(n, op, [&](int r) { return input_value<T>(r, base * count + i, salt); });
          }, label<T>("reduce_scatter", count, in_place, op));
        }
      }
    }
  });
}

TEST_P(Collectives, AllGather_PutsBlockIFromRankI_InEveryDtype_InPlaceOrNot) {
  Communicator& comm = group();
  const auto n = static_cast<std::size_t>(comm.size());
  const auto me = static_cast<std::size_t>(comm.rank());
  for_each_dtype([&]<typename T>(std::type_identity<T>) {
    for (std::size_t k = 0; k < kCounts.size(); ++k) {
      const std::size_t count = kCounts[k];
      const bool in_place = k % 2 == 1;
      const int salt = 20 + static_cast<int>(k);
      std::vector<T> send(count), recv(count * n);
      for (std::size_t i = 0; i < count; ++i) send[i] = input_value<T>(comm.rank(), i, salt);
      if (in_place) std::copy(send.begin(), send.end(), recv.begin() + static_cast<std::ptrdiff_t>(me * count));
      const CountsOneCall counted(comm, Collective::all_gather);
      comm.all_gather(in_place ? recv.data() + me * count : send.data(), recv.data(), count, dtype_of<T>());
      counted.expect(count, sizeof(T));
      expect_elements(recv, count * n, [&](std::size_t i) {
        return input_value<T>(static_cast<int>(i / count), i % count, salt);
      }, label<T>("all_gather", count, in_place));
    }
  });
}

TEST_P(Collectives, AllToAll_DeliversBlockIOfRankJToBlockJOfRankI_InEveryDtype) {
  Communicator& comm = group();
  const auto n = static_cast<std::size_t>(comm.size());
  const auto me = static_cast<std::size_t>(comm.rank());
  for_each_dtype([&]<typename T>(std::type_identity<T>) {
    for (std::size_t k = 0; k < kCounts.size(); ++k) {
      const std::size_t count = kCounts[k];
      const int salt = 30 + static_cast<int>(k);
      std::vector<T> send(count * n), recv(count * n);
      for (std::size_t i = 0; i < send.size(); ++i) send[i] = input_value<T>(comm.rank(), i, salt);
      const CountsOneCall counted(comm, Collective::all_to_all);
      comm.all_to_all(send.data(), recv.data(), count, dtype_of<T>());
      counted.expect(count, sizeof(T));
      // Block j of recv is block `me` of rank j's send.
      expect_elements(recv, count * n, [&](std::size_t i) {
        return input_value<T>(static_cast<int>(i / count), me * count + i % count, salt);
      }, label<T>("all_to_all", count, false));
    }
  });
}

TEST_P(Collectives, Broadcast_FromTheLastRank_ReachesEveryRank_InEveryDtype) {
  Communicator& comm = group();
  const int root = comm.size() - 1;
  for_each_dtype([&]<typename T>(std::type_identity<T>) {
    for (std::size_t k = 0; k < kCounts.size(); ++k) {
      const std::size_t count = kCounts[k];
      const int salt = 40 + static_cast<int>(k);
      std::vector<T> data(count);
      // Non-roots start with their own values, which must be overwritten.
      for (std::size_t i = 0; i < count; ++i) data[i] = input_value<T>(comm.rank(), i, salt);
      const CountsOneCall counted(comm, Collective::broadcast);
      comm.broadcast(data.data(), count, dtype_of<T>(), root);
      counted.expect(count, sizeof(T), root);
      expect_elements(data, count, [&](std::size_t i) { return input_value<T>(root, i, salt); },
                      label<T>("broadcast", count, false));
    }
  });
}

TEST_P(Collectives, Barrier_IsCountedAsACallWithoutBytes) {
  Communicator& comm = group();
  const CountsOneCall counted(comm, Collective::barrier);
  comm.barrier();
  counted.expect(0, 1);
}

TEST_P(Collectives, AsyncOpsOfEveryKind_WaitedInReverseOrder_AllComplete) {
  Communicator& comm = group();
  const int n = comm.size();
  const auto un = static_cast<std::size_t>(n);
  const auto me = static_cast<std::size_t>(comm.rank());
  const int root = n - 1;
  const ByteCounters before = comm.counters();
  const std::uint64_t sequence = comm.sequence();

  std::vector<float> summed(13);
  for (std::size_t i = 0; i < summed.size(); ++i) summed[i] = input_value<float>(comm.rank(), i, 50);
  std::vector<bf16_t> scatter_in(7 * un), scatter_out(7);
  for (std::size_t i = 0; i < scatter_in.size(); ++i) scatter_in[i] = input_value<bf16_t>(comm.rank(), i, 51);
  std::vector<f16_t> gathered(13 * un);
  for (std::size_t i = 0; i < 13; ++i) gathered[me * 13 + i] = input_value<f16_t>(comm.rank(), i, 52);
  std::vector<std::uint8_t> exchange_in(7 * un), exchange_out(7 * un);
  for (std::size_t i = 0; i < exchange_in.size(); ++i) exchange_in[i] = input_value<std::uint8_t>(comm.rank(), i, 53);
  std::vector<double> broadcast(1001);
  for (std::size_t i = 0; i < broadcast.size(); ++i) broadcast[i] = input_value<double>(comm.rank(), i, 54);

  std::vector<CommHandle> handles;
  handles.push_back(comm.all_reduce_async(summed.data(), summed.data(), 13, DType::f32, ReduceOp::avg));
  handles.push_back(comm.reduce_scatter_async(scatter_in.data(), scatter_out.data(), 7, DType::bf16, ReduceOp::sum));
  handles.push_back(comm.all_gather_async(gathered.data() + me * 13, gathered.data(), 13, DType::f16));
  handles.push_back(comm.all_to_all_async(exchange_in.data(), exchange_out.data(), 7, DType::u8));
  handles.push_back(comm.broadcast_async(broadcast.data(), 1001, DType::f64, root));
  handles.push_back(comm.barrier_async());
  EXPECT_EQ(comm.sequence(), sequence + 6);
  for (auto it = handles.rbegin(); it != handles.rend(); ++it) {
    it->wait();
    EXPECT_FALSE(it->pending());
  }

  expect_elements(summed, 13, [&](std::size_t i) {
    return reduced<float>(n, ReduceOp::avg, [&](int r) { return input_value<float>(r, i, 50); });
  }, "async all_reduce avg f32");
  expect_elements(scatter_out, 7, [&](std::size_t i) {
    return reduced<bf16_t>(n, ReduceOp::sum, [&](int r) { return input_value<bf16_t>(r, me * 7 + i, 51); });
  }, "async reduce_scatter sum bf16");
  expect_elements(gathered, 13 * un, [&](std::size_t i) {
    return input_value<f16_t>(static_cast<int>(i / 13), i % 13, 52);
  }, "async all_gather f16 in place");
  expect_elements(exchange_out, 7 * un, [&](std::size_t i) {
    return input_value<std::uint8_t>(static_cast<int>(i / 7), me * 7 + i % 7, 53);
  }, "async all_to_all u8");
  expect_elements(broadcast, 1001, [&](std::size_t i) { return input_value<double>(root, i, 54); },
                  "async broadcast f64");

  ByteCounters expected = before;
  const auto ranks = comm.node_of_rank();
  expected.record(Collective::all_reduce, traffic_bytes(Collective::all_reduce, 13, 4, comm.rank(), ranks));
  expected.record(Collective::reduce_scatter, traffic_bytes(Collective::reduce_scatter, 7, 2, comm.rank(), ranks));
  expected.record(Collective::all_gather, traffic_bytes(Collective::all_gather, 13, 2, comm.rank(), ranks));
  expected.record(Collective::all_to_all, traffic_bytes(Collective::all_to_all, 7, 1, comm.rank(), ranks));
  expected.record(Collective::broadcast, traffic_bytes(Collective::broadcast, 1001, 8, comm.rank(), ranks, root));
  expected.record(Collective::barrier, {});
  EXPECT_TRUE(comm.counters() == expected);
}

// Inputs that bf16/f16 cannot add exactly. Each of the n-1 pairwise additions (in whatever order MPI uses)
// rounds once to the element type, with relative error at most the unit roundoff u (2^-8 for bf16's 8-bit
// significand, 2^-11 for f16's 11-bit one) of a partial sum no larger than sum |x_r|; so the tolerance is
// (n-1) * u * sum |x_r| against the exact sum of the rounded inputs.
TEST_P(Collectives, HalfPrecisionSum_OfInexactInputs_IsWithinOneRoundingPerAddition) {
  Communicator& comm = group();
  const int n = comm.size();
  constexpr std::size_t kCount = 1001;
  const auto inexact = [](int rank, std::size_t i) { return 1.0 + (rank + 1) * static_cast<double>(i % 7) / 3.0; };
  for_each_type<bf16_t, f16_t>([&]<typename T>(std::type_identity<T>) {
    const double u = std::is_same_v<T, bf16_t> ? 0x1p-8 : 0x1p-11;
    std::vector<T> data(kCount);
    for (std::size_t i = 0; i < kCount; ++i) data[i] = from_double<T>(inexact(comm.rank(), i));
    comm.all_reduce(data.data(), data.data(), kCount, dtype_of<T>(), ReduceOp::sum);
    std::size_t outside = 0;
    for (std::size_t i = 0; i < kCount; ++i) {
      double exact = 0.0;
      double magnitude = 0.0;
      for (int r = 0; r < n; ++r) {
        const double x = to_double(from_double<T>(inexact(r, i)));
        exact += x;
        magnitude += std::abs(x);
      }
      if (std::abs(to_double(data[i]) - exact) > (n - 1) * u * magnitude) ++outside;
    }
    EXPECT_EQ(outside, 0u) << hsdp::to_string(dtype_of<T>());
  });
}

INSTANTIATE_TEST_SUITE_P(EveryGroupOfEveryStrategy, Collectives, ::testing::ValuesIn(all_group_cases()),
                         [](const ::testing::TestParamInfo<GroupCase>& info) {
                           return std::string(comm::to_string(info.param.scope)) + "_" + to_string(info.param.role);
                         });

}  // namespace
}  // namespace hsdp::comm::testing
