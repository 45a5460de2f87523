#pragma once
// --calibrate: link parameters from `hsdp-commbench --json` lines. Of the lines with bench=comm, for the groups
// "intra-node" and "inter-node" and the ring collectives (all_reduce, reduce_scatter, all_gather):
//   bandwidth  = the mean over those collectives of busbw_gbps at the largest size each was measured at (busbw is
//                the bytes one rank moves per second, which is what the time model divides by);
//   latency    = the mean over them, at the smallest size each was measured at, of time_us / (messages of the
//                ring: 2(n-1) for all_reduce, n-1 for the others; n the group's ranks): the alpha of one message.
// Other lines (bench=memcpy, group=world, all_to_all, broadcast) are read and ignored.
#include <optional>
#include <string>
#include <vector>

namespace hsdp::plan {

struct LinkCalibration {
  double gbps = 0;
  double latency_us = 0;
  std::string how;  // what it took, for the output
};

struct Calibration {
  std::optional<LinkCalibration> intra, inter;
  std::string source;
};

// Parses the lines of `text` (origin names the file in errors); throws a config Error naming the line for a line
// that is not a JSON object, or when no usable comm line is present.
Calibration parse_commbench(const std::string& text, const std::string& origin);
Calibration read_commbench(const std::string& path);

}  // namespace hsdp::plan
