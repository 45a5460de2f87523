#include "hsdp/core/files.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp {
namespace {

namespace fs = std::filesystem;

// A fresh directory of this test's own, removed at the end.
class WriteFileAtomically : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "hsdp_test_files_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  static std::string read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  static void write(const fs::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }
  fs::path dir_;
};

TEST_F(WriteFileAtomically, WritesANewFileAndReplacesAnOldOneWhole) {
  const fs::path path = dir_ / "summary.json";
  write_file_atomically(path, "first\n");
  EXPECT_EQ(read(path), "first\n");
  const std::string longer(100000, 'x');
  std::string reason;
  ASSERT_TRUE(try_write_file_atomically(path, longer, &reason)) << reason;
  EXPECT_EQ(read(path), longer);
  ASSERT_TRUE(try_write_file_atomically(path, "", &reason)) << reason;  // an empty file is a file
  EXPECT_TRUE(fs::exists(path));
  EXPECT_EQ(fs::file_size(path), 0u);
  EXPECT_FALSE(fs::exists(dir_ / "summary.json.tmp"));
  const std::string_view pieces[] = {"head", "", "er and body"};  // one after the other, an empty one included
  write_file_atomically(path, pieces);
  EXPECT_EQ(read(path), "header and body");
}

TEST_F(WriteFileAtomically, AWriteThatCannotStartLeavesTheFileAsItWas) {
  const fs::path path = dir_ / "latest";
  write(path, "step_2.h5\n");
  fs::create_directory(dir_ / "latest.tmp");  // the temporary file cannot be opened: EISDIR
  std::string reason;
  EXPECT_FALSE(try_write_file_atomically(path, "step_4.h5\n", &reason));
  EXPECT_EQ(reason, "cannot write '" + (dir_ / "latest.tmp").string() + "': Is a directory");
  EXPECT_EQ(read(path), "step_2.h5\n");
  try {
    write_file_atomically(path, "step_4.h5\n");
    FAIL() << "no Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::data);
    EXPECT_EQ(std::string(e.what()), reason);
  }
  EXPECT_EQ(read(path), "step_2.h5\n");
}

TEST_F(WriteFileAtomically, ARenameThatFailsRemovesTheTemporaryFile) {
  const fs::path path = dir_ / "taken";
  fs::create_directories(path / "inside");  // a non-empty directory: rename(file, it) fails
  std::string reason;
  EXPECT_FALSE(try_write_file_atomically(path, "bytes", &reason));
  EXPECT_EQ(reason.rfind("cannot rename '" + (dir_ / "taken.tmp").string() + "' to '" + path.string() + "': ", 0), 0u)
      << reason;
  EXPECT_FALSE(fs::exists(dir_ / "taken.tmp"));
  EXPECT_TRUE(fs::is_directory(path / "inside"));
}

TEST_F(WriteFileAtomically, AMissingDirectoryIsNamedAndNothingIsCreated) {
  const fs::path path = dir_ / "no" / "source.json";
  std::string reason;
  EXPECT_FALSE(try_write_file_atomically(path, "{}", &reason));
  EXPECT_EQ(reason, "cannot write '" + (dir_ / "no" / "source.json.tmp").string() + "': No such file or directory");
  EXPECT_FALSE(fs::exists(dir_ / "no"));
}

TEST_F(WriteFileAtomically, ADirectoryIsSyncedAndOneThatIsNotADirectoryIsNamed) {
  std::string reason;
  EXPECT_TRUE(try_fsync_directory(dir_, &reason)) << reason;
  EXPECT_FALSE(try_fsync_directory(dir_ / "missing", &reason));
  EXPECT_EQ(reason, "cannot open directory '" + (dir_ / "missing").string() + "': No such file or directory");
  write(dir_ / "plain", "x");
  EXPECT_FALSE(try_fsync_directory(dir_ / "plain", &reason));
  EXPECT_EQ(reason, "cannot open directory '" + (dir_ / "plain").string() + "': Not a directory");
}

}  // namespace
}  // namespace hsdp
