// Attention and the cuBLASLt GEMM layers against the CPU reference (hsdp::model layers in float).
// Tolerances as in layers_gpu_test.cpp: float {1e-4, 1e-5} (fp32 sums in another order; the float GEMMs run
// true fp32, no TF32), bf16 {1e-2, 1e-2} (outputs stored in bf16, fp32 accumulation).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <vector>

#include "gpu_test_util.hpp"
#include "hsdp/device/cuda/blas.hpp"
#include "hsdp/model/cuda/layers.hpp"
#include "hsdp/model/layers.hpp"
#include "hsdp/model/llama_layers.hpp"

namespace hsdp::gpu_testing {
namespace {

namespace mc = hsdp::model::cuda;

constexpr Tolerance kF32{1e-4, 1e-5};
constexpr Tolerance kBf16{1e-2, 1e-2};

template <typename T>
Tolerance tol() {
  return std::is_same_v<T, float> ? kF32 : kBf16;
}

template <typename T>
std::vector<float> inputs(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  const auto x = random_floats(n, seed, lo, hi);
  return std::is_same_v<T, float> ? x : rounded_to_bf16(x);
}

template <typename T>
class AttentionBlasGpu : public GpuTest {};
using StorageTypes = ::testing::Types<float, bf16_t>;
TYPED_TEST_SUITE(AttentionBlasGpu, StorageTypes);

// T = 67 is not a multiple of the softmax kernels' 8-row blocks nor of the warp; head sizes 64 and 48 (not a multiple
// of the warp width; its batch stride in bytes is not a multiple of 64).
TYPED_TEST(AttentionBlasGpu, Attention_ForwardAndBackward_MatchCpu) {
  using T = TypeParam;
  struct Shape {
    int B, T_, C, NH;
  };
  for (const Shape s : {Shape{2, 67, 128, 2}, Shape{1, 40, 96, 2}}) {
    const std::size_t qkv_n = static_cast<std::size_t>(s.B) * s.T_ * 3 * s.C;
    const std::size_t out_n = static_cast<std::size_t>(s.B) * s.T_ * s.C;
    const std::size_t att_n = static_cast<std::size_t>(s.B) * s.NH * s.T_ * s.T_;
    const auto qkv = inputs<T>(qkv_n, 50, -2.0f, 2.0f), dout = inputs<T>(out_n, 51);
    std::vector<float> out(out_n), att(att_n);
    model::attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T_, s.C, s.NH);

    auto d_qkv = this->upload(as<T>(qkv)), d_dout = this->upload(as<T>(dout));
    cuda::DeviceBuffer<T> d_out(out_n), d_att(att_n);
    cuda::DeviceBuffer<std::uint8_t> scratch(mc::attention_scratch_bytes(s.T_, s.NH));
    cuda::BlasLt blas;
    auto d_dqkv = this->upload(as<T>(std::vector<float>(qkv_n, 0.0f)));
    mc::attention_forward(blas, d_out.data(), d_att.data(), d_qkv.data(), scratch.data(), s.B, s.T_, s.C, s.NH,
                          this->stream());
    const auto got_att = floats(this->download(d_att));
    EXPECT_TRUE(close(floats(this->download(d_out)), out, tol<T>())) << "out, T=" << s.T_;
    EXPECT_TRUE(close(got_att, att, tol<T>())) << "att, T=" << s.T_;

    // The backward reference takes the GPU's probabilities, so a bf16 run compares only the backward's own roundings.
    std::vector<float> dqkv(qkv_n, 0.0f), cpu_scratch(static_cast<std::size_t>(s.B) * s.NH * s.T_);
    model::attention_backward(dqkv.data(), cpu_scratch.data(), dout.data(), qkv.data(), got_att.data(), s.B, s.T_, s.C,
                              s.NH);
    mc::attention_backward(blas, d_dqkv.data(), scratch.data(), d_dout.data(), d_qkv.data(), d_att.data(), s.B, s.T_,
                           s.C, s.NH, this->stream());
    const auto got_dqkv = this->download(d_dqkv);
    EXPECT_TRUE(close(floats(got_dqkv), dqkv, tol<T>())) << "dqkv, T=" << s.T_;

    // Deterministic: the same inputs give the same bits.
    auto d_again = this->upload(as<T>(std::vector<float>(qkv_n, 0.0f)));
    mc::attention_backward(blas, d_again.data(), scratch.data(), d_dout.data(), d_qkv.data(), d_att.data(), s.B, s.T_,
                           s.C, s.NH, this->stream());
    const auto again = this->download(d_again);
    EXPECT_EQ(0, std::memcmp(again.data(), got_dqkv.data(), again.size() * sizeof(T))) << "not deterministic";
  }
}

// Grouped-query attention over q | k | v rows against the CPU's gqa_attention on separate buffers: 4 query heads over
// 2 and over 1 key/value heads (T = 67: not a multiple of the softmax kernels' blocks), head size 24 (not a multiple
// of the warp); and 2 over 2, which is GPT-2's attention_forward on the same rows, bit for bit.
TYPED_TEST(AttentionBlasGpu, GroupedQueryAttention_ForwardAndBackward_MatchCpu) {
  using T = TypeParam;
  struct Shape {
    int B, T_, NH, NKV, hs;
  };
  for (const Shape s : {Shape{2, 67, 4, 2, 24}, Shape{1, 40, 4, 1, 24}, Shape{2, 33, 2, 2, 32}}) {
    const int C = s.NH * s.hs, K = s.NKV * s.hs, RS = C + 2 * K, N = s.B * s.T_;
    const std::size_t att_n = static_cast<std::size_t>(s.B) * s.NH * s.T_ * s.T_;
    const auto rows = inputs<T>(static_cast<std::size_t>(N) * RS, 60, -2.0f, 2.0f);
    const auto dout = inputs<T>(static_cast<std::size_t>(N) * C, 61);
    const auto [q, k, v] = split_qkv(rows, N, C, K);
    std::vector<float> out(static_cast<std::size_t>(N) * C), att(att_n);
    model::gqa_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), s.B, s.T_, s.NH, s.NKV, s.hs);

    auto d_rows = this->upload(as<T>(rows)), d_dout = this->upload(as<T>(dout));
    cuda::DeviceBuffer<T> d_out(out.size()), d_att(att_n);
    cuda::DeviceBuffer<std::uint8_t> scratch(mc::attention_scratch_bytes(s.T_, s.NH));
    cuda::BlasLt blas;
    mc::gqa_attention_forward(blas, d_out.data(), d_att.data(), d_rows.data(), scratch.data(), s.B, s.T_, s.NH, s.NKV,
                              s.hs, this->stream());
    const auto got_out = this->download(d_out);
    const auto got_att = floats(this->download(d_att));
    EXPECT_TRUE(close(floats(got_out), out, tol<T>())) << "out, NKV=" << s.NKV;
    EXPECT_TRUE(close(got_att, att, tol<T>())) << "att, NKV=" << s.NKV;

    // The backward reference takes the GPU's probabilities (as the GPT-2 test above).
    std::vector<float> dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
    model::gqa_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                                  got_att.data(), s.B, s.T_, s.NH, s.NKV, s.hs);
    auto d_drows = this->upload(as<T>(std::vector<float>(rows.size(), 0.0f)));
    mc::gqa_attention_backward(blas, d_drows.data(), scratch.data(), d_dout.data(), d_rows.data(), d_att.data(), s.B,
                               s.T_, s.NH, s.NKV, s.hs, this->stream());
    const auto got = floats(this->download(d_drows));
    const auto [got_dq, got_dk, got_dv] = split_qkv(got, N, C, K);
    EXPECT_TRUE(close(got_dq, dq, tol<T>())) << "dq, NKV=" << s.NKV;
    EXPECT_TRUE(close(got_dk, dk, tol<T>())) << "dk, NKV=" << s.NKV;
    EXPECT_TRUE(close(got_dv, dv, tol<T>())) << "dv, NKV=" << s.NKV;

    if (s.NKV == s.NH) {  // multi-head: GPT-2's entry point on the same q | k | v rows gives the same bits
      cuda::DeviceBuffer<T> d_out2(out.size()), d_att2(att_n);
      mc::attention_forward(blas, d_out2.data(), d_att2.data(), d_rows.data(), scratch.data(), s.B, s.T_, C, s.NH,
                            this->stream());
      const auto out2 = this->download(d_out2);
      EXPECT_EQ(0, std::memcmp(out2.data(), got_out.data(), out2.size() * sizeof(T))) << "GPT-2 entry point differs";
    }
  }
}

// The fused kernels against the CPU's attention from the same q | k | v rows: head sizes 64 and 128 (the GPU models'),
// 24 (not a multiple of the warp: lanes own 1 dim, some none) and 100; T = 67 and 70 cross the kernels' 32-row tiles
// and 8-row blocks, so the causal mask is checked at their edges; grouped-query (4 over 2, 4 over 1, 8 over 2: a
// key/value head's gradient summed over four query heads) and multi-head. bf16 with head sizes 64, 128 and 32 runs the
// tensor-core kernels (64-row tiles: T = 67 and 70 cross one edge, 150 two, its last block's diagonal tile holding
// only 22 rows, 300 four: a row's running max and sum rescaled over five key tiles); 24 and 100 the CUDA-core ones.
// lse against log sum exp of the CPU's scores. The backward twice: the same bits (no atomics).
TYPED_TEST(AttentionBlasGpu, FusedAttention_ForwardAndBackward_MatchCpu_Deterministic) {
  using T = TypeParam;
  struct Shape {
    int B, T_, NH, NKV, hs;
  };
  for (const Shape s : {Shape{2, 67, 2, 2, 64}, Shape{1, 70, 2, 1, 128}, Shape{2, 67, 4, 2, 24},
                        Shape{1, 40, 4, 4, 100}, Shape{1, 150, 4, 2, 32}, Shape{1, 300, 8, 2, 64}}) {
    ASSERT_TRUE(mc::fused_attention_supports(s.hs));
    const int C = s.NH * s.hs, K = s.NKV * s.hs, RS = C + 2 * K, N = s.B * s.T_;
    const auto rows = inputs<T>(static_cast<std::size_t>(N) * RS, 70, -2.0f, 2.0f);
    const auto dout = inputs<T>(static_cast<std::size_t>(N) * C, 71);
    const auto [q, k, v] = split_qkv(rows, N, C, K);
    std::vector<float> out(static_cast<std::size_t>(N) * C), att(static_cast<std::size_t>(s.B) * s.NH * s.T_ * s.T_);
    model::gqa_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), s.B, s.T_, s.NH, s.NKV, s.hs);
    // lse[b, h, t] = log sum_{j <= t} exp(q_t . k_j / sqrt(hs)), in double.
    std::vector<float> lse(static_cast<std::size_t>(s.B) * s.NH * s.T_);
    for (int b = 0; b < s.B; ++b) {
      for (int h = 0; h < s.NH; ++h) {
        const int kvh = h / (s.NH / s.NKV);
        for (int t = 0; t < s.T_; ++t) {
          std::vector<double> sc;
          for (int j = 0; j <= t; ++j) {
            double dot = 0;
            for (int d = 0; d < s.hs; ++d)
              dot += static_cast<double>(q[(static_cast<std::size_t>(b) * s.T_ + t) * C + h * s.hs + d]) *
                     k[(static_cast<std::size_t>(b) * s.T_ + j) * K + kvh * s.hs + d];
            sc.push_back(dot / std::sqrt(static_cast<double>(s.hs)));
          }
          const double top = *std::max_element(sc.begin(), sc.end());
          double sum = 0;
          for (const double x : sc) sum += std::exp(x - top);
          lse[(static_cast<std::size_t>(b) * s.NH + h) * s.T_ + t] = static_cast<float>(top + std::log(sum));
        }
      }
    }
    auto d_rows = this->upload(as<T>(rows)), d_dout = this->upload(as<T>(dout));
    cuda::DeviceBuffer<T> d_out(out.size());
    cuda::DeviceBuffer<float> d_lse(lse.size());
    cuda::DeviceBuffer<std::uint8_t> scratch(mc::fused_attention_scratch_bytes(s.B, s.T_, s.NH));
    mc::fused_attention_forward(d_out.data(), d_lse.data(), d_rows.data(), s.B, s.T_, s.NH, s.NKV, s.hs,
                                this->stream());
    const auto got_out = this->download(d_out);
    // On a failure, where: by the tensor-core kernels' 64-row tiles and by head.
    const auto where = [&](const std::vector<float>& got, const std::vector<float>& want, int width) {
      return where_out_of_tolerance(got, want, tol<T>(), s.T_, width, 64, s.hs);
    };
    EXPECT_TRUE(close(floats(got_out), out, tol<T>()))
        << "out, hs=" << s.hs << " NKV=" << s.NKV << where(floats(got_out), out, C);
    EXPECT_TRUE(close(this->download(d_lse), lse, kF32)) << "lse, hs=" << s.hs;

    // The backward reference: the CPU's from its own probabilities, with the GPU's output for D = dO . O only
    // through the algebra (the CPU needs none); bf16 compares the GPU's roundings of q, k, v, O, dO.
    std::vector<float> dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
    model::gqa_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                                  att.data(), s.B, s.T_, s.NH, s.NKV, s.hs);
    // Pass 0 adds onto zeros; pass 1 writes (Grad::write) over a buffer full of other values: the same bits, so the
    // kernels repeat themselves and the write covers every element of q | k | v.
    std::vector<T> first;
    for (int pass = 0; pass < 2; ++pass) {
      auto d_drows = this->upload(as<T>(pass == 0 ? std::vector<float>(rows.size(), 0.0f) : rows));
      mc::fused_attention_backward(d_drows.data(), scratch.data(), d_dout.data(), d_out.data(), d_rows.data(),
                                   d_lse.data(), s.B, s.T_, s.NH, s.NKV, s.hs, this->stream(),
                                   pass == 0 ? mc::Grad::add : mc::Grad::write);
      const auto raw = this->download(d_drows);
      if (pass == 1) {
        EXPECT_EQ(0, std::memcmp(raw.data(), first.data(), raw.size() * sizeof(T)))
            << "Grad::write over other values != Grad::add onto zeros (or not deterministic)";
        break;
      }
      first = raw;
      const auto got = floats(raw);
      const auto [got_dq, got_dk, got_dv] = split_qkv(got, N, C, K);
      EXPECT_TRUE(close(got_dq, dq, tol<T>())) << "dq, hs=" << s.hs << " NKV=" << s.NKV << where(got_dq, dq, C);
      EXPECT_TRUE(close(got_dk, dk, tol<T>())) << "dk, hs=" << s.hs << " NKV=" << s.NKV << where(got_dk, dk, K);
      EXPECT_TRUE(close(got_dv, dv, tol<T>())) << "dv, hs=" << s.hs << " NKV=" << s.NKV << where(got_dv, dv, K);
    }
  }
}

// The map of a failure that the fused attention's test prints, on a made-up tensor (no GPU needed): 2 sequences of 5
// rows of 6 columns, groups of 3 columns, tiles of 2 rows. Out of tolerance: (b 0, t 0, column 0) in (0, 0); (b 0,
// t 4, column 5) and (b 1, t 4, column 4) in (2, 1); a NaN at (b 1, t 2, column 1) in (1, 0); most first.
TEST(GpuTestUtil, WhereOutOfTolerance_CountsByRowTileAndColumnGroup) {
  std::vector<float> want(2 * 5 * 6, 1.0f);
  std::vector<float> got = want;
  const auto at = [](int b, int t, int c) { return static_cast<std::size_t>((b * 5 + t) * 6 + c); };
  got[at(0, 0, 0)] = 2.0f;
  got[at(0, 4, 5)] = 0.0f;
  got[at(1, 4, 4)] = 1.5f;
  got[at(1, 2, 1)] = std::nanf("");
  got[at(1, 3, 2)] = 1.0f + 1e-6f;  // within {1e-4, 1e-5}
  EXPECT_EQ(where_out_of_tolerance(got, want, kF32, 5, 6, 2, 3),
            "; out of tolerance by (2-row tile of t, 3-column group): (2, 1): 2 (0, 0): 1 (1, 0): 1");
  EXPECT_EQ(where_out_of_tolerance(want, want, kF32, 5, 6, 2, 3), "");
}

TYPED_TEST(AttentionBlasGpu, Matmul_ForwardAndBackward_MatchCpu_AndAccumulate) {
  using T = TypeParam;
  const int N = 40, IC = 96, OC = 72;
  const auto inp = inputs<T>(N * IC, 60), w = inputs<T>(OC * IC, 61), bias = inputs<T>(OC, 62);
  const auto dout = inputs<T>(N * OC, 63);
  const auto dinp_start = inputs<T>(N * IC, 64);  // backward adds to what is there
  const auto dw_start = random_floats(OC * IC, 65), db_start = random_floats(OC, 66);
  std::vector<float> out(N * OC), dinp = dinp_start, dw = dw_start, db = db_start;
  model::matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, IC, OC);
  model::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC, OC);

  cuda::BlasLt blas;
  auto d_inp = this->upload(as<T>(inp)), d_w = this->upload(as<T>(w)), d_bias = this->upload(as<T>(bias));
  auto d_dout = this->upload(as<T>(dout)), d_dinp = this->upload(as<T>(dinp_start));
  auto d_dw = this->upload(dw_start), d_db = this->upload(db_start);
  cuda::DeviceBuffer<T> d_out(N * OC), d_out_nobias(N * OC);
  cuda::DeviceBuffer<float> scratch(mc::column_sum_scratch_floats(OC, 1));
  mc::matmul_forward(blas, d_out.data(), d_inp.data(), d_w.data(), d_bias.data(), N, IC, OC, this->stream());
  mc::matmul_forward(blas, d_out_nobias.data(), d_inp.data(), d_w.data(), static_cast<const T*>(nullptr), N, IC, OC,
                     this->stream());
  mc::matmul_backward(blas, d_dinp.data(), d_dw.data(), d_db.data(), scratch.data(), d_dout.data(), d_inp.data(),
                      d_w.data(), N, IC, OC, this->stream());
  EXPECT_TRUE(close(floats(this->download(d_out)), out, tol<T>())) << "out";
  std::vector<float> out_nobias(N * OC);
  model::matmul_forward(out_nobias.data(), inp.data(), w.data(), static_cast<const float*>(nullptr), N, IC, OC);
  EXPECT_TRUE(close(floats(this->download(d_out_nobias)), out_nobias, tol<T>())) << "out without bias";
  EXPECT_TRUE(close(floats(this->download(d_dinp)), dinp, tol<T>())) << "dinp";
  EXPECT_TRUE(close(this->download(d_dw), dw, kF32)) << "dweight (fp32 accumulation of T inputs)";
  EXPECT_TRUE(close(this->download(d_db), db, kF32)) << "dbias";
  // Grad::write: dinp is the product alone, whatever the buffer held (the CPU's from zero).
  std::vector<float> fresh(N * IC, 0.0f), dw_scratch(OC * IC, 0.0f);
  model::matmul_backward(fresh.data(), dw_scratch.data(), static_cast<float*>(nullptr), dout.data(), inp.data(),
                         w.data(), N, IC, OC);
  auto d_written = this->upload(as<T>(dinp_start));
  auto d_dw2 = this->upload(std::vector<float>(OC * IC, 0.0f));
  mc::matmul_backward(blas, d_written.data(), d_dw2.data(), static_cast<float*>(nullptr), scratch.data(),
                      d_dout.data(), d_inp.data(), d_w.data(), N, IC, OC, this->stream(), mc::Grad::write);
  EXPECT_TRUE(close(floats(this->download(d_written)), fresh, tol<T>())) << "dinp, Grad::write";
  // The second forward call of each shape reuses its plan.
  const std::size_t plans = blas.cached_plans();
  mc::matmul_forward(blas, d_out.data(), d_inp.data(), d_w.data(), d_bias.data(), N, IC, OC, this->stream());
  EXPECT_EQ(plans, blas.cached_plans());
}

// model.gemm_epilogue=fused's layers against the CPU's separate layers: the product, its GELU and the kept input; the
// residual add; the gradient through the GELU written by the data product's epilogue. One rounding of T fewer than the
// separate kernels, within the same tolerance. In fp32 this also pins cuBLASLt's GELU to the tanh form hsdp trains:
// the erf form differs from it by up to 4.7e-4 (at |x| = 2.7), beyond {1e-4, 1e-5} for about a fifth of these
// products (|x| up to ~10).
TYPED_TEST(AttentionBlasGpu, GemmEpilogues_MatchTheSeparateLayersOnTheCpu) {
  using T = TypeParam;
  const int N = 40, IC = 96, OC = 72;
  ASSERT_TRUE(mc::gelu_epilogue_supports(OC) && mc::gelu_epilogue_supports(IC));
  EXPECT_FALSE(mc::gelu_epilogue_supports(OC + 4));
  const auto inp = inputs<T>(N * IC, 80), w = inputs<T>(OC * IC, 81), bias = inputs<T>(OC, 82);
  const auto residual = inputs<T>(N * OC, 83), dout = inputs<T>(N * OC, 84),
             pre_in = inputs<T>(N * IC, 85, -4.0f, 4.0f);
  const auto dw_start = random_floats(OC * IC, 86), db_start = random_floats(OC, 87);
  // CPU: pre = inp w^T + b, out = gelu(pre); sum = residual + pre; backward: d = gelu'(pre_in) (dout w), with
  // inp_g = gelu(pre_in) the product's input for the weight gradient.
  std::vector<float> pre(N * OC), out(N * OC), sum(N * OC), inp_g(N * IC), dprod(N * IC, 0.0f), dpre(N * IC, 0.0f);
  std::vector<float> dw = dw_start, db = db_start;
  model::matmul_forward(pre.data(), inp.data(), w.data(), bias.data(), N, IC, OC);
  model::gelu_forward(out.data(), pre.data(), pre.size());
  model::residual_forward(sum.data(), residual.data(), pre.data(), sum.size());
  model::gelu_forward(inp_g.data(), pre_in.data(), inp_g.size());
  if constexpr (!std::is_same_v<T, float>) inp_g = rounded_to_bf16(inp_g);  // the GPU's input is stored in T
  model::matmul_backward(dprod.data(), dw.data(), db.data(), dout.data(), inp_g.data(), w.data(), N, IC, OC);
  model::gelu_backward(dpre.data(), pre_in.data(), dprod.data(), dpre.size());

  // With epilogues declined (as where cuBLASLt has no kernel for one: BlasLt::try_gemm), the same results from the
  // separate kernels, and the two GELU GEMMs named in declined().
  for (const bool epilogues : {true, false}) {
    SCOPED_TRACE(epilogues ? "cuBLASLt's epilogues" : "epilogues declined: the separate kernels");
    cuda::BlasLt blas(cuda::BlasLt::kDefaultWorkspaceBytes, epilogues);
    auto d_inp = this->upload(as<T>(inp)), d_w = this->upload(as<T>(w)), d_bias = this->upload(as<T>(bias));
    auto d_residual = this->upload(as<T>(residual)), d_dout = this->upload(as<T>(dout));
    auto d_pre_in = this->upload(as<T>(pre_in)), d_inp_g = this->upload(as<T>(inp_g));
    auto d_dw = this->upload(dw_start), d_db = this->upload(db_start);
    auto d_dpre = this->upload(as<T>(inputs<T>(N * IC, 88)));  // written, whatever it held
    cuda::DeviceBuffer<T> d_out(N * OC), d_pre(N * OC), d_sum(N * OC);
    cuda::DeviceBuffer<float> scratch(mc::column_sum_scratch_floats(OC, 1));
    mc::matmul_gelu_forward(blas, d_out.data(), d_pre.data(), d_inp.data(), d_w.data(), d_bias.data(), N, IC, OC,
                            this->stream());
    mc::matmul_residual_forward(blas, d_sum.data(), d_residual.data(), d_inp.data(), d_w.data(), d_bias.data(), N, IC,
                                OC, this->stream());
    mc::matmul_dgelu_backward(blas, d_dpre.data(), d_dw.data(), d_db.data(), scratch.data(), d_dout.data(),
                              d_inp_g.data(), d_pre_in.data(), d_w.data(), N, IC, OC, this->stream());
    EXPECT_TRUE(close(floats(this->download(d_pre)), pre, tol<T>())) << "the GELU's kept input";
    EXPECT_TRUE(close(floats(this->download(d_out)), out, tol<T>())) << "gelu(product + bias)";
    EXPECT_TRUE(close(floats(this->download(d_sum)), sum, tol<T>())) << "residual + product + bias";
    EXPECT_TRUE(close(floats(this->download(d_dpre)), dpre, tol<T>())) << "gradient through the GELU";
    EXPECT_TRUE(close(this->download(d_dw), dw, kF32)) << "dweight";
    EXPECT_TRUE(close(this->download(d_db), db, kF32)) << "dbias";
    // In place (out == residual).
    auto d_inplace = this->upload(as<T>(residual));
    mc::matmul_residual_forward(blas, d_inplace.data(), d_inplace.data(), d_inp.data(), d_w.data(), d_bias.data(), N,
                                IC, OC, this->stream());
    EXPECT_TRUE(close(floats(this->download(d_inplace)), sum, tol<T>())) << "residual + product + bias, in place";
    if (epilogues) {
      for (const auto& shape : blas.declined()) std::cout << "cuBLASLt has no kernel here for " << shape << "\n";
    } else {
      EXPECT_EQ(blas.declined().size(), 2u) << "the GELU forward and its gradient";
    }
  }
}

// V = 1003 (odd, as GPT-2's 50257) takes the aligned part plus a tail of 3 columns; V = 1000 the aligned part only.
TYPED_TEST(AttentionBlasGpu, LmHead_ForwardAndBackward_MatchCpu_PaddingUntouched) {
  using T = TypeParam;
  const int N = 24, C = 64, Vp = 1024;
  for (const int V : {1000, 1003}) {
    const auto inp = inputs<T>(N * C, 70), wte = inputs<T>(Vp * C, 71);
    auto dlogits = inputs<T>(static_cast<std::size_t>(N) * Vp, 72);
    const float sentinel = 7.0f;
    std::vector<float> logits(static_cast<std::size_t>(N) * Vp, sentinel), dinp(N * C, 0.0f), dwte(Vp * C, 0.0f);
    model::lm_head_forward(logits.data(), inp.data(), wte.data(), N, C, V, Vp);
    model::lm_head_backward(dinp.data(), dwte.data(), dlogits.data(), inp.data(), wte.data(), N, C, V, Vp);

    cuda::BlasLt blas;
    auto d_inp = this->upload(as<T>(inp)), d_wte = this->upload(as<T>(wte)), d_dlogits = this->upload(as<T>(dlogits));
    auto d_logits = this->upload(as<T>(std::vector<float>(logits.size(), sentinel)));
    auto d_dinp = this->upload(as<T>(std::vector<float>(N * C, 0.0f)));
    auto d_dwte = this->upload(std::vector<float>(Vp * C, 0.0f));
    mc::lm_head_forward(blas, d_logits.data(), d_inp.data(), d_wte.data(), N, C, V, Vp, this->stream());
    mc::lm_head_backward(blas, d_dinp.data(), d_dwte.data(), d_dlogits.data(), d_inp.data(), d_wte.data(), N, C, V, Vp,
                         this->stream());
    const auto got_logits = floats(this->download(d_logits));
    EXPECT_TRUE(close(got_logits, logits, tol<T>())) << "logits (padding included: sentinel on both sides), V=" << V;
    EXPECT_TRUE(close(floats(this->download(d_dinp)), dinp, tol<T>())) << "dinp, V=" << V;
    const auto got_dwte = this->download(d_dwte);
    EXPECT_TRUE(close(got_dwte, dwte, kF32)) << "dwte, V=" << V;
    for (std::size_t i = static_cast<std::size_t>(V) * C; i < got_dwte.size(); ++i) {
      ASSERT_EQ(got_dwte[i], 0.0f) << "padded row of dwte received a gradient at " << i << ", V=" << V;
    }
  }
}

}  // namespace
}  // namespace hsdp::gpu_testing
