#pragma once
// Readable gtest output for LinkBytes comparisons.
#include <ostream>

#include "hsdp/comm/types.hpp"

namespace hsdp::comm {

inline void PrintTo(const LinkBytes& b, std::ostream* os) {
  *os << "{intra " << b.intra << ", inter " << b.inter << "}";
}

}  // namespace hsdp::comm
