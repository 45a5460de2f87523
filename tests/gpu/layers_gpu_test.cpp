// The GPU layer kernels against the CPU reference (hsdp::model layers in float), for float and bf16 storage.
//
// Tolerances (Tolerance{rel, scale_rel}: |got - want| <= rel |want| + scale_rel max|want|):
//   float, elementwise      {1e-5, 1e-6}  fp32 on both sides; expf against the CPU's vexp, a few ulps apart.
//   float, reductions       {1e-4, 1e-5}  fp32 sums over up to ~1000 terms added in another order.
//   bf16                    {1e-2, 1e-2}  the GPU stores its outputs in bf16 (8 significant bits: 0.4% per
//                                         rounding); the CPU reference computes in float from the same
//                                         bf16-representable inputs and is not rounded.
// The encoder's backward adds in the CPU's order and is checked bit for bit.
#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu_test_util.hpp"
#include "hsdp/model/cuda/layers.hpp"
#include "hsdp/model/layers.hpp"
#include "hsdp/model/llama_layers.hpp"

namespace hsdp::gpu_testing {
namespace {

namespace mc = hsdp::model::cuda;

constexpr Tolerance kF32Elementwise{1e-5, 1e-6};
constexpr Tolerance kF32Reduction{1e-4, 1e-5};
constexpr Tolerance kBf16{1e-2, 1e-2};

template <typename T>
Tolerance tol(Tolerance f32) {
  return std::is_same_v<T, float> ? f32 : kBf16;
}

template <typename T>
class LayersGpu : public GpuTest {};
using StorageTypes = ::testing::Types<float, bf16_t>;
TYPED_TEST_SUITE(LayersGpu, StorageTypes);

// Inputs representable in T, so the CPU (float) and the GPU (T) start from the same numbers.
template <typename T>
std::vector<float> inputs(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  const auto x = random_floats(n, seed, lo, hi);
  return std::is_same_v<T, float> ? x : rounded_to_bf16(x);
}

TYPED_TEST(LayersGpu, Encoder_MatchesCpu_AndBackwardAddsInCpuOrder) {
  using T = TypeParam;
  const int B = 3, T_ = 17, C = 40, V = 11;
  std::vector<std::int32_t> tokens(B * T_);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>((i * 7) % 5);  // repeats
  const auto wte = inputs<T>(V * C, 1), wpe = inputs<T>(T_ * C, 2), dout = inputs<T>(B * T_ * C, 3);
  std::vector<float> out(B * T_ * C), dwte = random_floats(V * C, 4), dwpe = random_floats(T_ * C, 5);
  std::vector<float> dwte_gpu_start = dwte, dwpe_gpu_start = dwpe;
  model::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T_, C);
  model::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T_, C);

  auto d_tokens = this->upload(tokens);
  auto d_wte = this->upload(as<T>(wte)), d_wpe = this->upload(as<T>(wpe)), d_dout = this->upload(as<T>(dout));
  cuda::DeviceBuffer<T> d_out(out.size());
  auto d_dwte = this->upload(dwte_gpu_start), d_dwpe = this->upload(dwpe_gpu_start);
  mc::encoder_forward(d_out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), B, T_, C, this->stream());
  mc::encoder_backward(d_dwte.data(), d_dwpe.data(), d_dout.data(), d_tokens.data(), B, T_, C, this->stream());
  // The forward is one addition rounded once to T: exact against the CPU's sum rounded to T.
  EXPECT_EQ(floats(this->download(d_out)), floats(as<T>(out)));
  const auto got_dwte = this->download(d_dwte), got_dwpe = this->download(d_dwpe);
  EXPECT_EQ(0, std::memcmp(got_dwte.data(), dwte.data(), dwte.size() * sizeof(float))) << "dwte not bit-identical";
  EXPECT_EQ(0, std::memcmp(got_dwpe.data(), dwpe.data(), dwpe.size() * sizeof(float))) << "dwpe not bit-identical";
}

TYPED_TEST(LayersGpu, LayerNorm_ForwardAndBackward_MatchCpu) {
  using T = TypeParam;
  for (const int C : {768, 100}) {
    const int N = 37;
    const auto x = inputs<T>(N * C, 10, -2.0f, 3.0f), w = inputs<T>(C, 11), b = inputs<T>(C, 12);
    const auto dout = inputs<T>(N * C, 13);
    std::vector<float> out(N * C), mean(N), rstd(N), dinp(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
    model::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    model::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                              rstd.data(), N, C);

    auto d_x = this->upload(as<T>(x)), d_w = this->upload(as<T>(w)), d_b = this->upload(as<T>(b));
    auto d_dout = this->upload(as<T>(dout));
    cuda::DeviceBuffer<T> d_out(out.size());
    cuda::DeviceBuffer<float> d_mean(N), d_rstd(N), d_dw(C), d_db(C), scratch(mc::column_sum_scratch_floats(C, 2));
    auto d_dinp = this->upload(as<T>(std::vector<float>(N * C, 0.0f)));
    cuda::zero_on_device(d_dw.data(), C, this->stream());
    cuda::zero_on_device(d_db.data(), C, this->stream());
    mc::layernorm_forward(d_out.data(), d_mean.data(), d_rstd.data(), d_x.data(), d_w.data(), d_b.data(), N, C,
                          this->stream());
    mc::layernorm_backward(d_dinp.data(), d_dw.data(), d_db.data(), scratch.data(), d_dout.data(), d_x.data(),
                           d_w.data(), d_mean.data(), d_rstd.data(), N, C, this->stream());
    EXPECT_TRUE(close(floats(this->download(d_out)), out, tol<T>(kF32Reduction))) << "out, C=" << C;
    EXPECT_TRUE(close(this->download(d_mean), mean, kF32Reduction)) << "mean, C=" << C;
    EXPECT_TRUE(close(this->download(d_rstd), rstd, kF32Reduction)) << "rstd, C=" << C;
    EXPECT_TRUE(close(floats(this->download(d_dinp)), dinp, tol<T>(kF32Reduction))) << "dinp, C=" << C;
    EXPECT_TRUE(close(this->download(d_dw), dw, kF32Reduction)) << "dweight, C=" << C;
    EXPECT_TRUE(close(this->download(d_db), db, kF32Reduction)) << "dbias, C=" << C;
  }
}

// The Llama family's layers. RMSNorm: C = 768 and 100 (not a multiple of the warp), N = 37 rows.
TYPED_TEST(LayersGpu, RmsNorm_ForwardAndBackward_MatchCpu) {
  using T = TypeParam;
  for (const int C : {768, 100}) {
    const int N = 37;
    const double eps = 1e-5;
    const auto x = inputs<T>(N * C, 20, -2.0f, 3.0f), w = inputs<T>(C, 21, 0.5f, 1.5f), dout = inputs<T>(N * C, 22);
    std::vector<float> out(N * C), rstd(N), dinp(N * C, 0.0f), dw(C, 0.0f);
    model::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    model::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);

    auto d_x = this->upload(as<T>(x)), d_w = this->upload(as<T>(w)), d_dout = this->upload(as<T>(dout));
    cuda::DeviceBuffer<T> d_out(out.size());
    cuda::DeviceBuffer<float> d_rstd(N), d_dw(C), scratch(mc::column_sum_scratch_floats(C, 1));
    auto d_dinp = this->upload(as<T>(std::vector<float>(N * C, 0.0f)));
    cuda::zero_on_device(d_dw.data(), C, this->stream());
    mc::rmsnorm_forward(d_out.data(), d_rstd.data(), d_x.data(), d_w.data(), N, C, static_cast<float>(eps),
                        this->stream());
    mc::rmsnorm_backward(d_dinp.data(), d_dw.data(), scratch.data(), d_dout.data(), d_x.data(), d_w.data(),
                         d_rstd.data(), N, C, this->stream());
    EXPECT_TRUE(close(floats(this->download(d_out)), out, tol<T>(kF32Reduction))) << "out, C=" << C;
    EXPECT_TRUE(close(this->download(d_rstd), rstd, kF32Reduction)) << "rstd, C=" << C;
    EXPECT_TRUE(close(floats(this->download(d_dinp)), dinp, tol<T>(kF32Reduction))) << "dinp, C=" << C;
    EXPECT_TRUE(close(this->download(d_dw), dw, kF32Reduction)) << "dweight, C=" << C;
  }
}

// RoPE on the q and k parts of q | k | v rows (4 query heads, 2 key/value heads of 16 channels, T = 37 positions of
// 2 sequences), forward and backward, against the CPU on separate q and k buffers; the backward undoes the forward.
TYPED_TEST(LayersGpu, Rope_OnStridedRows_MatchesCpu_AndBackwardUndoesIt) {
  using T = TypeParam;
  const int B = 2, T_ = 37, NH = 4, NKV = 2, hs = 16, C = NH * hs, K = NKV * hs, RS = C + 2 * K;
  const double theta = 10000.0;
  const auto rows = inputs<T>(static_cast<std::size_t>(B) * T_ * RS, 23, -2.0f, 2.0f);
  auto [q, k, v] = split_qkv(rows, B * T_, C, K);
  model::rope_forward(q.data(), B, T_, NH, hs, theta);
  model::rope_forward(k.data(), B, T_, NKV, hs, theta);
  auto d_rows = this->upload(as<T>(rows));
  mc::rope_forward(d_rows.data(), B, T_, NH, hs, RS, theta, this->stream());
  mc::rope_forward(d_rows.data() + C, B, T_, NKV, hs, RS, theta, this->stream());
  const auto got = split_qkv(floats(this->download(d_rows)), B * T_, C, K);
  EXPECT_TRUE(close(got.q, q, tol<T>(kF32Elementwise))) << "q";
  EXPECT_TRUE(close(got.k, k, tol<T>(kF32Elementwise))) << "k";
  EXPECT_EQ(got.v, v) << "v must stay untouched";
  mc::rope_backward(d_rows.data(), B, T_, NH, hs, RS, theta, this->stream());
  mc::rope_backward(d_rows.data() + C, B, T_, NKV, hs, RS, theta, this->stream());
  // Turning back: the inputs again, up to two roundings (fp32: a few ulps of values below 2; bf16: two bf16 roundings).
  EXPECT_TRUE(close(floats(this->download(d_rows)), rows, tol<T>(kF32Elementwise))) << "rope_backward(rope_forward(x))";
}

TYPED_TEST(LayersGpu, SwiGlu_ForwardAndBackward_MatchCpu_BackwardAdds) {
  using T = TypeParam;
  const std::size_t n = 1000;
  const auto gate = inputs<T>(n, 24, -4.0f, 4.0f), up = inputs<T>(n, 25), dout = inputs<T>(n, 26);
  const auto dgate0 = inputs<T>(n, 27), dup0 = inputs<T>(n, 28);
  std::vector<float> out(n), dgate = dgate0, dup = dup0;
  model::swiglu_forward(out.data(), gate.data(), up.data(), n);
  model::swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n);
  auto d_gate = this->upload(as<T>(gate)), d_up = this->upload(as<T>(up)), d_dout = this->upload(as<T>(dout));
  auto d_dgate = this->upload(as<T>(dgate0)), d_dup = this->upload(as<T>(dup0));
  cuda::DeviceBuffer<T> d_out(n);
  mc::swiglu_forward(d_out.data(), d_gate.data(), d_up.data(), n, this->stream());
  mc::swiglu_backward(d_dgate.data(), d_dup.data(), d_dout.data(), d_gate.data(), d_up.data(), n, this->stream());
  EXPECT_TRUE(close(floats(this->download(d_out)), out, tol<T>(kF32Elementwise))) << "out";
  EXPECT_TRUE(close(floats(this->download(d_dgate)), dgate, tol<T>(kF32Elementwise))) << "dgate (added)";
  EXPECT_TRUE(close(floats(this->download(d_dup)), dup, tol<T>(kF32Elementwise))) << "dup (added)";
  std::vector<float> fresh_gate(n, 0.0f), fresh_up(n, 0.0f);
  model::swiglu_backward(fresh_gate.data(), fresh_up.data(), dout.data(), gate.data(), up.data(), n);
  auto w_gate = this->upload(as<T>(dgate0)), w_up = this->upload(as<T>(dup0));  // overwritten whole
  mc::swiglu_backward(w_gate.data(), w_up.data(), d_dout.data(), d_gate.data(), d_up.data(), n, this->stream(),
                      mc::Grad::write);
  EXPECT_TRUE(close(floats(this->download(w_gate)), fresh_gate, tol<T>(kF32Elementwise))) << "dgate, Grad::write";
  EXPECT_TRUE(close(floats(this->download(w_up)), fresh_up, tol<T>(kF32Elementwise))) << "dup, Grad::write";
}

TYPED_TEST(LayersGpu, GeluAndResidual_MatchCpu_BackwardAdds) {
  using T = TypeParam;
  const std::size_t n = 10007;
  const auto x = inputs<T>(n, 20, -5.0f, 5.0f), y = inputs<T>(n, 21), dout = inputs<T>(n, 22);
  const auto start = inputs<T>(n, 23);  // what the backward kernels add to
  std::vector<float> gelu(n), dgelu = start, sum(n), d1 = start, d2 = start;
  model::gelu_forward(gelu.data(), x.data(), n);
  model::gelu_backward(dgelu.data(), x.data(), dout.data(), n);
  model::residual_forward(sum.data(), x.data(), y.data(), n);
  model::residual_backward(d1.data(), d2.data(), dout.data(), n);

  auto d_x = this->upload(as<T>(x)), d_y = this->upload(as<T>(y)), d_dout = this->upload(as<T>(dout));
  cuda::DeviceBuffer<T> d_gelu(n), d_sum(n);
  auto d_dgelu = this->upload(as<T>(start)), d_d1 = this->upload(as<T>(start)), d_d2 = this->upload(as<T>(start));
  mc::gelu_forward(d_gelu.data(), d_x.data(), n, this->stream());
  mc::gelu_backward(d_dgelu.data(), d_x.data(), d_dout.data(), n, this->stream());
  mc::residual_forward(d_sum.data(), d_x.data(), d_y.data(), n, this->stream());
  mc::residual_backward(d_d1.data(), d_d2.data(), d_dout.data(), n, this->stream());
  EXPECT_TRUE(close(floats(this->download(d_gelu)), gelu, tol<T>(kF32Elementwise))) << "gelu";
  EXPECT_TRUE(close(floats(this->download(d_dgelu)), dgelu, tol<T>(kF32Elementwise))) << "gelu backward";
  EXPECT_TRUE(close(floats(this->download(d_sum)), sum, tol<T>(kF32Elementwise))) << "residual";
  EXPECT_TRUE(close(floats(this->download(d_d1)), d1, tol<T>(kF32Elementwise))) << "residual backward 1";
  EXPECT_TRUE(close(floats(this->download(d_d2)), d2, tol<T>(kF32Elementwise))) << "residual backward 2";
  // Grad::write over whatever the buffer held: the gradient itself (the CPU's from zero), bit for bit the add onto 0.
  std::vector<float> fresh(n, 0.0f);
  model::gelu_backward(fresh.data(), x.data(), dout.data(), n);
  auto d_written = this->upload(as<T>(start)), d_zero = this->upload(as<T>(std::vector<float>(n, 0.0f)));
  mc::gelu_backward(d_written.data(), d_x.data(), d_dout.data(), n, this->stream(), mc::Grad::write);
  mc::gelu_backward(d_zero.data(), d_x.data(), d_dout.data(), n, this->stream());
  const auto written = this->download(d_written);
  EXPECT_TRUE(close(floats(written), fresh, tol<T>(kF32Elementwise))) << "gelu backward, Grad::write";
  EXPECT_EQ(floats(written), floats(this->download(d_zero))) << "write != add onto zero";
}

TYPED_TEST(LayersGpu, SoftmaxXent_ForwardBackwardAndFused_MatchCpu_PaddingUntouched) {
  using T = TypeParam;
  const int N = 9, V = 1000, Vp = 1024;
  const float dloss = 1.0f / N;
  auto logits = inputs<T>(static_cast<std::size_t>(N) * Vp, 30, -4.0f, 4.0f);
  const float sentinel = 12.5f;  // padded columns must come back as they went in
  for (int n = 0; n < N; ++n) {
    for (int i = V; i < Vp; ++i) logits[static_cast<std::size_t>(n) * Vp + i] = sentinel;
  }
  std::vector<std::int32_t> targets(N);
  for (int n = 0; n < N; ++n) targets[n] = (n * 131 + 7) % V;
  std::vector<float> probs = logits, losses(N), dlogits(logits.size());
  model::softmax_xent_forward(probs.data(), losses.data(), logits.data(), targets.data(), N, V, Vp);
  dlogits = probs;
  model::softmax_xent_backward(dlogits.data(), dlogits.data(), targets.data(), dloss, N, V, Vp);

  auto d_targets = this->upload(targets);
  auto d_probs = this->upload(as<T>(logits));  // in place, as the trainer calls it
  cuda::DeviceBuffer<float> d_losses(N), d_losses_fused(N);
  mc::softmax_xent_forward(d_probs.data(), d_losses.data(), d_probs.data(), d_targets.data(), N, V, Vp, this->stream());
  const auto got_probs = floats(this->download(d_probs));
  mc::softmax_xent_backward(d_probs.data(), d_probs.data(), d_targets.data(), dloss, N, V, Vp, this->stream());
  const auto got_dlogits = floats(this->download(d_probs));
  auto d_fused = this->upload(as<T>(logits));
  mc::softmax_xent_forward_backward(d_fused.data(), d_losses_fused.data(), d_fused.data(), d_targets.data(), dloss, N,
                                    V, Vp, this->stream());
  const auto got_fused = floats(this->download(d_fused));
  EXPECT_TRUE(close(got_probs, probs, tol<T>(kF32Reduction))) << "probs";
  EXPECT_TRUE(close(this->download(d_losses), losses, kF32Reduction)) << "losses";
  EXPECT_TRUE(close(got_dlogits, dlogits, tol<T>(kF32Reduction))) << "dlogits";
  EXPECT_TRUE(close(got_fused, dlogits, tol<T>(kF32Reduction))) << "fused dlogits";
  EXPECT_TRUE(close(this->download(d_losses_fused), losses, kF32Reduction)) << "fused losses";
  for (int n = 0; n < N; ++n) {
    for (int i = V; i < Vp; ++i) {
      const std::size_t k = static_cast<std::size_t>(n) * Vp + i;
      ASSERT_EQ(got_probs[k], sentinel) << "padded column " << i << " of row " << n << " was written";
      ASSERT_EQ(got_fused[k], sentinel) << "padded column " << i << " of row " << n << " was written (fused)";
    }
  }
}

TEST_F(GpuTest, Convert_RoundsToBf16AsTheCpu) {
  auto x = random_floats(4099, 40, -1e3f, 1e3f);
  x[0] = 1.0f + 0x1p-8f;  // a tie: rounds to even
  x[1] = 1.0f + 3 * 0x1p-8f;
  auto d_x = upload(x);
  cuda::DeviceBuffer<bf16_t> d_b(x.size());
  cuda::DeviceBuffer<float> d_back(x.size());
  mc::convert(d_b.data(), d_x.data(), x.size(), stream());
  mc::convert(d_back.data(), d_b.data(), x.size(), stream());
  const auto got = download(d_b);
  const auto want = to_bf16(x);
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i].bits, want[i].bits) << "element " << i;
  EXPECT_EQ(download(d_back), to_float(want));
}

}  // namespace
}  // namespace hsdp::gpu_testing
