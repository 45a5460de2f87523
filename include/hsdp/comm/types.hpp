#pragma once
// Vocabulary of the comm layer: collectives, reduce ops, link classes, byte counters, options.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "hsdp/core/dtype.hpp"

namespace hsdp::comm {

enum class ReduceOp { sum, avg };
enum class LinkClass { intra_node, inter_node };
enum class Collective { all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, barrier };
inline constexpr std::size_t kCollectiveCount = 6;
inline constexpr std::array<Collective, kCollectiveCount> kAllCollectives = {
    Collective::all_reduce, Collective::reduce_scatter, Collective::all_gather,
    Collective::all_to_all, Collective::broadcast,      Collective::barrier};

std::string_view to_string(Collective c);
std::string_view to_string(ReduceOp op);

// Bytes one rank sends over each link class.
struct LinkBytes {
  std::uint64_t intra = 0;
  std::uint64_t inter = 0;
  std::uint64_t total() const { return intra + inter; }
  LinkBytes& operator+=(const LinkBytes& o) {
    intra += o.intra;
    inter += o.inter;
    return *this;
  }
  friend bool operator==(const LinkBytes&, const LinkBytes&) = default;
};

struct CollectiveStats {
  std::uint64_t calls = 0;
  LinkBytes bytes;
  friend bool operator==(const CollectiveStats&, const CollectiveStats&) = default;
};

// Counters of one communicator (or a sum over several): bytes this rank sent, by collective and link class.
struct ByteCounters {
  std::array<CollectiveStats, kCollectiveCount> by_collective{};

  void record(Collective c, const LinkBytes& bytes) {
    auto& s = by_collective[static_cast<std::size_t>(c)];
    s.calls += 1;
    s.bytes += bytes;
  }
  const CollectiveStats& of(Collective c) const { return by_collective[static_cast<std::size_t>(c)]; }
  LinkBytes total() const {
    LinkBytes t;
    for (const auto& s : by_collective) t += s.bytes;
    return t;
  }
  ByteCounters& operator+=(const ByteCounters& o) {
    for (std::size_t i = 0; i < kCollectiveCount; ++i) {
      by_collective[i].calls += o.by_collective[i].calls;
      by_collective[i].bytes += o.by_collective[i].bytes;
    }
    return *this;
  }
  friend bool operator==(const ByteCounters&, const ByteCounters&) = default;
};

// What carries the collectives of a group over device (GPU) memory: comm.intra inside a node, comm.inter across
// nodes. mpi: MPI (CUDA-aware where the library is, else staged through pinned host memory); nccl: NCCL.
enum class Transport { mpi, nccl };
// Parses "mpi" / "nccl"; a config Error naming `key` otherwise.
Transport parse_transport(std::string_view text, std::string_view key);
const char* to_string(Transport t);

// How MPI reaches the memory the engine trains in (comm.stage). direct: MPI reads and writes it (host memory on the
// CPU; on a GPU only where the MPI library is CUDA-aware); host: staged through host buffers (staged.hpp; on the
// CPU the copies are memcpy, which runs the GPU's staged path where CI can check it); automatic: direct on the CPU
// and with CUDA-aware MPI, else host.
enum class Staging { automatic, direct, host };
Staging parse_staging(std::string_view text, std::string_view key);
const char* to_string(Staging s);

struct CommOptions {
  // A collective that has not completed after this many seconds aborts the whole job (the watchdog).
  double timeout_s = 300.0;
  // Start-up (the deck agreed, the mesh, threads, data and the model built) may take this long on any rank before
  // the stall watch ends the job; rank 0 says every limit / 4 s (at most 30 s) that it is still waiting.
  double startup_timeout_s = 600.0;
  // all_reduce, reduce_scatter and all_gather of at least this many bytes (the whole buffer) run as rings of
  // point-to-point messages (mpi.hpp says why); smaller ones, latency-bound, go to MPI's own nonblocking collectives.
  std::size_t ring_min_bytes = 64 * 1024;
};

}  // namespace hsdp::comm
