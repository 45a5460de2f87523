// hsdp-bench-ckpt: checkpoint write and read bandwidth of the parallel HDF5 checkpoint layer.
// Every rank holds an equal contiguous quarter (1/world) of every unit's flat buffer, as FULL_SHARD does, with
// params, Adam m and v (GPT-2 124M by default: 124.5 M parameters stored, 1.49 GB in the file). Per I/O mode and
// repetition it times
//   write: save_checkpoint (create, collective write, close, fsync, rename, `latest`) from barrier to barrier;
//   read:  load_checkpoint (collective read with checksum verification) after the file's pages were dropped from
//          the page cache (posix_fadvise DONTNEED on the fsynced file: a cold read without root);
// GB/s = tensor bytes / seconds (1 GB = 1e9 B). Values are verified after each read. Rank 0 prints a table and,
// per measurement, one JSON line.
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "hsdp/ckpt/checkpoint.hpp"
#include "hsdp/core/buffer.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/json.hpp"
#include "hsdp/core/timer.hpp"

namespace po = boost::program_options;
using hsdp::ckpt::IoMode;

namespace {

struct Options {
  std::string dir = "bench_ckpt";
  std::string io = "both";
  int reps = 2;
  bool tiny = false;
  bool keep = false;
  bool json_only = false;
};

float value_at(int tensor, std::size_t unit, std::size_t i) {
  std::uint64_t z = (static_cast<std::uint64_t>(tensor) << 56) ^ (static_cast<std::uint64_t>(unit) << 40) ^ i;
  z = (z ^ (z >> 31)) * 0x7FB5D329728EA185ull;
  z ^= z >> 27;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f) - 0.5f;
}

struct Shards {
  std::vector<hsdp::Buffer<float>> params, exp_avg, exp_avg_sq;
  std::vector<hsdp::ckpt::UnitShard> views;
  std::vector<std::size_t> begins;
};

Shards make_shards(const hsdp::model::ModelLayout& layout, int rank, int world) {
  Shards s;
  for (int u = 0; u < layout.num_units(); ++u) {
    const std::size_t n = layout.unit(u).numel;
    const std::size_t per = (n + static_cast<std::size_t>(world) - 1) / static_cast<std::size_t>(world);
    const std::size_t begin = std::min(n, per * static_cast<std::size_t>(rank));
    const std::size_t count = std::min(n, begin + per) - begin;
    s.params.emplace_back(count);
    s.exp_avg.emplace_back(count);
    s.exp_avg_sq.emplace_back(count);
    s.begins.push_back(begin);
  }
  for (int u = 0; u < layout.num_units(); ++u) {
    const auto k = static_cast<std::size_t>(u);
    s.views.push_back(
        {u, s.begins[k], s.params[k].size(), s.params[k].data(), s.exp_avg[k].data(), s.exp_avg_sq[k].data()});
  }
  return s;
}

void fill(Shards& s) {
  for (std::size_t u = 0; u < s.views.size(); ++u) {
    for (std::size_t k = 0; k < s.views[u].count; ++k) {
      s.params[u][k] = value_at(0, u, s.begins[u] + k);
      s.exp_avg[u][k] = value_at(1, u, s.begins[u] + k);
      s.exp_avg_sq[u][k] = value_at(2, u, s.begins[u] + k);
    }
  }
}

// Elements that differ from fill()'s values (wte's padded rows, zero after a load, are skipped).
std::size_t mismatches(const Shards& s, const hsdp::model::ModelLayout& layout) {
  const hsdp::model::ParamInfo& wte = layout.param("transformer.wte.weight");
  std::size_t bad = 0;
  for (std::size_t u = 0; u < s.views.size(); ++u) {
    for (std::size_t k = 0; k < s.views[u].count; ++k) {
      const std::size_t i = s.begins[u] + k;
      if (u == 0 && i >= wte.offset + wte.logical_numel() && i < wte.offset + wte.numel) continue;
      bad += s.params[u][k] != value_at(0, u, i);
      bad += s.exp_avg[u][k] != value_at(1, u, i);
      bad += s.exp_avg_sq[u][k] != value_at(2, u, i);
    }
  }
  return bad;
}

void drop_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

double timed(const std::function<void()>& body) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = hsdp::monotonic_seconds();
  body();
  MPI_Barrier(MPI_COMM_WORLD);
  return hsdp::monotonic_seconds() - start;
}

int run(const Options& o, int rank, int world) {
  hsdp::model::GptConfig config = hsdp::model::GptConfig::gpt2_124m();
  if (o.tiny) config = {2, 2, 64, 64, 500, 512};
  const hsdp::model::ModelLayout layout(config);
  Shards shards = make_shards(layout, rank, world);
  std::vector<IoMode> modes;
  if (o.io == "both" || o.io == "single_call") modes.push_back(IoMode::single_call);
  if (o.io == "both" || o.io == "per_dataset") modes.push_back(IoMode::per_dataset);

  hsdp::ckpt::TrainState state;
  state.deck_text = "[model]\n";
  state.strategy = "full_shard";
  state.world_size = world;
  state.mesh = "1x" + std::to_string(world);
  const double gb = 3.0 * static_cast<double>(layout.logical_numel()) * sizeof(float) / 1e9;
  if (rank == 0 && !o.json_only) {
    std::printf(
        "# hsdp-bench-ckpt: %d ranks, model %d layers x %d, %zu parameters stored, %.3f GB of tensors "
        "(params + Adam m + v) per checkpoint, dir %s\n",
        world, config.n_layer, config.n_embd, layout.total_numel(), gb, o.dir.c_str());
    std::printf("# %-12s %4s %10s %10s %10s %10s %8s %s\n", "io", "rep", "write_s", "write_GB/s", "read_s", "read_GB/s",
                "calls", "verified");
  }
  std::int64_t step = 0;
  for (const IoMode io : modes) {
    const char* io_name = io == IoMode::single_call ? "single_call" : "per_dataset";
    for (int rep = 0; rep < o.reps; ++rep) {
      fill(shards);
      state.step = ++step;
      hsdp::ckpt::SaveOptions save;
      save.keep = 1;
      save.io = io;
      hsdp::ckpt::SaveResult result;
      const double write_s = timed([&] {
        result = hsdp::ckpt::save_checkpoint(MPI_COMM_WORLD, o.dir, layout, shards.views, true, state, save);
      });
      if (rank == 0) drop_page_cache(result.path);
      for (auto& b : shards.params) b.fill_zero();
      for (auto& b : shards.exp_avg) b.fill_zero();
      for (auto& b : shards.exp_avg_sq) b.fill_zero();
      const double read_s =
          timed([&] { hsdp::ckpt::load_checkpoint(MPI_COMM_WORLD, result.path, layout, shards.views, io); });
      std::size_t bad = mismatches(shards, layout);
      MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_UNSIGNED_LONG, MPI_SUM, MPI_COMM_WORLD);
      if (rank == 0) {
        if (!o.json_only)
          std::printf("  %-12s %4d %10.3f %10.3f %10.3f %10.3f %8d %s\n", io_name, rep, write_s, gb / write_s, read_s,
                      gb / read_s, result.collective_transfers, bad == 0 ? "yes" : "NO");
        hsdp::JsonLine line;
        line.add("bench", "ckpt").add("io", io_name).add("rep", rep).add("ranks", world);
        line.add("bytes", static_cast<std::uint64_t>(result.tensor_bytes)).add("write_s", write_s);
        line.add("write_gbps", gb / write_s).add("read_s", read_s).add("read_gbps", gb / read_s);
        line.add("write_phase_s", result.write_s).add("checksum_s", result.checksum_s);
        line.add("create_s", result.create_s).add("data_s", result.data_s).add("close_s", result.close_s);
        line.add("commit_s", result.commit_s);
        line.add("collective_calls_per_rank", result.collective_transfers).add("verified", bad == 0);
        line.add("independent_fallback", result.independent_fallback);
        std::printf("%s\n", line.str().c_str());
        std::fflush(stdout);
      }
      if (bad != 0) return 1;
    }
  }
  if (!o.keep && rank == 0) std::filesystem::remove_all(o.dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Options o;
  po::options_description options("hsdp-bench-ckpt options", 100);
  // clang-format off
  options.add_options()
      ("help,h", "print this help and exit")
      ("dir", po::value(&o.dir)->default_value(o.dir),
       "checkpoint directory (on the disk to measure): new or empty, removed at the end unless --keep")
      ("io", po::value(&o.io)->default_value(o.io), "single_call, per_dataset or both")
      ("reps", po::value(&o.reps)->default_value(o.reps), "repetitions per I/O mode")
      ("tiny", po::bool_switch(&o.tiny), "a 2-layer model instead of GPT-2 124M (a quick check)")
      ("keep", po::bool_switch(&o.keep), "keep the checkpoint directory")
      ("json-only", po::bool_switch(&o.json_only), "print only the JSON line of each measurement");
  // clang-format on
  int code = 0;
  bool checking_options = true;  // the options and their checks are alike on every rank
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, options), vm);
    po::notify(vm);
    if (o.io != "both" && o.io != "single_call" && o.io != "per_dataset") {
      hsdp::throw_config("--io must be single_call, per_dataset or both, not '" + o.io + "'");
    }
    if (o.reps < 1) hsdp::throw_config("--reps must be >= 1, got " + std::to_string(o.reps));
    // It writes checkpoints there and removes the folder at the end: never one that holds anything else. Rank 0
    // decides for all (on node-local disks the others' view could differ, and a rank left in run() would wait).
    std::error_code ec;
    int taken = rank == 0 && std::filesystem::exists(o.dir, ec) && !std::filesystem::is_empty(o.dir, ec) ? 1 : 0;
    MPI_Bcast(&taken, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (vm.count("help")) {
      if (rank == 0) std::cout << "usage: mpirun -np 4 hsdp-bench-ckpt [options]\n\n" << options;
    } else if (taken != 0) {
      if (rank == 0) {
        std::cerr << "hsdp-bench-ckpt: --dir " << o.dir
                  << ": exists and is not empty (the bench writes its checkpoints there and removes the folder at the "
                     "end): give a new or empty folder\n";
      }
      code = 2;
    } else {
      checking_options = false;
      code = run(o, rank, world);
    }
  } catch (const po::error& e) {
    if (rank == 0) std::cerr << "hsdp-bench-ckpt: " << e.what() << " (see --help)\n";
    code = hsdp::kExitBadInput;
  } catch (const hsdp::Error& e) {
    // An option's check, or an error the ranks agreed on, is the same on every rank: rank 0 says it once. Any other
    // may be one rank's own (its disk): each rank says its own.
    const bool everywhere = checking_options || dynamic_cast<const hsdp::AgreedError*>(&e) != nullptr;
    if (rank == 0 || !everywhere) std::cerr << "hsdp-bench-ckpt: " << e.what() << "\n";
    code = e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "hsdp-bench-ckpt: internal error: " << e.what() << "\n";
    code = hsdp::kExitInternal;
  }
  MPI_Finalize();
  return code;
}
