// hsdp-bench-train-gpu: single-GPU training throughput of a GPT (GPT-2 124M by default) with hsdp's CUDA
// kernels: bf16 activations and compute weights, cuBLASLt bf16 GEMMs with fp32 accumulation, fp32 gradients,
// fp32 master weights and AdamW (which also writes the next step's bf16 weights). --warmup steps, then --steps
// timed steps of forward + backward + AdamW, timed with CUDA events around each step (no host sync inside one).
//
// FLOPs per step: hsdp::bench::step_flops (gpt_bench.hpp), as hsdp-bench-train-cpu counts them.
// --path units drives the model through its unit calls (model::UnitModel: what the sharding engine calls, the ids
// uploaded from the host every step) instead of the whole-model calls; --activation_checkpointing keeps only each
// block's input and recomputes the block in backward (FLOPs are counted without the recomputation, as MFU counts
// them). device_memory_bytes is what the GPU has in use after the timed steps (cudaMemGetInfo: this process's
// context, the model state, the activations, cuBLASLt's workspace).
// MFU = achieved FLOP/s / the card's dense bf16 peak, from a table by device name (H100 SXM 989, H100 PCIe 756,
// H200 989, A100 312 TFLOP/s) or --peak_tflops; and, measured side by side in the same run, the step's FLOP/s over
// what a large bf16 GEMM reaches on this card (ratio_to_gemm). Exit 77 with a message when no GPU is visible.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "hsdp/core/error.hpp"
#include "hsdp/core/json.hpp"
#include "hsdp/device/cuda/runtime.hpp"
#include "hsdp/model/cuda/gpt.hpp"
#include "hsdp/model/layout.hpp"
#include "hsdp/model/rng.hpp"
#include "hsdp/optim/cuda/adamw.hpp"
#include "hsdp/train/cuda/parameters.hpp"
#include "gpt_bench.hpp"

namespace po = boost::program_options;
namespace cuda = hsdp::device::cuda;
using hsdp::bf16_t;
using hsdp::model::GptConfig;
using hsdp::model::ModelLayout;

namespace {

constexpr int kNoDeviceExit = 77;

struct Options {
  GptConfig model = GptConfig::gpt2_124m();
  int batch = 8;
  int seq_len = 1024;
  int steps = 10;
  int warmup = 3;
  double peak_tflops = 0.0;
  int gemm_n = 8192;
  bool json_only = false;
  std::string path = "whole";
  bool activation_checkpointing = false;
};

struct Peak {
  double tflops = 0.0;
  std::string entry;  // the table row used, or why none
};

// Dense bf16 tensor-core peaks (NVIDIA data sheets, without sparsity).
Peak peak_for(const std::string& name, double override_tflops) {
  if (override_tflops > 0) return {override_tflops, "--peak_tflops"};
  const auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("H200")) return {989.0, "H200"};
  if (has("H100") && has("PCIe")) return {756.0, "H100 PCIe"};
  if (has("H100") && !has("NVL")) return {989.0, "H100 SXM"};
  if (has("A100")) return {312.0, "A100"};
  return {0.0, "not in the table (H100 SXM, H100 PCIe, H200, A100): give --peak_tflops"};
}


// The same card's bf16 GEMM rate, measured in the same run as the training steps: D[n, n] = A[n, n] B[n, n]^T
// through hsdp's cuBLASLt path (bf16 inputs and output, fp32 accumulation), 3 warm-up and 10 timed products on
// one stream, mean TFLOP/s. The training step's TFLOP/s divided by it says how close the step comes to what
// this GPU's GEMMs reach, independently of the data-sheet peak.
double measured_gemm_tflops(int n, cudaStream_t stream) {
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

// The whole model on one GPU (GptCuda, hsdp/model/cuda/gpt.hpp, over GptParameters, hsdp/train/cuda/parameters.hpp),
// and the step.
class GpuTrainer {
 public:
  GpuTrainer(const ModelLayout& layout, int B, int T, bool by_unit, bool activation_checkpointing)
      : layout_(layout),
        by_unit_(by_unit),
        gpt_(layout, B, T, stream_, activation_checkpointing),
        params_(layout, 1337, stream_),
        tokens_(gpt_.tokens()),
        targets_(gpt_.tokens()),
        loss_(1) {
    const std::size_t N = gpt_.tokens();
    std::vector<std::int32_t> data(N + 1);
    hsdp::model::Rng rng(7);
    const auto vocab = static_cast<std::uint64_t>(layout.config().vocab_size);
    for (auto& t : data) t = static_cast<std::int32_t>(rng.next_u64() % vocab);
    host_tokens_.assign(data.begin(), data.end() - 1);
    host_targets_.assign(data.begin() + 1, data.end());
    cuda::copy_to_device(tokens_.data(), host_tokens_.data(), N, stream_);
    cuda::copy_to_device(targets_.data(), host_targets_.data(), N, stream_);
    stream_.synchronize();
  }

  cudaStream_t stream() const { return stream_.get(); }

  // Forward, backward and AdamW, all enqueued on the stream; nothing waits for the GPU.
  void step(std::int64_t t) {
    params_.zero_grads(stream_);
    if (by_unit_) {
      units_step();
    } else {
      gpt_.forward(params_.compute(), tokens_.data(), targets_.data(), 1.0f / static_cast<float>(gpt_.tokens()),
                   stream_);
      gpt_.backward(params_.compute(), params_.grads(), tokens_.data(), stream_);
    }
    hsdp::optim::cuda::AdamWValues values;
    values.lr = 3e-4f;
    values.bias_correction1 = hsdp::optim::cuda::adamw_bias_correction(values.beta1, t);
    values.bias_correction2 = hsdp::optim::cuda::adamw_bias_correction(values.beta2, t);
    params_.adamw_update(values, stream_);
  }

  // The mean loss of the last step (waits for the stream: call it outside the timed region).
  double mean_loss() {
    std::vector<float> losses(gpt_.tokens());
    cuda::copy_to_host(losses.data(), gpt_.losses(), losses.size(), stream_);
    stream_.synchronize();
    return std::accumulate(losses.begin(), losses.end(), 0.0) / static_cast<double>(losses.size());
  }

  std::size_t parameters() const { return params_.total(); }

 private:
  // The engine's order of unit calls, each unit's weights and gradients at its offset in the flat buffers.
  void units_step() {
    hsdp::model::UnitModel& m = gpt_;
    const auto w = [&](int u) { return static_cast<const void*>(params_.compute() + gpt_.unit_offset(u)); };
    const auto g = [&](int u) { return params_.grads() + gpt_.unit_offset(u); };
    const int L = layout_.config().n_layer, emb = ModelLayout::embedding_unit(), fin = layout_.final_norm_unit();
    m.forward_embedding(host_tokens_, w(emb));
    for (int l = 0; l < L; ++l) m.forward_block(l, w(ModelLayout::block_unit(l)));
    m.forward_head(host_targets_, w(fin), w(emb), 1.0f, loss_.data());
    m.backward_head(w(fin), w(emb), g(fin), g(emb));
    for (int l = L - 1; l >= 0; --l) m.backward_block(l, w(ModelLayout::block_unit(l)), g(ModelLayout::block_unit(l)));
    m.backward_embedding(g(emb));
  }

  const ModelLayout& layout_;
  bool by_unit_;
  cuda::Stream stream_;
  hsdp::model::cuda::GptCuda<hsdp::bf16_t> gpt_;
  hsdp::train::cuda::GptParameters params_;
  cuda::DeviceBuffer<std::int32_t> tokens_, targets_;
  std::vector<std::int32_t> host_tokens_, host_targets_;
  cuda::DeviceBuffer<double> loss_;
};

Options parse(int argc, char** argv) {
  Options o;
  po::options_description desc("hsdp-bench-train-gpu options");
  // clang-format off
  hsdp::bench::add_model_options(desc, o.model);
  desc.add_options()("help,h", "print this help")
      ("batch", po::value(&o.batch)->default_value(o.batch), "micro-batch B")
      ("seq_len", po::value(&o.seq_len)->default_value(o.seq_len), "sequence length T (<= block_size)")
      ("steps", po::value(&o.steps)->default_value(o.steps), "timed steps")
      ("warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed steps first (plans, caches, clocks)")
      ("peak_tflops", po::value(&o.peak_tflops)->default_value(0.0), "dense bf16 peak for MFU (0: by device name)")
      ("gemm_n", po::value(&o.gemm_n)->default_value(o.gemm_n), "size of the reference bf16 GEMM (n x n x n)")
      ("path", po::value(&o.path)->default_value(o.path),
       "whole: the whole-model calls; units: the unit calls the sharding engine makes")
      ("activation_checkpointing", po::bool_switch(&o.activation_checkpointing),
       "keep only each block's input; recompute the block in backward")
      ("json", po::bool_switch(&o.json_only), "print only the JSON line");
  // clang-format on
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    std::exit(0);
  }
  po::notify(vm);
  o.model.block_size = std::max(o.model.block_size, o.seq_len);
  if (o.steps < 1) hsdp::throw_config("--steps (" + std::to_string(o.steps) + ") must be >= 1");
  if (o.warmup < 0) hsdp::throw_config("--warmup (" + std::to_string(o.warmup) + ") must be >= 0");
  if (o.batch < 1 || o.seq_len < 1) hsdp::throw_config("--batch and --seq_len must be >= 1");
  if (o.gemm_n < 1) hsdp::throw_config("--gemm_n (" + std::to_string(o.gemm_n) + ") must be >= 1");
  if (o.path != "whole" && o.path != "units") hsdp::throw_config("--path (" + o.path + ") must be whole or units");
  return o;
}

int run(const Options& o) {
  std::string reason;
  if (cuda::visible_device_count(&reason) == 0) {
    std::fprintf(stderr, "hsdp-bench-train-gpu: no CUDA device visible (%s); this benchmark needs one GPU\n",
                 reason.c_str());
    return kNoDeviceExit;
  }
  cuda::check(cudaSetDevice(0), "cudaSetDevice(0)");
  const cuda::DeviceInfo device = cuda::current_device_info();
  const Peak peak = peak_for(device.name, o.peak_tflops);
  const ModelLayout layout(o.model);
  GpuTrainer trainer(layout, o.batch, o.seq_len, o.path == "units", o.activation_checkpointing);
  for (int s = 1; s <= o.warmup; ++s) trainer.step(s);
  std::vector<cuda::Event> marks;
  for (int s = 0; s <= o.steps; ++s) marks.emplace_back(cuda::Event::Timing::on);
  marks[0].record(trainer.stream());
  for (int s = 1; s <= o.steps; ++s) {
    trainer.step(o.warmup + s);
    marks[static_cast<std::size_t>(s)].record(trainer.stream());
  }
  marks.back().synchronize();
  std::vector<double> step_ms;
  for (int s = 1; s <= o.steps; ++s) step_ms.push_back(marks[s].elapsed_ms_since(marks[s - 1]));
  const double loss = trainer.mean_loss();
  const double mean_ms = std::accumulate(step_ms.begin(), step_ms.end(), 0.0) / o.steps;
  const double best_ms = *std::min_element(step_ms.begin(), step_ms.end());
  const std::int64_t tokens = static_cast<std::int64_t>(o.batch) * o.seq_len;
  const double flops = hsdp::bench::step_flops(o.model, tokens, o.seq_len);
  const double tflops_mean = flops / (mean_ms * 1e-3) / 1e12;
  const double tflops_best = flops / (best_ms * 1e-3) / 1e12;
  const double tokens_per_s = static_cast<double>(tokens) / (mean_ms * 1e-3);
  const double mfu = peak.tflops > 0 ? tflops_mean / peak.tflops : 0.0;
  std::size_t free_bytes = 0, total_bytes = 0;
  cuda::check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  const std::size_t used_bytes = total_bytes - free_bytes;
  const double gemm_tflops = measured_gemm_tflops(o.gemm_n, trainer.stream());

  hsdp::JsonLine json;
  json.add("bench", "train_gpu")
      .add("device", device.name)
      .add("n_layer", o.model.n_layer)
      .add("n_embd", o.model.n_embd)
      .add("n_head", o.model.n_head)
      .add("vocab_size", o.model.vocab_size)
      .add("padded_vocab_size", o.model.padded_vocab_size)
      .add("params", static_cast<std::uint64_t>(trainer.parameters()))
      .add("batch", o.batch)
      .add("seq_len", o.seq_len)
      .add("steps", o.steps)
      .add("path", o.path)
      .add("activation_checkpointing", o.activation_checkpointing)
      .add("device_memory_bytes", static_cast<std::uint64_t>(used_bytes))
      .add("loss", loss)
      .add("step_ms", mean_ms)
      .add("step_ms_best", best_ms)
      .add("tokens_per_s", tokens_per_s)
      .add("tflops", tflops_mean)
      .add("tflops_best", tflops_best)
      .add("peak_tflops", peak.tflops)
      .add("peak_entry", peak.entry)
      .add("mfu", mfu)
      .add("gemm_n", o.gemm_n)
      .add("gemm_tflops", gemm_tflops)
      .add("ratio_to_gemm", tflops_mean / gemm_tflops);
  if (!o.json_only) {
    std::printf("hsdp-bench-train-gpu: GPT L=%d C=%d H=%d V=%d (Vp=%d), %zu params, B=%d T=%d on %s\n", o.model.n_layer,
                o.model.n_embd, o.model.n_head, o.model.vocab_size, o.model.padded_vocab_size, trainer.parameters(),
                o.batch, o.seq_len, device.name.c_str());
    std::printf("bf16 GEMMs (cuBLASLt, fp32 accumulation), fp32 grads and AdamW; %d warm-up + %d timed steps; %s calls%s\n",
                o.warmup, o.steps, o.path.c_str(), o.activation_checkpointing ? ", activation checkpointing" : "");
    std::printf("FLOPs/step = tokens * (6 * P_matmul + 6 * L * T * C) = %.2f TFLOP, P_matmul = 12 L C^2 + V C\n",
                flops / 1e12);
    std::printf("%-30s %12s\n", "metric", "value");
    std::printf("%-30s %12.2f\n", "step ms (mean)", mean_ms);
    std::printf("%-30s %12.2f\n", "step ms (best)", best_ms);
    std::printf("%-30s %12.0f\n", "tokens/s (mean)", tokens_per_s);
    std::printf("%-30s %12.1f\n", "TFLOP/s (mean)", tflops_mean);
    if (peak.tflops > 0) {
      std::printf("%-30s %12.1f  (%s, dense bf16)\n", "peak TFLOP/s", peak.tflops, peak.entry.c_str());
      std::printf("%-30s %12.3f\n", "MFU (mean step)", mfu);
    } else {
      std::printf("%-30s %12s  (%s: %s)\n", "MFU", "n/a", device.name.c_str(), peak.entry.c_str());
    }
    std::printf("%-30s %12.1f  (bf16 GEMM %dx%dx%d, same run)\n", "GEMM TFLOP/s (measured)", gemm_tflops, o.gemm_n,
                o.gemm_n, o.gemm_n);
    std::printf("%-30s %12.3f\n", "step / GEMM TFLOP/s", tflops_mean / gemm_tflops);
    std::printf("%-30s %12.2f\n", "GPU memory in use (GiB)", static_cast<double>(used_bytes) / (1 << 30));
    std::printf("%-30s %12.4f\n", "loss (last step)", loss);
  }
  std::printf("%s\n", json.str().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const hsdp::Error& e) {
    std::fprintf(stderr, "hsdp-bench-train-gpu: %s\n", e.what());
    return e.exit_code();
  } catch (const po::error& e) {
    std::fprintf(stderr, "hsdp-bench-train-gpu: %s (see --help)\n", e.what());
    return hsdp::kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hsdp-bench-train-gpu: %s\n", e.what());
    return hsdp::kExitInternal;
  }
}
