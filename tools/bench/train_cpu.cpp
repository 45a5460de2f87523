// hsdp-bench-train-cpu: single-rank CPU training throughput of a GPT (GPT-2 124M by default).
// One warm-up step, then --steps timed steps of forward + backward + an AdamW-like update of every
// parameter. In the same run it times OpenBLAS SGEMM on the model's largest GEMM (the LM head,
// (B*T) x C times C x Vp) and reports the step's achieved GFLOP/s as a fraction of it.
//
// FLOPs per step: hsdp::bench::step_flops (gpt_bench.hpp), the formula hsdp-bench-train-gpu uses too.
#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "hsdp/core/buffer.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/json.hpp"
#include "hsdp/core/memory.hpp"
#include "hsdp/core/timer.hpp"
#include "hsdp/device/blas_info.hpp"
#include "hsdp/device/gemm.hpp"
#include "hsdp/device/parallel.hpp"
#include "hsdp/device/threads.hpp"
#include "hsdp/model/gpt.hpp"
#include "hsdp/model/rng.hpp"
#include "hsdp/model/unit_buffers.hpp"
#include "gpt_bench.hpp"

namespace po = boost::program_options;
using hsdp::model::GptConfig;
using hsdp::model::ModelLayout;
using hsdp::model::UnitBuffers;

namespace {

struct Options {
  GptConfig model = GptConfig::gpt2_124m();
  int batch = 4;
  int seq_len = 64;
  int steps = 10;
  int threads = 2;
  bool checkpointing = false;
  bool fused_update = true;
  bool json_only = false;
};

// An AdamW-like update (bias-corrected moments, decoupled weight decay on every element for simplicity)
// that also zeroes the gradient in the same pass, so the next step's backward can accumulate into it.
void update(std::span<float> p, std::span<float> g, std::span<float> m, std::span<float> v, int step) {
  constexpr float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  const float c1 = 1.0f / (1.0f - std::pow(beta1, static_cast<float>(step)));
  const float c2 = 1.0f / (1.0f - std::pow(beta2, static_cast<float>(step)));
  hsdp::device::parallel_blocks(static_cast<std::int64_t>(p.size()), [&](std::int64_t begin, std::int64_t end) {
    float* pp = p.data() + begin;
    float* gp = g.data() + begin;
    float* mp = m.data() + begin;
    float* vp = v.data() + begin;
    const int n = static_cast<int>(end - begin);
#pragma omp simd
    for (int i = 0; i < n; ++i) {
      const float gi = gp[i];
      const float mi = beta1 * mp[i] + (1.0f - beta1) * gi;
      const float vi = beta2 * vp[i] + (1.0f - beta2) * gi * gi;
      mp[i] = mi;
      vp[i] = vi;
      pp[i] -= lr * (mi * c1 / (std::sqrt(vi * c2) + eps) + wd * pp[i]);
      gp[i] = 0.0f;
    }
  });
}


const char* fused_label(bool fused) { return fused ? "  update ms (per unit, in backward)" : "  update ms (after backward)"; }

// SGEMM GFLOP/s on the LM head's shape, logits[BT, Vp] = x[BT, C] @ wte[Vp, C]^T: either one OpenBLAS
// call on its own threads (blas_gemm) or hsdp's gemm (single-threaded OpenBLAS calls on OpenMP threads).
class SgemmProbe {
 public:
  SgemmProbe(int m, int n, int k)
      : m_(m), n_(n), k_(k), a_(static_cast<std::size_t>(m) * k), b_(static_cast<std::size_t>(n) * k),
        c_(static_cast<std::size_t>(m) * n) {
    for (std::size_t i = 0; i < a_.size(); ++i) a_[i] = 0.001f * static_cast<float>(i % 97);
    for (std::size_t i = 0; i < b_.size(); ++i) b_[i] = 0.001f * static_cast<float>(i % 89);
  }
  double gflops(bool openblas_threads) {
    using hsdp::device::Op;
    const auto call = openblas_threads ? hsdp::device::blas_gemm<float> : hsdp::device::gemm<float>;
    hsdp::Stopwatch w;
    call(Op::none, Op::transpose, m_, n_, k_, 1.0f, a_.data(), k_, b_.data(), k_, 0.0f, c_.data(), n_);
    return hsdp::device::gemm_flops(m_, n_, k_) / w.seconds() / 1e9;
  }

 private:
  int m_, n_, k_;
  hsdp::Buffer<float> a_, b_, c_;
};

Options parse(int argc, char** argv) {
  Options o;
  po::options_description desc("hsdp-bench-train-cpu options");
  hsdp::bench::add_model_options(desc, o.model);
  desc.add_options()("help,h", "print this help")
      ("batch", po::value(&o.batch)->default_value(o.batch), "micro-batch B")
      ("seq_len", po::value(&o.seq_len)->default_value(o.seq_len), "sequence length T")
      ("steps", po::value(&o.steps)->default_value(o.steps), "timed steps (after one warm-up step)")
      ("threads", po::value(&o.threads)->default_value(o.threads), "OpenBLAS and OpenMP threads")
      ("update_after_backward", po::bool_switch(), "update all units after the backward instead of each unit "
       "as soon as its gradient is complete")
      ("checkpointing", po::bool_switch(&o.checkpointing), "activation checkpointing per block")
      ("json", po::bool_switch(&o.json_only), "print only the JSON line");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    std::exit(0);
  }
  po::notify(vm);
  o.fused_update = !vm["update_after_backward"].as<bool>();
  if (o.steps < 1) hsdp::throw_config("--steps (" + std::to_string(o.steps) + ") must be >= 1");
  if (o.threads < 1) hsdp::throw_config("--threads (" + std::to_string(o.threads) + ") must be >= 1");
  return o;
}

struct StepTimes {
  double forward_ms = 0, backward_ms = 0, update_ms = 0, total_ms = 0;
};

// One training step. With fused_update each unit is updated as soon as its gradient is complete (after
// backward_head, each backward_block, backward_embedding), while the unit's parameters and gradients are
// still in cache: the order an FSDP engine steps a unit's shard. Otherwise all units after the backward.
struct Trainer {
  const ModelLayout& layout;
  hsdp::model::Gpt<float>& model;
  UnitBuffers<float>& params;
  UnitBuffers<float>& grads;
  UnitBuffers<float>& moment1;
  UnitBuffers<float>& moment2;
  bool fused_update;

  StepTimes step(std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets, int step_number,
                 float& loss) {
    StepTimes t;
    hsdp::Stopwatch total, phase;
    loss = model.forward(inputs, targets, params.const_pointers());
    t.forward_ms = phase.milliseconds();
    phase.restart();
    const auto update_unit = [&](int u) {
      hsdp::Stopwatch w;
      update(params.unit(u), grads.unit(u), moment1.unit(u), moment2.unit(u), step_number);
      t.update_ms += w.milliseconds();
    };
    const auto p = params.const_pointers();
    const auto g = grads.pointers();
    const int emb = ModelLayout::embedding_unit(), fin = layout.final_norm_unit();
    model.backward_head(p[fin], p[emb], g[fin], g[emb], 1.0f);
    if (fused_update) update_unit(fin);
    for (int i = layout.config().n_layer - 1; i >= 0; --i) {
      const int u = ModelLayout::block_unit(i);
      model.backward_block(i, p[u], g[u]);
      if (fused_update) update_unit(u);
    }
    model.backward_embedding(g[emb]);
    if (fused_update) {
      update_unit(emb);
    } else {
      for (int u = 0; u < layout.num_units(); ++u) update_unit(u);
    }
    t.total_ms = total.milliseconds();
    t.backward_ms = t.total_ms - t.forward_ms - t.update_ms;
    return t;
  }
};

// The 1-minute load average: on a shared node other processes' threads compete for the same cores, and
// the figures of a loaded machine are not those of an idle one.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  in >> load;
  return load;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int run(const Options& o) {
  hsdp::device::ThreadCountScope threads(o.threads);
  const ModelLayout layout(o.model);
  hsdp::MemoryAccountant accountant;
  UnitBuffers<float> params(layout, &accountant, hsdp::MemCategory::params);
  UnitBuffers<float> grads(layout, &accountant, hsdp::MemCategory::grads);
  UnitBuffers<float> moment1(layout, &accountant, hsdp::MemCategory::optimizer);
  UnitBuffers<float> moment2(layout, &accountant, hsdp::MemCategory::optimizer);
  params.init(layout, 1337);
  hsdp::model::Gpt<float> model(layout, o.batch, o.seq_len, accountant, o.checkpointing);
  Trainer trainer{layout, model, params, grads, moment1, moment2, o.fused_update};

  const std::size_t tokens = static_cast<std::size_t>(o.batch) * o.seq_len;
  std::vector<std::int32_t> data(tokens + 1);
  hsdp::model::Rng rng(7);
  for (auto& t : data) t = static_cast<std::int32_t>(rng.next_u64() % static_cast<std::uint64_t>(o.model.vocab_size));
  const std::span<const std::int32_t> inputs(data.data(), tokens), targets(data.data() + 1, tokens);

  // The SGEMM reference runs between the steps, so both see the same machine (on a shared node the load
  // of other processes comes and goes).
  const int m = static_cast<int>(tokens), n = o.model.padded_vocab_size, k = o.model.n_embd;
  SgemmProbe probe(m, n, k);
  const double load_before = load_average();
  StepTimes mean;
  std::vector<double> step_ms, sgemm_openblas, sgemm_panels;
  float loss = 0;
  for (int step = 0; step <= o.steps; ++step) {  // step 0 is the warm-up
    const StepTimes t = trainer.step(inputs, targets, step + 1, loss);
    const double panels = probe.gflops(false);
    const double blas = probe.gflops(true);
    // OpenBLAS's workers spin for up to ~0.1 s after a call; let them go to sleep before the next step. With one
    // thread there are none, and the steps run back to back: copies started together (one per rank, as
    // tools/bench/bandwidth.sh calibrates) then share the cores as training ranks do (with the pause, 4 copies on 2
    // cores overlapped ~16% of the time and each measured a core of its own: 38 ms a step against 84 in training).
    if (o.threads > 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (step == 0) continue;
    mean.forward_ms += t.forward_ms / o.steps;
    mean.backward_ms += t.backward_ms / o.steps;
    mean.update_ms += t.update_ms / o.steps;
    mean.total_ms += t.total_ms / o.steps;
    step_ms.push_back(t.total_ms);
    sgemm_openblas.push_back(blas);
    sgemm_panels.push_back(panels);
  }
  const double load_after = load_average();
  const double best_step_ms = *std::min_element(step_ms.begin(), step_ms.end());
  const double sgemm_openblas_best = *std::max_element(sgemm_openblas.begin(), sgemm_openblas.end());
  const double sgemm_panels_best = *std::max_element(sgemm_panels.begin(), sgemm_panels.end());
  // The reference is the faster of the two ways to run the same SGEMM, so the ratio never flatters.
  const double sgemm_best = std::max(sgemm_openblas_best, sgemm_panels_best);
  const double sgemm_median = std::max(median(sgemm_openblas), median(sgemm_panels));

  const double flops = hsdp::bench::step_flops(o.model, static_cast<std::int64_t>(tokens), o.seq_len);
  const double achieved_mean = flops / (mean.total_ms * 1e-3) / 1e9;
  const double achieved_best = flops / (best_step_ms * 1e-3) / 1e9;
  const double tokens_per_s = static_cast<double>(tokens) / (mean.total_ms * 1e-3);
  const double ratio_best = achieved_best / sgemm_best;
  const double ratio_mean = achieved_mean / sgemm_median;

  hsdp::JsonLine json;
  json.add("bench", "train_cpu");
  hsdp::bench::add_model_fields(json, o.model, layout.total_numel(), o.batch, o.seq_len)
      .add("threads", o.threads)
      .add("checkpointing", o.checkpointing)
      .add("fused_update", o.fused_update)
      .add("steps", o.steps)
      .add("loss", static_cast<double>(loss))
      .add("step_ms", mean.total_ms)
      .add("step_ms_best", best_step_ms)
      .add("forward_ms", mean.forward_ms)
      .add("backward_ms", mean.backward_ms)
      .add("update_ms", mean.update_ms)
      .add("tokens_per_s", tokens_per_s)
      .add("gflop_per_step", flops / 1e9)
      .add("achieved_gflops", achieved_mean)
      .add("achieved_gflops_best", achieved_best)
      .add("blas_core", hsdp::device::blas_core_name())
      .add("sgemm_openblas_gflops_best", sgemm_openblas_best)
      .add("sgemm_panels_gflops_best", sgemm_panels_best)
      .add("sgemm_gflops_best", sgemm_best)
      .add("sgemm_gflops_median", sgemm_median)
      .add("ratio", ratio_best)
      .add("ratio_mean", ratio_mean)
      .add("activations_bytes", accountant.peak(hsdp::MemCategory::activations))
      .add("cores", hsdp::device::available_cores())
      .add("load_average_before", load_before)
      .add("load_average_after", load_after);
  if (!o.json_only) {
    std::printf("hsdp-bench-train-cpu: GPT L=%d C=%d H=%d V=%d (Vp=%d), %zu params, B=%d T=%d, %d threads%s\n",
                o.model.n_layer, o.model.n_embd, o.model.n_head, o.model.vocab_size, o.model.padded_vocab_size,
                layout.total_numel(), o.batch, o.seq_len, o.threads, o.checkpointing ? ", checkpointing" : "");
    std::printf("FLOPs/step = tokens * (6 * P_matmul + 6 * L * T * C) = %.2f GFLOP, P_matmul = 12 L C^2 + V C\n",
                flops / 1e9);
    std::printf("SGEMM reference: the LM head shape %d x %d x %d (M x N x K) after every step; OpenBLAS kernels %s;\n"
                "the faster of one OpenBLAS call on its own threads and hsdp's gemm (panels on the OpenMP threads).\n",
                m, n, k, hsdp::device::blas_core_name().c_str());
    std::printf("%-34s %12s\n", "metric", "value");
    std::printf("%-34s %12.1f\n", "step ms (mean of timed steps)", mean.total_ms);
    std::printf("%-34s %12.1f\n", "  forward ms", mean.forward_ms);
    std::printf("%-34s %12.1f\n", "  backward ms", mean.backward_ms);
    std::printf("%-34s %12.1f\n", fused_label(o.fused_update), mean.update_ms);
    std::printf("%-34s %12.1f\n", "step ms (best)", best_step_ms);
    std::printf("%-34s %12.0f\n", "tokens/s (mean)", tokens_per_s);
    std::printf("%-34s %12.1f\n", "achieved GFLOP/s (mean step)", achieved_mean);
    std::printf("%-34s %12.1f\n", "achieved GFLOP/s (best step)", achieved_best);
    std::printf("%-34s %12.1f\n", "SGEMM GFLOP/s OpenBLAS (best)", sgemm_openblas_best);
    std::printf("%-34s %12.1f\n", "SGEMM GFLOP/s hsdp gemm (best)", sgemm_panels_best);
    std::printf("%-34s %12.1f\n", "SGEMM GFLOP/s (median)", sgemm_median);
    std::printf("%-34s %12.3f\n", "ratio best step / best SGEMM", ratio_best);
    std::printf("%-34s %12.3f\n", "ratio mean step / median SGEMM", ratio_mean);
    std::printf("%-34s %12.4f\n", "loss (last step)", static_cast<double>(loss));
    std::printf("%-34s %5.2f / %5.2f on %d cores\n", "load average before / after", load_before, load_after,
                hsdp::device::available_cores());
  }
  std::printf("%s\n", json.str().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  hsdp::device::reexec_with_blas_coretype_if_needed(argv);
  try {
    return run(parse(argc, argv));
  } catch (const hsdp::Error& e) {
    std::fprintf(stderr, "hsdp-bench-train-cpu: %s\n", e.what());
    return e.exit_code();
  } catch (const po::error& e) {
    std::fprintf(stderr, "hsdp-bench-train-cpu: %s (see --help)\n", e.what());
    return hsdp::kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hsdp-bench-train-cpu: %s\n", e.what());
    return hsdp::kExitInternal;
  }
}
