// hsdp-bench-train-gpu: training throughput of a GPT (GPT-2 124M by default) through the sharding engine, as
// hsdp-train runs it (train::make_mesh, make_cuda_backend): bf16 compute copies driving GptCuda<bf16> (cuBLASLt
// bf16 GEMMs, fp32 accumulation), fp32 gradients, master weights and AdamW, on every rank's GPU. --warmup steps,
// then --steps timed steps of begin_step, forward + backward, the global gradient norm and AdamW (hsdp-train's step
// without clipping, loss scaling or data loading), each timed on the host from its start to the next one's (the
// engine reads the loss and the norm once a step, in one read before AdamW, and does not wait for AdamW: a step's
// time is from that read to the next one's, AdamW included; the last step waits for the device).
//
// FLOPs per step: hsdp::bench::step_flops (gpt_bench.hpp), as hsdp-bench-train-cpu counts them, per rank.
// MFU = achieved FLOP/s / the card's dense bf16 peak, from a table by device name (H100 SXM 989, H100 PCIe 756,
// H200 989, A100 312 TFLOP/s) or --peak_tflops; and, measured side by side in the same run, the step's FLOP/s over
// what a large bf16 GEMM reaches on this card (ratio_to_gemm). --device cpu runs the same loop on the CPU engine
// (no MFU, no GEMM): what CI runs without a GPU. Exit 77 with a message when --device cuda finds no GPU.
#include <mpi.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "gpt_bench.hpp"
#include "hsdp/app/deck.hpp"
#include "hsdp/comm/agree.hpp"
#include "hsdp/comm/mpi.hpp"
#include "hsdp/comm/topology.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/json.hpp"
#include "hsdp/core/log.hpp"
#include "hsdp/device/cuda/blas.hpp"
#include "hsdp/device/cuda/runtime.hpp"
#include "hsdp/model/flops.hpp"
#include "hsdp/model/rng.hpp"
#include "hsdp/train/backend.hpp"
#include "hsdp/train/cuda_backend.hpp"

namespace po = boost::program_options;
namespace cuda = hsdp::device::cuda;
using hsdp::bf16_t;

namespace {

constexpr int kNoDeviceExit = 77;

struct Options {
  hsdp::model::GptConfig model = hsdp::model::GptConfig::gpt2_124m();
  int batch = 8;
  int seq_len = 1024;
  int steps = 10;
  int warmup = 3;
  double peak_tflops = 0.0;
  int gemm_n = 8192;
  bool json_only = false;
  bool kernel_breakdown = false;
  bool activation_checkpointing = false;
  std::string device = "cuda";
  std::string sharding = "no_shard";
  std::vector<std::string> keys;  // --set KEY=VALUE
};

struct Peak {
  double tflops = 0.0;
  std::string entry;  // the table row used, or why none
};

// Dense bf16 tensor-core peaks (NVIDIA data sheets, without sparsity: model::dense_bf16_peak_tflops).
Peak peak_for(const std::string& name, double override_tflops) {
  if (override_tflops > 0) return {override_tflops, "--peak_tflops"};
  const double peak = hsdp::model::dense_bf16_peak_tflops(name);
  if (peak > 0) return {peak, name};
  return {0.0, "not in the table (H100 SXM, H100 PCIe, H200, A100): give --peak_tflops"};
}

// The same card's bf16 GEMM rate, measured in the same run as the training steps: D[n, n] = A[n, n] B[n, n]^T
// through hsdp's cuBLASLt path (bf16 inputs and output, fp32 accumulation), 3 warm-up and 10 timed products on
// one stream, mean TFLOP/s. The training step's TFLOP/s divided by it says how close the step comes to what
// this GPU's GEMMs reach, independently of the data-sheet peak.
double measured_gemm_tflops(int n) {
  const cuda::Stream stream;
  const std::size_t elements = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  cuda::DeviceBuffer<bf16_t> a(elements), b(elements), d(elements);
  std::vector<bf16_t> host(elements);
  hsdp::model::Rng rng(11);
  for (auto& x : host) x = hsdp::float_to_bf16(static_cast<float>(rng.next_u64() % 2001) / 1000.0f - 1.0f);
  cuda::copy_to_device(a.data(), host.data(), elements, stream);
  cuda::copy_to_device(b.data(), host.data(), elements, stream);
  cuda::BlasLt blas;
  cuda::GemmArgs g;
  g.trans_b = true;
  g.m = g.n = g.k = n;
  g.a = a.data(), g.lda = n;
  g.b = b.data(), g.ldb = n;
  g.d = d.data(), g.ldd = n;
  constexpr int kWarmup = 3, kTimed = 10;
  for (int i = 0; i < kWarmup; ++i) blas.gemm(g, stream);
  cuda::Event start(cuda::Event::Timing::on), stop(cuda::Event::Timing::on);
  start.record(stream);
  for (int i = 0; i < kTimed; ++i) blas.gemm(g, stream);
  stop.record(stream);
  stop.synchronize();
  const double seconds = stop.elapsed_ms_since(start) * 1e-3 / kTimed;
  return 2.0 * n * static_cast<double>(n) * n / seconds / 1e12;
}

// The options; nullopt after --help (printed by rank 0).
std::optional<Options> parse(int argc, char** argv, bool root) {
  Options o;
  po::options_description desc(
      "hsdp-bench-train-gpu: GPT training throughput through the sharding engine, one JSON line (mpirun -np N for N\n"
      "ranks, one GPU each). FLOPs/step/rank = tokens * (6 * P_matmul + 6 * L * T * C), P_matmul = 12 L C^2 + V C\n"
      "(no recomputation counted); MFU = FLOP/s over the card's dense bf16 peak.\noptions");
  // clang-format off
  hsdp::bench::add_model_options(desc, o.model);
  desc.add_options()("help,h", "print this help")
      ("batch", po::value(&o.batch)->default_value(o.batch), "micro-batch B per rank")
      ("seq_len", po::value(&o.seq_len)->default_value(o.seq_len), "sequence length T (<= block_size)")
      ("steps", po::value(&o.steps)->default_value(o.steps), "timed steps")
      ("warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed steps first (plans, caches, clocks)")
      ("peak_tflops", po::value(&o.peak_tflops)->default_value(0.0), "dense bf16 peak for MFU (0: by device name)")
      ("gemm_n", po::value(&o.gemm_n)->default_value(o.gemm_n), "size of the reference bf16 GEMM (n x n x n)")
      ("device", po::value(&o.device)->default_value(o.device), "cuda, or cpu (the CPU engine, fp32 compute)")
      ("sharding", po::value(&o.sharding)->default_value(o.sharding), "parallel.sharding")
      ("activation_checkpointing", po::bool_switch(&o.activation_checkpointing),
       "keep only each block's input; recompute the block in backward")
      ("set", po::value(&o.keys)->composing(), "any hsdp-train deck key, KEY=VALUE (repeatable), e.g. comm.intra=mpi")
      ("kernel_breakdown", po::bool_switch(&o.kernel_breakdown),
       "after the timed steps, one more step with the model's kernels timed by kind (CUDA events around each "
       "group: matmul, attention, layernorm, elementwise, ...): ms and share of that step, JSON kernels_ms")
      ("json", po::bool_switch(&o.json_only), "print only the JSON line");
  // clang-format on
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  if (vm.count("help")) {
    if (root) std::cout << desc << "\n";
    return std::nullopt;
  }
  po::notify(vm);
  o.model.block_size = std::max(o.model.block_size, o.seq_len);
  if (o.steps < 1) hsdp::throw_config("--steps (" + std::to_string(o.steps) + ") must be >= 1");
  if (o.warmup < 0) hsdp::throw_config("--warmup (" + std::to_string(o.warmup) + ") must be >= 0");
  if (o.batch < 1 || o.seq_len < 1) hsdp::throw_config("--batch and --seq_len must be >= 1");
  if (o.gemm_n < 1) hsdp::throw_config("--gemm_n (" + std::to_string(o.gemm_n) + ") must be >= 1");
  return o;
}

// hsdp-train's options for this benchmark: the deck's defaults, the shape and the bench's keys (bf16 compute copies
// on a GPU), then --set.
hsdp::train::TrainOptions train_options(const Options& o) {
  hsdp::app::ConfigDeck deck = hsdp::app::ConfigDeck::defaults();
  const hsdp::model::GptConfig& m = o.model;
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"model.n_layer", std::to_string(m.n_layer)},
           {"model.n_head", std::to_string(m.n_head)},
           {"model.n_embd", std::to_string(m.n_embd)},
           {"model.block_size", std::to_string(m.block_size)},
           {"model.vocab_size", std::to_string(m.vocab_size)},
           {"model.padded_vocab_size", std::to_string(m.padded_vocab_size)},
           {"train.micro_batch", std::to_string(o.batch)},
           {"train.seq_len", std::to_string(o.seq_len)},
           {"train.activation_checkpointing", o.activation_checkpointing ? "true" : "false"},
           {"parallel.sharding", o.sharding},
           {"device.type", o.device},
           {"precision.param", o.device == "cuda" ? "bf16" : "fp32"}}) {
    deck.set(key, value);
  }
  for (const std::string& kv : o.keys) {
    const std::size_t eq = kv.find('=');
    if (eq == std::string::npos) hsdp::throw_config("--set " + kv + ": need KEY=VALUE");
    // The shape and the batch are this bench's own options: its FLOP count, its JSON and its ids follow them
    // (model.attention, model.gemm_epilogue and the like change no FLOP and are taken).
    static const std::vector<std::string> kShape = {
        "model.arch",       "model.n_layer",        "model.n_head",      "model.n_embd",
        "model.block_size", "model.vocab_size",     "model.n_kv_head",   "model.padded_vocab_size",
        "model.ffn_dim",    "model.tie_embeddings", "train.micro_batch", "train.seq_len",
        "train.grad_accum"};
    const std::string key = kv.substr(0, eq);
    if (std::find(kShape.begin(), kShape.end(), key) != kShape.end()) {
      hsdp::throw_config("--set " + kv +
                         ": the model's shape and the batch are given by this bench's own options "
                         "(--n_layer, --n_head, --n_embd, --batch, --seq_len, ...), which its FLOP count and JSON "
                         "follow; --set takes the other hsdp-train keys");
    }
    deck.set(key, kv.substr(eq + 1));
  }
  return hsdp::app::train_options(deck);
}

int run(const Options& o, const hsdp::Logger& log) {
  const bool gpu = o.device == "cuda";
  std::string reason;
  if (gpu && cuda::visible_device_count(&reason) == 0) {
    log.error("hsdp-bench-train-gpu: no CUDA device visible (", reason, "); --device cuda needs a GPU per rank");
    return kNoDeviceExit;
  }
  const hsdp::train::TrainOptions to = train_options(o);
  hsdp::comm::Topology topology;
  hsdp::comm::agree(MPI_COMM_WORLD, [&] { topology = hsdp::comm::detect_topology(MPI_COMM_WORLD, to.topology); });
  hsdp::comm::MpiCommunicator world(hsdp::comm::MpiComm(MPI_COMM_WORLD), "world", topology.node_of_rank, {}, log);
  std::unique_ptr<hsdp::comm::ProcessMesh> mesh;
  hsdp::comm::agree(MPI_COMM_WORLD, [&] { mesh = hsdp::train::make_mesh(to, world, topology, log); });
  const hsdp::model::ModelLayout layout(to.model);
  hsdp::MemoryAccountant memory;
  std::unique_ptr<hsdp::train::Backend> backend;
  hsdp::comm::agree(MPI_COMM_WORLD, [&] {
    backend = gpu ? hsdp::train::make_cuda_backend(to, layout, *mesh, memory, log)
                  : hsdp::train::make_cpu_backend(to, layout, *mesh, memory, log);
  });
  backend->start();
  const std::string device_name = gpu ? cuda::current_device_info().name : "cpu";
  const Peak peak = gpu ? peak_for(device_name, o.peak_tflops) : Peak{0.0, "the CPU: no bf16 peak"};

  // One micro-batch of seeded ids per rank.
  const std::size_t N = static_cast<std::size_t>(o.batch) * static_cast<std::size_t>(o.seq_len);
  std::vector<std::int32_t> ids(N + 1);
  hsdp::model::Rng rng(7 + static_cast<std::uint64_t>(world.rank()));
  for (auto& t : ids) t = static_cast<std::int32_t>(rng.next_u64() % static_cast<std::uint64_t>(o.model.vocab_size));
  const std::span<const std::int32_t> tokens(ids.data(), N), targets(ids.data() + 1, N);

  double loss = 0;
  std::int64_t t = 0;
  const auto step = [&] {  // as hsdp-train's: one read of the step's scalars, AdamW not waited for
    backend->begin_step();
    backend->forward_backward(tokens, targets, 1.0f, true);
    loss = backend->step_scalars(false).loss_sum;
    backend->optimizer_step(to.adamw, hsdp::optim::AdamWStep{3e-4f, ++t, 1.0f});
  };
  for (int s = 0; s < o.warmup; ++s) step();
  if (gpu) cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // the last warm-up's AdamW
  MPI_Barrier(MPI_COMM_WORLD);
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> marks{Clock::now()};
  for (int s = 0; s < o.steps; ++s) {
    step();
    if (s + 1 == o.steps && gpu) cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    marks.push_back(Clock::now());
  }
  // One more step with the kernels timed (not among the timed steps: the events would be in their time).
  std::vector<std::pair<std::string, double>> kernels;
  double kernel_step_ms = 0;
  if (o.kernel_breakdown && gpu) {
    backend->time_kernels(true);
    const auto start = Clock::now();
    step();
    cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    kernel_step_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    kernels = backend->kernel_times();
    backend->time_kernels(false);
  }
  std::vector<double> step_ms;
  for (std::size_t s = 1; s < marks.size(); ++s) {
    step_ms.push_back(std::chrono::duration<double, std::milli>(marks[s] - marks[s - 1]).count());
  }
  const double mean_ms = std::accumulate(step_ms.begin(), step_ms.end(), 0.0) / o.steps;
  // The best step: of those that hold exactly one AdamW. The first interval starts after a synchronize (the previous
  // AdamW done: none in it), the last ends with one (its own AdamW as well as the previous one); with fewer than three
  // steps, the mean.
  const double best_ms = step_ms.size() >= 3 ? *std::min_element(step_ms.begin() + 1, step_ms.end() - 1) : mean_ms;
  const std::int64_t tokens_per_step = static_cast<std::int64_t>(N);
  const double flops = hsdp::bench::step_flops(o.model, tokens_per_step, o.seq_len);
  const double tflops_mean = flops / (mean_ms * 1e-3) / 1e12;
  const double mfu = peak.tflops > 0 ? tflops_mean / peak.tflops : 0.0;
  std::size_t free_bytes = 0, total_bytes = 0;
  if (gpu) cuda::check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  const double gemm_tflops = gpu ? measured_gemm_tflops(o.gemm_n) : 0.0;
  const std::int64_t accounted = memory.peak_total();
  if (!log.is_root()) return 0;

  hsdp::JsonLine json;
  json.add("bench", "train_gpu")
      .add("path", "engine")
      .add("device", device_name)
      .add("ranks", world.size())
      .add("sharding", o.sharding);
  hsdp::bench::add_model_fields(json, o.model, layout.total_numel(), o.batch, o.seq_len)
      .add("steps", o.steps)
      .add("activation_checkpointing", o.activation_checkpointing)
      .add("attention", to.model.fused_attention ? "fused" : "unfused")
      .add("gemm_epilogue", to.model.fused_epilogues ? "fused" : "separate")
      .add("device_memory_bytes", static_cast<std::uint64_t>(total_bytes - free_bytes))
      .add("accounted_peak_bytes", accounted)
      .add("loss", static_cast<double>(loss))
      .add("step_ms", mean_ms)
      .add("step_ms_best", best_ms)
      .add("tokens_per_s", static_cast<double>(tokens_per_step) / (mean_ms * 1e-3))
      .add("tflops", tflops_mean)
      .add("peak_tflops", peak.tflops)
      .add("peak_entry", peak.entry)
      .add("mfu", mfu)
      .add("gemm_n", o.gemm_n)
      .add("gemm_tflops", gemm_tflops)
      .add("ratio_to_gemm", gemm_tflops > 0 ? tflops_mean / gemm_tflops : 0.0);
  if (!kernels.empty()) {
    hsdp::JsonLine k;
    for (const auto& [kind, ms] : kernels) k.add(kind, ms);
    json.add_raw("kernels_ms", k.str()).add("kernel_step_ms", kernel_step_ms);
  }
  if (!o.json_only) {
    std::printf(
        "hsdp-bench-train-gpu: GPT L=%d C=%d H=%d V=%d (Vp=%d), %zu params, B=%d T=%d per rank, %d rank(s) of %s, "
        "%s%s through the engine\n",
        o.model.n_layer, o.model.n_embd, o.model.n_head, o.model.vocab_size, o.model.padded_vocab_size,
        layout.total_numel(), o.batch, o.seq_len, world.size(), device_name.c_str(), o.sharding.c_str(),
        o.activation_checkpointing ? ", activation checkpointing" : "");
    std::printf("FLOPs/step/rank = %.3f TFLOP; %d warm-up + %d timed steps\n", flops / 1e12, o.warmup, o.steps);
    std::printf("%-6s %10s %12s %10s %8s\n", "step", "ms", "tokens/s", "TFLOP/s", "MFU");
    for (int s = 0; s < o.steps; ++s) {
      const double ms = step_ms[static_cast<std::size_t>(s)];
      const double tf = flops / (ms * 1e-3) / 1e12;
      std::printf("%-6d %10.2f %12.0f %10.1f %8.3f\n", o.warmup + s + 1, ms,
                  static_cast<double>(tokens_per_step) / (ms * 1e-3), tf, peak.tflops > 0 ? tf / peak.tflops : 0.0);
    }
    std::printf("mean %.2f ms/step, %.0f tokens/s per rank, MFU %.3f (%s)", mean_ms,
                static_cast<double>(tokens_per_step) / (mean_ms * 1e-3), mfu, peak.entry.c_str());
    if (gpu) std::printf("; GEMM %.1f TFLOP/s (%d^3, same run)", gemm_tflops, o.gemm_n);
    std::printf("; loss %.4f\n", static_cast<double>(loss));
    if (!kernels.empty()) {
      double sum = 0;
      for (const auto& kind : kernels) sum += kind.second;
      std::printf("kernels of one more step (%.2f ms, the model's kernels %.2f ms of it):\n", kernel_step_ms, sum);
      for (const auto& [kind, ms] : kernels) {
        std::printf("  %-14s %8.2f ms %6.1f%%\n", kind.c_str(), ms, 100 * ms / kernel_step_ms);
      }
    }
  }
  std::printf("%s\n", json.str().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  hsdp::comm::MpiEnvironment mpi(&argc, &argv);
  const hsdp::Logger log(mpi.world_rank(), hsdp::host_name());
  // The options and the deck they make are the same on every rank: rank 0 says what is wrong with them, once.
  std::optional<Options> options;
  try {
    options = parse(argc, argv, log.is_root());
    if (!options) return hsdp::kExitOk;
    static_cast<void>(train_options(*options));
  } catch (const po::error& e) {
    if (log.is_root()) std::cerr << "hsdp-bench-train-gpu: " << e.what() << " (see --help)\n";
    return hsdp::kExitBadInput;
  } catch (const hsdp::Error& e) {
    if (log.is_root()) std::cerr << "hsdp-bench-train-gpu: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    log.error("hsdp-bench-train-gpu: ", e.what());
    return hsdp::kExitInternal;
  }
  try {
    return run(*options, log);
  } catch (const hsdp::AgreedError& e) {
    if (log.is_root()) std::cerr << "hsdp-bench-train-gpu: " << e.what() << "\n";
    return e.exit_code();
  } catch (const hsdp::Error& e) {
    log.error("hsdp-bench-train-gpu: ", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    log.error("hsdp-bench-train-gpu: ", e.what());
    return hsdp::kExitInternal;
  }
}
