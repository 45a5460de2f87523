// main of the MPI checkpoint suite: MPI, then GoogleTest on every rank. Rank 0 prints gtest's output; other ranks
// print only their own failures. Every rank exits non-zero when any rank had a failure.
//   ckpt_mpi_test --fixture-dir=PATH [--write-fixtures] [gtest flags]
#include <gtest/gtest.h>
#include <mpi.h>

#include <iostream>
#include <string_view>

#include "mpi_context.hpp"

namespace hsdp::ckpt::testing {
namespace {

MpiContext& context_slot() {
  static MpiContext context;
  return context;
}

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestStart(const ::testing::TestInfo& test) override {
    name_ = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::cerr << "[rank " << rank_ << "] FAILED " << name_ << " at " << (result.file_name() ? result.file_name() : "?")
              << ":" << result.line_number() << ": " << result.message() << std::endl;
  }

 private:
  int rank_;
  std::string name_;
};

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
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (context.rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new hsdp::ckpt::testing::RankFailurePrinter(context.rank));
  }
  const int local = RUN_ALL_TESTS();
  int failed = local != 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
  MPI_Finalize();
  return failed;
}
