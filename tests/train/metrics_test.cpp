#include "hsdp/train/metrics.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "../temp_dir.hpp"
#include "hsdp/core/error.hpp"

namespace hsdp::train {
namespace {

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// keep_through_step(step)'s config error, or "" (a failure) when it cut the record.
std::string cut_error(MetricsLog& log, std::int64_t step) {
  try {
    log.keep_through_step(step);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

// The record of steps 1..4 and an evaluation line a resume from step 2 must not keep (no "step" key first).
const std::string kFourSteps =
    "{\"step\":1,\"loss\":4}\n{\"step\":2,\"loss\":3}\n{\"val\":1}\n{\"step\":3,\"loss\":2}\n"
    "{\"step\":4,\"loss\":1}\n";

TEST(MetricsLog, ResumeKeepsTheStepsItContinuesThenAppends) {
  hsdp::testing::TempDir dir;
  write(dir / "metrics.jsonl", kFourSteps);
  MetricsLog log(dir.path().string());
  log.keep_through_step(2);
  EXPECT_EQ(read(dir / "metrics.jsonl"), "{\"step\":1,\"loss\":4}\n{\"step\":2,\"loss\":3}\n");
  EXPECT_FALSE(log.write("{\"step\":3,\"loss\":2.5}"));
  EXPECT_EQ(read(dir / "metrics.jsonl"),
            "{\"step\":1,\"loss\":4}\n{\"step\":2,\"loss\":3}\n{\"step\":3,\"loss\":2.5}\n");
  EXPECT_FALSE(std::filesystem::exists(dir / "metrics.jsonl.tmp"));
}

TEST(MetricsLog, AStartFromStepZeroKeepsNothing) {
  hsdp::testing::TempDir dir;
  write(dir / "metrics.jsonl", kFourSteps);
  MetricsLog log(dir.path().string());
  log.keep_through_step(0);
  EXPECT_EQ(read(dir / "metrics.jsonl"), "");
  EXPECT_FALSE(log.write("{\"step\":1,\"loss\":5}"));
  EXPECT_EQ(read(dir / "metrics.jsonl"), "{\"step\":1,\"loss\":5}\n");
}

// The cut that cannot be written (here its temporary file cannot be opened) is a config Error naming the file, and
// the earlier record stays whole: it used to be truncated first, then rewritten.
TEST(MetricsLog, ACutThatCannotBeWrittenLeavesTheRecordAsItWas) {
  hsdp::testing::TempDir dir;
  write(dir / "metrics.jsonl", kFourSteps);
  std::filesystem::create_directory(dir / "metrics.jsonl.tmp");  // EISDIR
  MetricsLog log(dir.path().string());
  const std::string m = cut_error(log, 2);
  EXPECT_NE(m.find("log.dir: cannot cut '" + (dir / "metrics.jsonl").string() + "' back to step 2"), std::string::npos)
      << m;
  EXPECT_EQ(read(dir / "metrics.jsonl"), kFourSteps);
}

// A record that cannot be read is not cut: a FIFO (whose open would wait for a writer forever) is refused, still there.
TEST(MetricsLog, ARecordThatCannotBeReadIsRefused_AndLeftAsItWas) {
  hsdp::testing::TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "metrics.jsonl").c_str(), 0600), 0);
  MetricsLog log(dir.path().string());
  const std::string m = cut_error(log, 2);
  EXPECT_NE(m.find("is a FIFO, not a regular file"), std::string::npos) << m;
  EXPECT_TRUE(std::filesystem::is_fifo(dir / "metrics.jsonl"));
}

}  // namespace
}  // namespace hsdp::train
