// hsdp-bench-quant: CPU throughput of block-wise quantization (hsdp_quant) next to memcpy of the same data.
//
// On --mib MiB of fp32 input (default 64, normal random values) with --threads OpenMP threads (default 1),
// best of --reps runs each:
//   memcpy                      the fp32 buffer into another one (the yardstick, same run)
//   quantize int8 / int4        fp32 -> packed values + one fp32 scale per block
//   dequantize int8 / int4      packed -> fp32
//   reduce_requantize int8 x2   two int8 inputs -> dequantize, fp32 sum, requantize to int8 (fused)
//   reduce_dequantize int8 x2   two int8 inputs -> fp32 sum (fused)
// GB/s counts fp32-equivalent bytes of the operation's input: 4 * n for quantize and dequantize (n elements),
// 4 * n * inputs for the fused reductions (their inputs stand for that many fp32 values), and the n * 4 bytes
// copied for memcpy. ratio = GB/s / memcpy GB/s. One table for people, one JSON line per measurement.
#include <omp.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "hsdp/core/buffer.hpp"
#include "hsdp/core/json.hpp"
#include "hsdp/core/memory.hpp"
#include "hsdp/core/timer.hpp"
#include "hsdp/quant/blockwise.hpp"
#include "hsdp/quant/fused.hpp"

namespace po = boost::program_options;
using hsdp::quant::Bits;
using hsdp::quant::QuantizedBuffer;
using hsdp::quant::QuantizedView;
using hsdp::quant::QuantSpec;

namespace {

struct Options {
  long long mib = 64;  // signed: a negative value is refused, not wrapped
  int threads = 1;
  int reps = 5;
  std::size_t block = hsdp::quant::kDefaultBlock;
  bool json_only = false;
};

struct Measurement {
  std::string op;
  std::string bits;
  int inputs = 1;
  double fp32_bytes = 0;
  double seconds = 0;
  double gbps() const { return fp32_bytes / seconds * 1e-9; }
};

// Best (shortest) of `reps` runs after one warm-up run.
template <typename Body>
double best_seconds(int reps, Body&& body) {
  body();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    hsdp::Stopwatch watch;
    body();
    best = std::min(best, watch.seconds());
  }
  return best;
}

void fill_normal(std::span<float> x, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  po::options_description desc("hsdp-bench-quant: block-wise int8/int4 quantization vs memcpy on one buffer");
  desc.add_options()("help,h", "this text")("mib", po::value(&opt.mib)->default_value(opt.mib), "fp32 input size, MiB")(
      "threads", po::value(&opt.threads)->default_value(opt.threads), "OpenMP threads")(
      "reps", po::value(&opt.reps)->default_value(opt.reps), "timed runs per measurement (best is reported)")(
      "block", po::value(&opt.block)->default_value(opt.block), "elements per scale")(
      "json-only", po::bool_switch(&opt.json_only), "print only the JSON lines");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "hsdp-bench-quant: " << e.what() << "\n" << desc;
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc;
    return 0;
  }
  // Three fp32 buffers and four quantized ones of --mib MiB: about 5 x --mib of memory; at most 1 TiB of input.
  if (opt.mib < 1 || opt.mib > (1LL << 20) || opt.threads < 1 || opt.reps < 1 || opt.block == 0 || opt.block % 2 != 0) {
    std::cerr << "hsdp-bench-quant: --mib must be 1 to 1048576, --threads and --reps positive, --block positive and "
                 "even\n";
    return 2;
  }
  omp_set_num_threads(opt.threads);

  const std::size_t n = static_cast<std::size_t>(opt.mib) * (std::size_t{1} << 20) / sizeof(float);
  const auto host = hsdp::host_memory_available();
  if (host.available > 0 && static_cast<double>(opt.mib) * 5 * (1 << 20) > static_cast<double>(host.available)) {
    std::cerr << "hsdp-bench-quant: --mib " << opt.mib << " needs about " << 5 * opt.mib << " MiB, more than the "
              << (host.available >> 20) << " MiB available here (" << host.source << "): lower --mib\n";
    return 2;
  }
  const double bytes = static_cast<double>(n) * sizeof(float);
  hsdp::Buffer<float> x(n), x2(n), out(n);
  fill_normal(x, 1);
  fill_normal(x2, 2);
  const QuantSpec int8{Bits::int8, opt.block}, int4{Bits::int4, opt.block};
  QuantizedBuffer q8(n, int8), q8b(n, int8), q4(n, int4), requant(n, int8);
  hsdp::quant::quantize(x2.span(), q8b);

  std::vector<Measurement> results;
  const double memcpy_s = best_seconds(opt.reps, [&] { std::memcpy(out.data(), x.data(), x.size_bytes()); });
  results.push_back({"memcpy", "fp32", 1, bytes, memcpy_s});
  results.push_back(
      {"quantize", "int8", 1, bytes, best_seconds(opt.reps, [&] { hsdp::quant::quantize(x.span(), q8); })});
  results.push_back(
      {"quantize", "int4", 1, bytes, best_seconds(opt.reps, [&] { hsdp::quant::quantize(x.span(), q4); })});
  results.push_back(
      {"dequantize", "int8", 1, bytes, best_seconds(opt.reps, [&] { hsdp::quant::dequantize(q8, out.span()); })});
  results.push_back(
      {"dequantize", "int4", 1, bytes, best_seconds(opt.reps, [&] { hsdp::quant::dequantize(q4, out.span()); })});
  const std::vector<QuantizedView> pair = {q8.view(), q8b.view()};
  results.push_back({"reduce_requantize", "int8", 2, 2 * bytes,
                     best_seconds(opt.reps, [&] { hsdp::quant::reduce_requantize(pair, requant); })});
  results.push_back({"reduce_dequantize", "int8", 2, 2 * bytes,
                     best_seconds(opt.reps, [&] { hsdp::quant::reduce_dequantize(pair, out.span()); })});

  const double memcpy_gbps = results.front().gbps();
  if (!opt.json_only) {
    std::printf("# hsdp-bench-quant: %lld MiB fp32 (%zu elements), block %zu, %d OpenMP thread(s), best of %d\n",
                opt.mib, n, opt.block, opt.threads, opt.reps);
    std::printf("# GB/s = fp32-equivalent input bytes / time (fused: both inputs, 2 x %lld MiB)\n", opt.mib);
    std::printf("%-20s %-6s %6s %10s %10s %12s %8s\n", "op", "bits", "inputs", "ms", "GB/s", "memcpy GB/s", "ratio");
    for (const auto& m : results) {
      std::printf("%-20s %-6s %6d %10.2f %10.2f %12.2f %8.2f\n", m.op.c_str(), m.bits.c_str(), m.inputs,
                  m.seconds * 1e3, m.gbps(), memcpy_gbps, m.gbps() / memcpy_gbps);
    }
  }
  for (const auto& m : results) {
    hsdp::JsonLine line;
    line.add("bench", "quant")
        .add("op", m.op)
        .add("bits", m.bits)
        .add("inputs", m.inputs)
        .add("elements", static_cast<std::uint64_t>(n))
        .add("block", static_cast<std::uint64_t>(opt.block))
        .add("threads", opt.threads)
        .add("fp32_bytes", m.fp32_bytes)
        .add("seconds", m.seconds)
        .add("gbps", m.gbps())
        .add("memcpy_gbps", memcpy_gbps)
        .add("ratio", m.gbps() / memcpy_gbps);
    std::cout << line.str() << "\n";
  }
  return 0;
}
