#pragma once
// --calibrate: link parameters from `hsdp-commbench --json` lines. Of the lines with bench=comm, for the groups
// "intra-node" and "inter-node" and the ring collectives (all_reduce, reduce_scatter, all_gather):
//   bandwidth  = the mean over those collectives of busbw_gbps at the largest size each was measured at (busbw is
//                the bytes one rank moves per second, which is what the time model divides by);
//   by size    = at each measured size, the mean over those collectives of busbw t / (t - latency x messages), the
//                bandwidth with the latency of the size's messages taken out (sizes where that latency is half the
//                time or more are left out): the time model interpolates it by a collective's size (cost.hpp);
//   latency    = the mean over them, at the smallest size each was measured at, of time_us / (messages of the
//                ring: 2(n-1) for all_reduce, n-1 for the others; n the group's ranks): the alpha of one message;
// And the compute rate per rank from the lines of hsdp-bench-train-cpu --json (bench=train_cpu) and
// hsdp-bench-train-gpu (bench=train_gpu), one training step of a GPT on one rank:
//   compute    = the mean over those lines of hsdp-plan's FLOPs of the measured step (flops_per_token of cost.hpp with
//                the line's params, n_layer, n_embd, seq_len and checkpointing, times batch x seq_len) / step_ms
//                (the mean step: forward, backward and update). In hsdp-plan's own FLOP count, so that its compute
//                time of the benchmarked model equals the measured step; the bench's achieved_gflops counts FLOPs
//                its own way and is only quoted.
// Other lines (bench=memcpy, group=world, all_to_all, broadcast) are read and ignored.
#include <optional>
#include <string>
#include <vector>

#include "plan/cost.hpp"

namespace hsdp::plan {

struct LinkCalibration {
  double gbps = 0;
  double latency_us = 0;
  std::vector<SizedBandwidth> by_size;  // the bandwidth at each measured size (LinkClass::by_size)
  std::string how;  // what it took, for the output
};

struct ComputeCalibration {
  double tflops = 0;  // per rank
  bool cpu = false;   // from bench=train_cpu lines: the CPU engine, whose collectives progress when it polls
  std::string how;
};

struct Calibration {
  std::optional<LinkCalibration> intra, inter;
  // The world's ring where it spans nodes of several ranks each (one flow per node crossing, as every world-wide
  // ring of the engine), and its ranks per node: Cluster::node_ring.
  std::optional<LinkCalibration> node_ring;
  int node_ring_members = 0;
  std::optional<ComputeCalibration> compute;
  std::string source;  // the files, comma-separated
};

struct CalibrationSource {
  std::string text, origin;  // origin names the file in errors
};

// Parses the lines of every source; throws a config Error naming the file and line for a line that is not a JSON
// object or a bench line that lacks a field, or when no source has a usable comm or train line.
Calibration parse_calibration(const std::vector<CalibrationSource>& sources);
Calibration read_calibration(const std::vector<std::string>& paths);

}  // namespace hsdp::plan
