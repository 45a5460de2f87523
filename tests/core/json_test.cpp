#include "hsdp/core/json.hpp"

#include <gtest/gtest.h>

#include <limits>

namespace hsdp {

TEST(JsonLine, WritesOneObjectWithEscapedStrings) {
  JsonLine j;
  j.add("step", 3).add("loss", 2.5).add("name", "a\"b\n").add("ok", true);
  EXPECT_EQ(j.str(), R"({"step":3,"loss":2.5,"name":"a\"b\n","ok":true})");
}

TEST(JsonLine, NonFiniteNumbersBecomeNull) {
  JsonLine j;
  j.add("x", std::numeric_limits<double>::infinity());
  EXPECT_EQ(j.str(), R"({"x":null})");
}

TEST(JsonLine, NestsRawObjects) {
  JsonLine inner;
  inner.add("params", std::int64_t{1024});
  JsonLine outer;
  outer.add_raw("memory", inner.str());
  EXPECT_EQ(outer.str(), R"({"memory":{"params":1024}})");
}

}  // namespace hsdp

namespace hsdp {
TEST(JsonLine, NumbersReadBackExactly) {
  const double x = 0.1 + 0.2;  // 0.30000000000000004
  JsonLine j;
  j.add("x", x);
  EXPECT_EQ(j.str(), R"({"x":0.30000000000000004})");
}
}  // namespace hsdp
