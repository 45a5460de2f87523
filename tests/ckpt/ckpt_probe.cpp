// A small program the checkpoint test scripts drive (crash safety, hsdp-ckpt end to end):
//   ckpt_probe save DIR STEP [SPLIT]   collective: save the tiny model's values for STEP (split: disjoint, replicas,
//                                      whole); each rank first writes its pid to DIR/pid.<rank>
//   ckpt_probe check DIR STEP          collective: resolve_resume(DIR, "auto") names DIR/step_STEP.h5, and loading
//                                      it gives STEP's values bit for bit
//   ckpt_probe compare FILE STEP       one process: FILE holds the tiny model with STEP's values
//   ckpt_probe make-llmc FILE          one process: an llm.c model file of the tiny model (padded rows zero)
// Exit 0 on success, 1 on a mismatch, 2 on a checkpoint Error (its message on stderr).
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "fixtures.hpp"
#include "hsdp/ckpt/checkpoint.hpp"
#include "hsdp/ckpt/export.hpp"
#include "hsdp/ckpt/inspect.hpp"
#include "hsdp/core/error.hpp"

namespace hsdp::ckpt::testing {
namespace {

Split parse_split(const std::string& name) {
  for (const Split s : {Split::disjoint, Split::replicas, Split::whole, Split::unit_owner, Split::interleaved}) {
    if (name == split_name(s)) return s;
  }
  throw Error(ErrorKind::config, "unknown split '" + name + "'");
}

int save(const std::string& dir, std::int64_t step, Split split, int rank, int size) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/pid." + std::to_string(rank)) << ::getpid() << "\n";
  const model::ModelLayout layout(tiny_config());
  RankShards mine(ranges_for(split, layout, rank, size));
  mine.fill(step);
  save_checkpoint(MPI_COMM_WORLD, dir, layout, mine.shards, writer_for(split, rank, size), state_for(step, size));
  return 0;
}

int check(const std::string& dir, std::int64_t step, int rank, int size) {
  const std::string want = (std::filesystem::path(dir) / checkpoint_file_name(step)).string();
  const std::optional<std::string> resume = resolve_resume(MPI_COMM_WORLD, dir, "auto");
  int bad = 0;
  if (resume != want) {
    std::cerr << "resolve_resume(auto) gave '" << resume.value_or("<nothing>") << "', expected '" << want << "'\n";
    bad = 1;
  }
  const model::ModelLayout layout(tiny_config());
  RankShards mine(ranges_for(Split::disjoint, layout, rank, size));
  mine.poison();
  const TrainState state = load_checkpoint(MPI_COMM_WORLD, want, layout, mine.shards);
  const std::size_t mismatches = mine.mismatches(layout, step);
  if (mismatches != 0 || state.step != step) {
    std::cerr << "rank " << rank << ": " << mismatches << " values differ; step " << state.step << "\n";
    bad = 1;
  }
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return bad;
}

int compare(const std::string& file, std::int64_t step) {
  FullCheckpoint full = read_full_checkpoint(file);
  const model::ModelLayout layout(full.config);
  std::vector<Range> whole;
  for (int u = 0; u < layout.num_units(); ++u) whole.push_back({u, 0, layout.unit(u).numel});
  RankShards copy(whole);
  for (std::size_t u = 0; u < whole.size(); ++u) {
    std::copy(full.params[u].begin(), full.params[u].end(), copy.params[u].begin());
    std::copy(full.exp_avg[u].begin(), full.exp_avg[u].end(), copy.exp_avg[u].begin());
    std::copy(full.exp_avg_sq[u].begin(), full.exp_avg_sq[u].end(), copy.exp_avg_sq[u].begin());
  }
  const std::size_t mismatches = copy.mismatches(layout, step);
  if (mismatches != 0) std::cerr << file << ": " << mismatches << " values differ from step " << step << "'s\n";
  return mismatches == 0 ? 0 : 1;
}

int make_llmc(const std::string& file) {
  const model::ModelLayout layout(tiny_config());
  std::vector<Buffer<float>> units;
  for (int u = 0; u < layout.num_units(); ++u) {
    units.emplace_back(layout.unit(u).numel);
    for (std::size_t i = 0; i < units.back().size(); ++i) units.back()[i] = value_at(0, u, i, 99);
  }
  const model::ParamInfo& wte = layout.param("transformer.wte.weight");
  for (std::size_t i = wte.logical_numel(); i < wte.numel; ++i) units[0][wte.offset + i] = 0.0f;
  write_llmc(file, layout, units);
  return 0;
}

int run(const std::vector<std::string>& args, int rank, int size) {
  const std::string& command = args.at(0);
  if (command == "save")
    return save(args.at(1), std::stoll(args.at(2)), parse_split(args.size() > 3 ? args[3] : "disjoint"), rank, size);
  if (command == "check") return check(args.at(1), std::stoll(args.at(2)), rank, size);
  if (command == "compare") return compare(args.at(1), std::stoll(args.at(2)));
  if (command == "make-llmc") return make_llmc(args.at(1));
  std::cerr << "ckpt_probe: unknown command '" << command << "'\n";
  return 2;
}

}  // namespace
}  // namespace hsdp::ckpt::testing

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int code = 0;
  try {
    code = hsdp::ckpt::testing::run(std::vector<std::string>(argv + 1, argv + argc), rank, size);
  } catch (const hsdp::Error& e) {
    std::cerr << "ckpt_probe: error: " << e.what() << "\n";
    code = e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "ckpt_probe: " << e.what() << "\n";
    code = 1;
  }
  MPI_Finalize();
  return code;
}
