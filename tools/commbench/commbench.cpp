// hsdp-commbench: time every collective over the world, intra-node and inter-node groups, for message sizes
// from --min-bytes to --max-bytes, and report time, algbw and busbw (nccl-tests' bus factors) as a table and
// as JSON lines. It also measures memcpy bandwidth in the same run: the local limit to compare against.

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "hsdp/comm/mesh.hpp"
#include "hsdp/comm/mpi.hpp"
#include "hsdp/comm/topology.hpp"
#include "hsdp/comm/traffic.hpp"
#include "hsdp/core/buffer.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/json.hpp"
#include "hsdp/core/log.hpp"
#include "hsdp/core/memory.hpp"
#include "hsdp/core/timer.hpp"

namespace po = boost::program_options;
using hsdp::comm::Collective;

namespace {

struct Options {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{256} << 20;
  std::size_t factor = 2;
  std::size_t target_bytes = std::size_t{512} << 20;  // per measurement: iterations = target / size, clamped
  int max_iters = 50;
  int warmup = 2;
  bool json = false;
  hsdp::comm::TopologyOptions topology;
  double timeout_s = 600;
};

struct Result {
  std::string group;
  int group_size;
  Collective collective;
  std::size_t bytes;
  int iters;
  double seconds;  // per operation, slowest rank
};

// Issues one collective whose message size is `bytes` in nccl-tests' convention: the size of the full
// buffer for all_reduce/broadcast, of the gathered (or scattered) result for all_gather/reduce_scatter,
// and of the whole send buffer for all_to_all.
void run_once(hsdp::comm::Communicator& comm, Collective c, std::size_t count, hsdp::Buffer<float>& send,
              hsdp::Buffer<float>& recv) {
  const auto n = static_cast<std::size_t>(comm.size());
  switch (c) {
    case Collective::all_reduce:
      comm.all_reduce(send.data(), recv.data(), count, hsdp::DType::f32, hsdp::comm::ReduceOp::sum);
      break;
    case Collective::reduce_scatter:
      comm.reduce_scatter(send.data(), recv.data(), count / n, hsdp::DType::f32, hsdp::comm::ReduceOp::sum);
      break;
    case Collective::all_gather: comm.all_gather(send.data(), recv.data(), count / n, hsdp::DType::f32); break;
    case Collective::all_to_all: comm.all_to_all(send.data(), recv.data(), count / n, hsdp::DType::f32); break;
    case Collective::broadcast: comm.broadcast(recv.data(), count, hsdp::DType::f32, 0); break;
    case Collective::barrier: comm.barrier(); break;
  }
}

double memcpy_gbps(std::size_t bytes, int iters) {
  hsdp::Buffer<char> a(bytes), b(bytes);
  std::memset(a.data(), 1, bytes);
  std::memcpy(b.data(), a.data(), bytes);  // warm the pages
  hsdp::Stopwatch watch;
  for (int i = 0; i < iters; ++i) std::memcpy(b.data(), a.data(), bytes);
  const double seconds = watch.seconds();
  if (b[bytes / 2] != 1) std::abort();
  return static_cast<double>(bytes) * iters / seconds / 1e9;
}

Options parse(int argc, char** argv, bool& help) {
  Options o;
  std::string placement = "block";
  po::options_description desc(
      "usage: mpirun -np N hsdp-commbench [options]\n\n"
      "Times all_reduce, reduce_scatter, all_gather, all_to_all and broadcast (f32) over the world, one node's\n"
      "ranks (intra-node) and one rank per node (inter-node). Size = bytes of the full buffer (all_reduce,\n"
      "broadcast), of the gathered/scattered whole (all_gather, reduce_scatter), of the send buffer (all_to_all).\n"
      "algbw = size / time; busbw = algbw x factor (nccl-tests): all_reduce 2(n-1)/n, reduce_scatter,\n"
      "all_gather, all_to_all (n-1)/n, broadcast 1. Time is the slowest rank's mean over the iterations.\n\n"
      "options");
  desc.add_options()("help,h", "this text")("version", "print the version and exit")(
      "min-bytes", po::value(&o.min_bytes)->default_value(o.min_bytes), "smallest message in bytes")(
      "max-bytes", po::value(&o.max_bytes)->default_value(o.max_bytes), "largest message in bytes (256 MiB)")(
      "factor", po::value(&o.factor)->default_value(o.factor), "size multiplier between rows (>= 2)")(
      "max-iters", po::value(&o.max_iters)->default_value(o.max_iters), "iterations for the smallest messages")(
      "warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed iterations before each measurement")(
      "json", po::bool_switch(&o.json), "print JSON lines instead of the table")(
      "topology.ranks_per_node", po::value(&o.topology.ranks_per_node)->default_value(0),
      "0 = real nodes (shared memory); N = emulate nodes of N ranks")(
      "topology.placement", po::value(&placement)->default_value("block"), "block|cyclic (emulated nodes)")(
      "comm.timeout_s", po::value(&o.timeout_s)->default_value(o.timeout_s), "watchdog timeout per collective");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    hsdp::throw_config(e.what());
  }
  help = vm.count("help") > 0 || vm.count("version") > 0;
  if (help) {
    std::ostringstream text;
    if (vm.count("version") > 0) {
      text << "hsdp-commbench " << HSDP_VERSION;
    } else {
      text << desc;
    }
    throw hsdp::Error(hsdp::ErrorKind::config, text.str());
  }
  // Unsigned options take "-1" as 2^64 - 1 (Boost converts it so): the upper bounds catch negative values too.
  constexpr std::size_t kMaxBytes = std::size_t{1} << 40;
  if (o.factor < 2 || o.factor > 1024) hsdp::throw_config("--factor must be in [2, 1024]");
  if (o.max_bytes < 4 || o.max_bytes > kMaxBytes) hsdp::throw_config("--max-bytes must be in [4, 1 TiB]");
  if (o.min_bytes < 4 || o.min_bytes > o.max_bytes) hsdp::throw_config("--min-bytes must be in [4, --max-bytes]");
  if (o.max_iters < 2) hsdp::throw_config("--max-iters must be >= 2, got " + std::to_string(o.max_iters));
  if (o.warmup < 0) hsdp::throw_config("--warmup must be >= 0, got " + std::to_string(o.warmup));
  if (o.topology.ranks_per_node < 0) {
    hsdp::throw_config("--topology.ranks_per_node must be >= 0, got " + std::to_string(o.topology.ranks_per_node));
  }
  if (!(o.timeout_s > 0)) hsdp::throw_config("--comm.timeout_s must be > 0 seconds");
  o.topology.placement = hsdp::comm::parse_placement(placement);
  return o;
}

// Each rank fills two buffers of --max-bytes: beyond what its host has left (MemAvailable, or the cgroup's limit,
// such as a Slurm job's --mem) the kernel would kill ranks while they fill them (an allocation of untouched pages
// succeeds), so that is refused on every rank, naming the host that has the least to spare.
void check_buffers_fit(std::size_t max_bytes) {
  const int ranks = hsdp::comm::ranks_on_host(MPI_COMM_WORLD);
  const hsdp::HostMemory memory = hsdp::host_memory_available();
  const double need = 2.0 * static_cast<double>(max_bytes) * ranks;
  struct {
    double spare;
    int rank;
  } mine{memory.available > 0 ? static_cast<double>(memory.available) - need : 0.0, 0}, least{};
  MPI_Comm_rank(MPI_COMM_WORLD, &mine.rank);
  MPI_Allreduce(&mine, &least, 1, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD);
  if (least.spare >= 0) return;
  // The figures of the host short of memory, from one of its ranks, for rank 0's message.
  char what[512] = "";
  if (mine.rank == least.rank) {
    std::snprintf(what, sizeof what, "the %d rank(s) on host %s need %.0f MiB, more than its %.0f MiB available (%s)",
                  ranks, hsdp::host_name().c_str(), need / 1048576.0, static_cast<double>(memory.available) / 1048576.0,
                  memory.source.c_str());
  }
  MPI_Bcast(what, sizeof what, MPI_CHAR, least.rank, MPI_COMM_WORLD);
  hsdp::throw_config("--max-bytes " + std::to_string(max_bytes) + ": each rank fills two buffers of that size, and " +
                     what + " (give a smaller --max-bytes)");
}

std::string human_bytes(std::size_t b) {
  char text[32];
  if (b >= (1u << 20) && b % (1u << 20) == 0) std::snprintf(text, sizeof text, "%zuM", b >> 20);
  else if (b >= 1024 && b % 1024 == 0) std::snprintf(text, sizeof text, "%zuK", b >> 10);
  else std::snprintf(text, sizeof text, "%zu", b);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  hsdp::comm::MpiEnvironment mpi(&argc, &argv);
  const hsdp::Logger log(mpi.world_rank(), hsdp::host_name());
  Options o;
  try {
    bool help = false;
    try {
      o = parse(argc, argv, help);
    } catch (const hsdp::Error& e) {
      if (help) {
        log.info(e.what());
        return 0;
      }
      throw;
    }
    hsdp::comm::CommOptions comm_options{o.timeout_s};
    const auto topology = hsdp::comm::detect_topology(MPI_COMM_WORLD, o.topology);
    hsdp::comm::MpiCommunicator world(hsdp::comm::MpiComm(MPI_COMM_WORLD), "world", topology.node_of_rank,
                                      comm_options, log);
    hsdp::comm::ProcessMesh mesh(world, topology, hsdp::comm::MeshOptions{hsdp::comm::ShardScope::node, 0, "hsdp-commbench"});

    struct Group {
      const char* label;
      hsdp::comm::Communicator* comm;
    };
    std::vector<Group> groups = {{"world", &world}};
    if (mesh.node().size() > 1) groups.push_back({"intra-node", &mesh.node()});
    if (mesh.cross_node().size() > 1) groups.push_back({"inter-node", &mesh.cross_node()});

    const std::vector<Collective> collectives = {Collective::all_reduce, Collective::reduce_scatter,
                                                 Collective::all_gather, Collective::all_to_all,
                                                 Collective::broadcast};
    check_buffers_fit(o.max_bytes);
    const std::size_t max_count = o.max_bytes / sizeof(float);
    // Two buffers of --max-bytes on every rank: where one rank cannot have them, every rank stops with one line.
    hsdp::Buffer<float> send, recv;
    int allocated = 1;
    try {
      send.reset(max_count);
      recv.reset(max_count);
    } catch (const std::bad_alloc&) {
      allocated = 0;
    }
    MPI_Allreduce(MPI_IN_PLACE, &allocated, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (allocated == 0) {
      hsdp::throw_config("--max-bytes " + std::to_string(o.max_bytes) +
                         ": a rank cannot allocate its two buffers of that size (give a smaller --max-bytes)");
    }
    for (std::size_t i = 0; i < max_count; ++i) send[i] = 1.0f;

    std::vector<Result> results;
    for (const auto& group : groups) {
      const auto n = static_cast<std::size_t>(group.comm->size());
      for (const Collective c : collectives) {
        for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
          // Sizes that split over the group: round the element count down to a multiple of n.
          std::size_t count = bytes / sizeof(float);
          if (c != Collective::all_reduce && c != Collective::broadcast) count = count / n * n;
          if (count == 0) continue;
          const int iters = static_cast<int>(std::clamp<std::size_t>(o.target_bytes / bytes, 2, o.max_iters));
          for (int i = 0; i < o.warmup; ++i) run_once(*group.comm, c, count, send, recv);
          group.comm->barrier();
          hsdp::Stopwatch watch;
          for (int i = 0; i < iters; ++i) run_once(*group.comm, c, count, send, recv);
          double seconds = watch.seconds() / iters;
          MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
          results.push_back({group.label, group.comm->size(), c, count * sizeof(float), iters, seconds});
        }
      }
    }
    const std::size_t copy_bytes = std::min<std::size_t>(o.max_bytes, std::size_t{64} << 20);
    double copy = memcpy_gbps(copy_bytes, 10);
    MPI_Allreduce(MPI_IN_PLACE, &copy, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);

    if (!log.is_root()) return 0;
    std::ostringstream out;
    if (o.json) {
      for (const auto& r : results) {
        const double algbw = static_cast<double>(r.bytes) / r.seconds / 1e9;
        hsdp::JsonLine j;
        j.add("bench", "comm").add("group", r.group).add("ranks", r.group_size)
            .add("collective", hsdp::comm::to_string(r.collective)).add("bytes", static_cast<std::uint64_t>(r.bytes))
            .add("iters", r.iters).add("time_us", r.seconds * 1e6).add("algbw_gbps", algbw)
            .add("busbw_gbps", algbw * hsdp::comm::bus_factor(r.collective, r.group_size))
            .add("bus_factor", hsdp::comm::bus_factor(r.collective, r.group_size));
        out << j.str() << "\n";
      }
      hsdp::JsonLine j;
      j.add("bench", "memcpy").add("bytes", static_cast<std::uint64_t>(copy_bytes)).add("gbps", copy);
      out << j.str() << "\n";
    } else {
      out << "# hsdp-commbench: " << topology.world_size << " ranks on " << topology.num_nodes() << " node(s)"
          << (topology.emulated ? " (emulated)" : "") << ", f32, time = slowest rank's mean\n"
          << "# busbw = algbw x factor: all_reduce 2(n-1)/n; reduce_scatter, all_gather, all_to_all (n-1)/n; "
             "broadcast 1\n";
      char line[160];
      std::string last_header;
      for (const auto& r : results) {
        const std::string header = r.group + " (" + std::to_string(r.group_size) + " ranks) " +
                                   std::string(hsdp::comm::to_string(r.collective));
        if (header != last_header) {
          std::snprintf(line, sizeof line, "\n# %s\n%12s %8s %12s %12s %12s\n", header.c_str(), "size", "iters",
                        "time(us)", "algbw(GB/s)", "busbw(GB/s)");
          out << line;
          last_header = header;
        }
        const double algbw = static_cast<double>(r.bytes) / r.seconds / 1e9;
        std::snprintf(line, sizeof line, "%12s %8d %12.1f %12.3f %12.3f\n", human_bytes(r.bytes).c_str(), r.iters,
                      r.seconds * 1e6, algbw, algbw * hsdp::comm::bus_factor(r.collective, r.group_size));
        out << line;
      }
      std::snprintf(line, sizeof line, "\n# memcpy %s on one rank (slowest rank): %.3f GB/s\n",
                    human_bytes(copy_bytes).c_str(), copy);
      out << line;
    }
    std::cout << out.str() << std::flush;
    return 0;
  } catch (const hsdp::Error& e) {
    if (log.is_root()) std::cerr << "hsdp-commbench: " << e.what() << "\n";
    return e.exit_code();
  }
}
