#pragma once
// GoogleTest on every rank of an MPI job, shared by the MPI suites' mains (comm, shard, ckpt, gpu): rank 0 prints
// gtest's usual output, the other ranks only their own failed assertions (one line each, prefixed with the
// rank), and every rank gets the same result.
#include <gtest/gtest.h>
#include <mpi.h>

#include <iostream>
#include <memory>
#include <string>

namespace hsdp::testing {

// One line per failed assertion on stderr: "[rank R] FAILED Suite.Test at file:line: message". The test's name is
// kept at its start: UnitTest::current_test_info() would deadlock inside OnTestPartResult (gtest holds its lock
// while it reports a result).
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

// After InitGoogleTest: RUN_ALL_TESTS on every rank of `comm`, with only rank 0's default printer. Returns the
// failures (failed tests, plus one for a failed run) summed over all ranks: 0 on every rank when all passed.
inline int run_all_tests_on_every_rank(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    const std::unique_ptr<::testing::TestEventListener> silenced(listeners.Release(listeners.default_result_printer()));
    listeners.Append(std::make_unique<RankFailurePrinter>(rank).release());  // gtest owns appended listeners
  }
  const int status = RUN_ALL_TESTS();
  int failures = ::testing::UnitTest::GetInstance()->failed_test_count() + (status != 0 ? 1 : 0);
  MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, comm);
  return failures;
}

}  // namespace hsdp::testing
