// --calibrate: hsdp-commbench --json lines in, link bandwidth and latency out.
#include "plan/calibrate.hpp"

#include <gtest/gtest.h>

#include "hsdp/core/error.hpp"

namespace hsdp::plan {
namespace {

// As hsdp-commbench --json writes them (2 nodes x 2 ranks): world, intra-node (2 ranks), inter-node (2 ranks).
constexpr const char* kLines =
    R"({"bench":"comm","group":"world","ranks":4,"collective":"all_reduce","bytes":8,"iters":100,"time_us":30,"algbw_gbps":0.0003,"busbw_gbps":0.0004,"bus_factor":1.5}
{"bench":"comm","group":"intra-node","ranks":2,"collective":"all_reduce","bytes":8,"iters":100,"time_us":4,"algbw_gbps":0.002,"busbw_gbps":0.002,"bus_factor":1}
{"bench":"comm","group":"intra-node","ranks":2,"collective":"all_gather","bytes":8,"iters":100,"time_us":3,"algbw_gbps":0.003,"busbw_gbps":0.001,"bus_factor":0.5}
{"bench":"comm","group":"intra-node","ranks":2,"collective":"all_reduce","bytes":1048576,"iters":10,"time_us":100,"algbw_gbps":10.5,"busbw_gbps":10.5,"bus_factor":1}
{"bench":"comm","group":"intra-node","ranks":2,"collective":"all_gather","bytes":1048576,"iters":10,"time_us":80,"algbw_gbps":13,"busbw_gbps":6.5,"bus_factor":0.5}
{"bench":"comm","group":"intra-node","ranks":2,"collective":"all_to_all","bytes":1048576,"iters":10,"time_us":80,"algbw_gbps":13,"busbw_gbps":99,"bus_factor":0.5}
{"bench":"comm","group":"inter-node","ranks":2,"collective":"reduce_scatter","bytes":16,"iters":100,"time_us":12,"algbw_gbps":0.001,"busbw_gbps":0.0007,"bus_factor":0.5}
{"bench":"comm","group":"inter-node","ranks":2,"collective":"reduce_scatter","bytes":1048576,"iters":10,"time_us":900,"algbw_gbps":1.2,"busbw_gbps":0.6,"bus_factor":0.5}
{"bench":"memcpy","bytes":67108864,"gbps":12.5}
)";

TEST(Calibrate, BandwidthIsMeanBusbwAtTheLargestSize_LatencyIsTimePerMessageAtTheSmallest) {
  const Calibration c = parse_commbench(kLines, "bench.json");
  ASSERT_TRUE(c.intra.has_value());
  ASSERT_TRUE(c.inter.has_value());
  EXPECT_DOUBLE_EQ(c.intra->gbps, (10.5 + 6.5) / 2);  // all_to_all is not a ring collective: left out
  // all_reduce on 2 ranks: 2 messages; all_gather: 1.
  EXPECT_DOUBLE_EQ(c.intra->latency_us, (4.0 / 2 + 3.0 / 1) / 2);
  EXPECT_DOUBLE_EQ(c.inter->gbps, 0.6);
  EXPECT_DOUBLE_EQ(c.inter->latency_us, 12.0);
  EXPECT_NE(c.inter->how.find("inter-node"), std::string::npos);
}

TEST(Calibrate, OneNode_HasNoInterNodeLink) {
  const Calibration c = parse_commbench(
      R"({"bench":"comm","group":"intra-node","ranks":4,"collective":"all_gather","bytes":64,"iters":2,"time_us":9,"algbw_gbps":1,"busbw_gbps":2,"bus_factor":0.75})",
      "one.json");
  ASSERT_TRUE(c.intra.has_value());
  EXPECT_FALSE(c.inter.has_value());
  EXPECT_DOUBLE_EQ(c.intra->gbps, 2);
  EXPECT_DOUBLE_EQ(c.intra->latency_us, 3);
}

TEST(Calibrate, ALineThatIsNotJson_IsAConfigErrorNamingTheLine) {
  try {
    parse_commbench(std::string(kLines) + "# size time algbw\n", "bench.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(std::string(e.what()).find("bench.json:10"), std::string::npos) << e.what();
  }
}

TEST(Calibrate, NoCommLines_IsAConfigError) {
  EXPECT_THROW(parse_commbench(R"({"bench":"memcpy","bytes":64,"gbps":1})", "x.json"), Error);
  EXPECT_THROW(read_commbench("/nonexistent/bench.json"), Error);
}

}  // namespace
}  // namespace hsdp::plan
