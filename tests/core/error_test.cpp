#include "hsdp/core/error.hpp"

#include <gtest/gtest.h>

namespace hsdp {

TEST(Error, BadInputKindsExitWithCode2) {
  EXPECT_EQ(Error(ErrorKind::config, "x").exit_code(), 2);
  EXPECT_EQ(Error(ErrorKind::data, "x").exit_code(), 2);
  EXPECT_EQ(Error(ErrorKind::checkpoint, "x").exit_code(), 2);
}

TEST(Error, CommAndInternalHaveTheirOwnCodes) {
  EXPECT_EQ(Error(ErrorKind::comm, "x").exit_code(), kExitComm);
  EXPECT_EQ(Error(ErrorKind::internal, "x").exit_code(), kExitInternal);
  EXPECT_NE(kExitComm, kExitRequeue);
}

TEST(Error, CarriesItsMessageAndKind) {
  try {
    throw_data("data.train: cannot open 'x.bin'");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::data);
    EXPECT_STREQ(e.what(), "data.train: cannot open 'x.bin'");
    EXPECT_EQ(to_string(e.kind()), "data");
  }
}

}  // namespace hsdp
