#pragma once
// What the MPI checkpoint tests share: rank and size, the directory of checkpoints the 4-rank run writes for the
// other world sizes, a per-test directory every rank sees, and a way to catch the Error a collective call throws.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp::ckpt::testing {

struct MpiContext {
  int rank = 0;
  int size = 1;
  std::string fixture_dir;      // --fixture-dir=PATH
  bool write_fixtures = false;  // --write-fixtures (the 4-rank run)
};
const MpiContext& mpi();

// A fresh directory per test, the same path on every rank (rank 0's pid in its name), removed at the end.
class SharedDir {
 public:
  SharedDir() {
    long pid = ::getpid();
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    path_ = std::filesystem::temp_directory_path() / ("hsdp_ckpt_" + std::to_string(pid) + "_" + name);
    if (mpi().rank == 0) {
      std::filesystem::remove_all(path_);
      std::filesystem::create_directories(path_);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ~SharedDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    std::error_code ignored;
    if (mpi().rank == 0) std::filesystem::remove_all(path_, ignored);
  }
  SharedDir(const SharedDir&) = delete;
  SharedDir& operator=(const SharedDir&) = delete;
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// The message of the checkpoint Error `call` throws, or a text saying what happened instead.
inline std::string checkpoint_error(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::checkpoint) return e.what();
    return "an Error of kind " + std::string(to_string(e.kind())) + ": " + e.what();
  } catch (const std::exception& e) {
    return std::string("a non-hsdp exception: ") + e.what();
  }
  return "no error";
}

}  // namespace hsdp::ckpt::testing
