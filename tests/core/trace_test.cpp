#include "hsdp/core/trace.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "../temp_dir.hpp"
#include "hsdp/core/error.hpp"

namespace hsdp {
namespace {

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

using testing::TempDir;

TEST(TraceFile, WritesAJsonArrayOfEvents_OneTrackPerName_NamedOnFirstUse) {
  const TempDir scratch;
  const auto path = scratch / "a/b/trace.json";  // parent folders are made
  {
    TraceFile trace(path.string(), 3);
    trace.start();
    trace.span("compute", "forward block unit 1", 1.0, 1.0025);
    trace.span("reduce", "qgZ all_to_all unit 1", 1.001, 1.004);
    trace.span("compute", "backward block unit 1", 1.003, 1.002);  // ends before it begins: duration 0
    trace.instant("begin_step 2", 2.5);
  }
  EXPECT_EQ(read_all(path),
            "[\n"
            R"({"name":"thread_name","ph":"M","pid":3,"tid":1,"args":{"name":"compute"}},)" "\n"
            R"({"name":"forward block unit 1","ph":"X","pid":3,"tid":1,"ts":1000000,"dur":2500},)" "\n"
            R"({"name":"thread_name","ph":"M","pid":3,"tid":2,"args":{"name":"reduce"}},)" "\n"
            R"({"name":"qgZ all_to_all unit 1","ph":"X","pid":3,"tid":2,"ts":1001000,"dur":3000},)" "\n"
            R"({"name":"backward block unit 1","ph":"X","pid":3,"tid":1,"ts":1003000,"dur":0},)" "\n"
            R"({"name":"begin_step 2","ph":"i","s":"p","pid":3,"tid":0,"ts":2500000})" "\n"
            "]\n");
}

TEST(TraceFile, SpansFromSeveralThreads_AreEachWrittenWhole) {
  const TempDir scratch;
  const auto path = scratch / "threads.json";
  constexpr int kPerThread = 500;
  {
    TraceFile trace(path.string(), 0);
    trace.start();
    std::thread a([&] {
      for (int i = 0; i < kPerThread; ++i) trace.span("gather", "a", i, i + 0.5);
    });
    std::thread b([&] {
      for (int i = 0; i < kPerThread; ++i) trace.span("reduce", "b", i, i + 0.5);
    });
    a.join();
    b.join();
  }
  const std::string text = read_all(path);
  std::size_t whole = 0;
  for (std::size_t at = text.find("\"ph\":\"X\""); at != std::string::npos; at = text.find("\"ph\":\"X\"", at + 1)) {
    ++whole;
  }
  EXPECT_EQ(whole, 2u * kPerThread);
  EXPECT_EQ(text.front(), '[');
  EXPECT_EQ(text.substr(text.size() - 2), "]\n");
}

// Written from start() (the first step) on, not before: a run refused at start-up leaves an earlier run's trace as it
// was and makes no file where there was none; the events before start() are written first.
TEST(TraceFile, WrittenFromStartOn_ARunNeverStartedWritesNothing) {
  const TempDir scratch;
  const auto path = scratch / "trace_rank0.json";
  const std::string span = R"({"name":"thread_name","ph":"M","pid":0,"tid":1,"args":{"name":"compute"}},)"
                           "\n"
                           R"({"name":"wait","ph":"X","pid":0,"tid":1,"ts":1000000,"dur":0})";
  { std::ofstream(path) << "an earlier run's trace\n"; }
  {
    TraceFile refused(path.string(), 0);
    refused.span("compute", "wait", 1.0, 1.0);
    refused.flush();
  }
  EXPECT_EQ(read_all(path), "an earlier run's trace\n");
  {
    TraceFile trace(path.string(), 0);
    trace.span("compute", "wait", 1.0, 1.0);
    trace.start();
    trace.start();
    trace.instant("begin_step 1", 2.0);
  }
  EXPECT_EQ(read_all(path), "[\n" + span +
                                ",\n"
                                R"({"name":"begin_step 1","ph":"i","s":"p","pid":0,"tid":0,"ts":2000000})"
                                "\n]\n");
  const auto fresh = scratch / "fresh.json";
  {
    TraceFile never_started(fresh.string(), 0);
    never_started.span("compute", "wait", 1.0, 1.0);
  }
  EXPECT_FALSE(std::filesystem::exists(fresh));
}

TEST(TraceFile, AnUnwritablePath_IsAConfigErrorNamingIt) {
  try {
    TraceFile trace("/proc/hsdp_no_such_dir/trace.json", 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(std::string(e.what()).find("/proc/hsdp_no_such_dir/trace.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hsdp
