// main of the MPI checkpoint suite: MPI, then GoogleTest on every rank. Rank 0 prints gtest's output; other ranks
// print only their own failures. Every rank exits non-zero when any rank had a failure.
//   ckpt_mpi_test --fixture-dir=PATH [--write-fixtures] [gtest flags]
#include <gtest/gtest.h>
#include <mpi.h>

#include <iostream>
#include <string_view>

#include "../mpi_gtest.hpp"
#include "mpi_context.hpp"

namespace hsdp::ckpt::testing {
namespace {

MpiContext& context_slot() {
  static MpiContext context;
  return context;
}

}  // namespace

const MpiContext& mpi() {
  return context_slot();
}

}  // namespace hsdp::ckpt::testing

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  auto& context = hsdp::ckpt::testing::context_slot();
  MPI_Comm_rank(MPI_COMM_WORLD, &context.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &context.size);
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--fixture-dir=")) {
      context.fixture_dir = std::string(arg.substr(14));
    } else if (arg == "--write-fixtures") {
      context.write_fixtures = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  ::testing::InitGoogleTest(&argc, argv);
  const int failures = hsdp::testing::run_all_tests_on_every_rank(MPI_COMM_WORLD);
  MPI_Finalize();
  return failures > 0 ? 1 : 0;
}
