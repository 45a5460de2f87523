// DeviceOps on the GPU (stream::cuda::CudaDeviceOps) against the CPU's (make_cpu_device_ops),
// call by call on the same inputs: bit for bit (memcmp), except
//   accumulate with a scale that is not a power of two (the engine's scales are 1 and 1 / shard size): the CPU
//                build may fuse sum + x * scale into one FMA (g++ contracts in C++ with -march=native), the GPU
//                rounds the product first, so they differ by the product's rounding: |d| <= ulp(x scale) + ulp(sum);
//   adamw        {1e-6, 1e-6} as the CUDA AdamW against optim::adamw_update (quant_adamw_gpu_test.cpp);
//   squared_sum  relative 1e-12: both sum n = 10^5 squares in double in different orders, each rounding off by
//                at most 2^-53 of the running sum, so |error| <= n 2^-53 sum = 1.1e-11 sum in the worst case and
//                about sqrt(n) 2^-53 = 3.5e-14 for random signs of the rounding errors; 1e-12 sits between.
// Inputs hold values of every kind the engine feeds these calls: large and tiny magnitudes, negative zeros, and
// (where a call must see them) infinities and NaN.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "gpu_test_util.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/stream/cuda/device_ops.hpp"
#include "hsdp/stream/device_ops.hpp"
#include "hsdp/quant/message.hpp"

namespace hsdp::gpu_testing {
namespace {

using stream::DeviceOps;

constexpr std::size_t kN = 100000;  // not a multiple of the quantization blocks nor of the launch sizes

std::vector<float> values(std::uint64_t seed) {
  auto x = random_floats(kN, seed, -4.0f, 4.0f);
  for (std::size_t i = 0; i < kN; i += 97) x[i] *= 1e-30f;  // fp16 subnormals and underflow, bf16 tiny values
  for (std::size_t i = 5; i < kN; i += 101) x[i] *= 3e4f;   // beyond fp16's range
  x[3] = -0.0f;
  return x;
}

template <typename T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

class DeviceOpsGpu : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    cpu_ = stream::make_cpu_device_ops(cpu_memory_);
    gpu_ = std::make_unique<stream::cuda::CudaDeviceOps>(gpu_memory_, stream());
  }
  // Host bytes onto the GPU, through the ops (copy_from_host waits).
  template <typename T>
  stream::DeviceArray<T> on_gpu(const std::vector<T>& host) {
    stream::DeviceArray<T> a = gpu_->array<T>(host.size(), MemCategory::comm_buffers);
    gpu_->copy_from_host(a.data(), host.data(), host.size() * sizeof(T));
    return a;
  }
  template <typename T>
  std::vector<T> back(stream::DeviceArray<T>& a) {
    std::vector<T> host(a.size());
    gpu_->copy_to_host(host.data(), a.data(), a.size() * sizeof(T));
    return host;
  }

  MemoryAccountant cpu_memory_, gpu_memory_;
  std::unique_ptr<DeviceOps> cpu_;
  std::unique_ptr<stream::cuda::CudaDeviceOps> gpu_;
};

TEST_F(DeviceOpsGpu, Allocate_IsZeroed_ChargedWhileItLives_AndNotHostVisible) {
  {
    stream::DeviceArray<float> a = gpu_->array<float>(kN, MemCategory::grads);
    EXPECT_EQ(gpu_memory_.current(MemCategory::grads), static_cast<std::int64_t>(kN * sizeof(float)));
    EXPECT_TRUE(same_bytes(back(a), std::vector<float>(kN, 0.0f)));
    EXPECT_EQ(gpu_->host_address(a.data()), nullptr);
  }
  EXPECT_EQ(gpu_memory_.current(MemCategory::grads), 0);
}

TEST_F(DeviceOpsGpu, ConvertAndRound_AreTheCpus_BitForBit) {
  const auto x = values(1);
  for (const DType t : {DType::bf16, DType::f16, DType::f32}) {
    // fp32 -> t -> fp32
    std::vector<std::byte> cpu_narrow(kN * size_of(t));
    std::vector<float> cpu_back(kN);
    cpu_->convert(x.data(), DType::f32, cpu_narrow.data(), t, kN);
    cpu_->convert(cpu_narrow.data(), t, cpu_back.data(), DType::f32, kN);
    auto d_x = on_gpu(x);
    stream::DeviceArray<std::byte> d_narrow = gpu_->typed(kN, t, MemCategory::comm_buffers);
    stream::DeviceArray<float> d_back = gpu_->array<float>(kN, MemCategory::comm_buffers);
    gpu_->convert(d_x.data(), DType::f32, d_narrow.data(), t, kN);
    gpu_->convert(d_narrow.data(), t, d_back.data(), DType::f32, kN);
    EXPECT_TRUE(same_bytes(back(d_narrow), cpu_narrow)) << to_string(t);
    EXPECT_TRUE(same_bytes(back(d_back), cpu_back)) << to_string(t);
    // round_to in place
    std::vector<float> cpu_rounded = x;
    cpu_->round_to(cpu_rounded.data(), kN, t);
    gpu_->round_to(d_x.data(), kN, t);
    EXPECT_TRUE(same_bytes(back(d_x), cpu_rounded)) << to_string(t);
  }
}

// |got - want| <= ulp(|x scale|) + ulp(|want|), element by element.
::testing::AssertionResult within_a_product_rounding(const std::vector<float>& got, const std::vector<float>& want,
                                                     const std::vector<float>& x, float scale) {
  const auto ulp = [](float v) { return std::nextafter(std::abs(v), INFINITY) - std::abs(v); };
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))) continue;  // infinities too
    const double bound = static_cast<double>(ulp(x[i] * scale)) + ulp(want[i]);
    if (!(std::abs(static_cast<double>(got[i]) - want[i]) <= bound)) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

TEST_F(DeviceOpsGpu, AccumulateAndFill_AreTheCpus_BitForBit) {
  const auto x = values(2);
  for (const float scale : {1.0f, 0.25f, 1.0f / 3.0f}) {
    const bool exact_product = scale != 1.0f / 3.0f;
    for (const DType t : {DType::f32, DType::bf16, DType::f16}) {
      std::vector<std::byte> narrow(kN * size_of(t));
      cpu_->convert(x.data(), DType::f32, narrow.data(), t, kN);
      std::vector<float> cpu_sum = values(3);
      auto d_sum = on_gpu(cpu_sum);
      auto d_x = on_gpu(narrow);
      cpu_->accumulate_from(cpu_sum.data(), narrow.data(), t, kN, scale);
      gpu_->accumulate_from(d_sum.data(), d_x.data(), t, kN, scale);
      std::vector<float> x_as_t(kN);
      cpu_->convert(narrow.data(), t, x_as_t.data(), DType::f32, kN);
      if (exact_product) {
        EXPECT_TRUE(same_bytes(back(d_sum), cpu_sum)) << to_string(t) << " scale " << scale;
      } else {
        EXPECT_TRUE(within_a_product_rounding(back(d_sum), cpu_sum, x_as_t, scale)) << to_string(t);
      }
    }
    std::vector<float> cpu_sum = values(4);
    auto d_sum = on_gpu(cpu_sum);
    auto d_x = on_gpu(x);
    cpu_->accumulate(cpu_sum.data(), x.data(), kN, scale);
    gpu_->accumulate(d_sum.data(), d_x.data(), kN, scale);
    if (exact_product) {
      EXPECT_TRUE(same_bytes(back(d_sum), cpu_sum)) << "accumulate, scale " << scale;
    } else {
      EXPECT_TRUE(within_a_product_rounding(back(d_sum), cpu_sum, x, scale)) << "accumulate";
    }
  }
  auto d_x = on_gpu(x);
  gpu_->fill_zero(d_x.data(), 1000 * sizeof(float));
  const auto got = back(d_x);
  EXPECT_TRUE(std::all_of(got.begin(), got.begin() + 1000, [](float v) { return v == 0.0f && !std::signbit(v); }));
  EXPECT_EQ(got[1000], x[1000]);
}

TEST_F(DeviceOpsGpu, ZeroPPMessages_AreTheCpus_BitForBit) {
  for (const quant::QuantSpec spec :
       {quant::QuantSpec{quant::Bits::int8, 2048}, quant::QuantSpec{quant::Bits::int4, 256}}) {
    const std::size_t m = quant::message_bytes(kN, spec);
    std::vector<std::vector<std::uint8_t>> cpu_messages;
    std::vector<stream::DeviceArray<std::uint8_t>> gpu_messages;
    for (std::uint64_t k = 0; k < 3; ++k) {
      const auto x = values(10 + k);
      cpu_messages.emplace_back(m);
      cpu_->quantize(x.data(), kN, spec, cpu_messages.back().data());
      auto d_x = on_gpu(x);
      gpu_messages.push_back(gpu_->array<std::uint8_t>(m, MemCategory::comm_buffers));
      gpu_->quantize(d_x.data(), kN, spec, gpu_messages.back().data());
      EXPECT_TRUE(same_bytes(back(gpu_messages.back()), cpu_messages.back())) << "quantize, message " << k;
    }
    std::vector<float> cpu_out(kN);
    auto d_out = gpu_->array<float>(kN, MemCategory::comm_buffers);
    cpu_->dequantize(cpu_messages[1].data(), kN, spec, cpu_out.data());
    gpu_->dequantize(gpu_messages[1].data(), kN, spec, d_out.data());
    EXPECT_TRUE(same_bytes(back(d_out), cpu_out)) << "dequantize";

    std::vector<const std::uint8_t*> cpu_ptrs, gpu_ptrs;
    for (std::size_t k = 0; k < 3; ++k) {
      cpu_ptrs.push_back(cpu_messages[k].data());
      gpu_ptrs.push_back(gpu_messages[k].data());
    }
    cpu_->reduce_dequantize(cpu_ptrs, kN, spec, cpu_out.data());
    gpu_->reduce_dequantize(gpu_ptrs, kN, spec, d_out.data());
    EXPECT_TRUE(same_bytes(back(d_out), cpu_out)) << "reduce_dequantize";

    std::vector<std::uint8_t> cpu_requantized(m);
    auto d_requantized = gpu_->array<std::uint8_t>(m, MemCategory::comm_buffers);
    cpu_->reduce_requantize(cpu_ptrs, kN, spec, cpu_requantized.data());
    gpu_->reduce_requantize(gpu_ptrs, kN, spec, d_requantized.data());
    EXPECT_TRUE(same_bytes(back(d_requantized), cpu_requantized)) << "reduce_requantize";
  }
  gpu_->raise_deferred_errors();  // nothing was non-finite
}

TEST_F(DeviceOpsGpu, NonFiniteQuantize_IsRaisedLater_WithTheCpusMessage) {
  auto x = values(20);
  x[4242] = std::numeric_limits<float>::infinity();
  const quant::QuantSpec spec{quant::Bits::int8, 2048};
  std::vector<std::uint8_t> message(quant::message_bytes(kN, spec));
  std::string cpu_text;
  try {
    cpu_->quantize(x.data(), kN, spec, message.data());
  } catch (const Error& e) {
    cpu_text = e.what();
  }
  ASSERT_FALSE(cpu_text.empty());
  auto d_x = on_gpu(x);
  auto d_message = gpu_->array<std::uint8_t>(message.size(), MemCategory::comm_buffers);
  gpu_->quantize(d_x.data(), kN, spec, d_message.data());  // cannot throw here
  try {
    gpu_->raise_deferred_errors();
    FAIL() << "no error raised";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::internal);
    EXPECT_NE(std::string(e.what()).find("element 4242"), std::string::npos) << e.what() << " / CPU: " << cpu_text;
  }
}

// The last step also writes a bf16 copy of the updated params in its pass (the engine's no_shard with bf16 compute
// copies): on each device the bits its convert gives from those params.
TEST_F(DeviceOpsGpu, AdamW_WithDecaySegments_MatchesTheCpu_AndZeroesTheGradients) {
  const optim::AdamWConfig config{};
  const std::vector<optim::DecaySegment> segments{{0, 40000, true}, {40000, 1000, false}, {41000, kN - 41000, true}};
  std::vector<float> params = values(30), m(kN, 0.0f), v(kN, 0.0f);
  auto d_params = on_gpu(params), d_m = on_gpu(m), d_v = on_gpu(v);
  std::vector<bf16_t> cpu_copy(kN);
  auto d_copy = gpu_->array<bf16_t>(kN, MemCategory::params);
  for (std::int64_t t = 1; t <= 3; ++t) {
    std::vector<float> grads = values(40 + static_cast<std::uint64_t>(t));
    auto d_grads = on_gpu(grads);
    const optim::AdamWStep step{.lr = 1e-3f, .t = t, .grad_scale = 0.5f};
    cpu_->adamw(config, step, params.data(), grads.data(), m.data(), v.data(), kN, segments, true,
                t == 3 ? cpu_copy.data() : nullptr);
    gpu_->adamw(config, step, d_params.data(), d_grads.data(), d_m.data(), d_v.data(), kN, segments, true,
                t == 3 ? d_copy.data() : nullptr);
    EXPECT_TRUE(same_bytes(back(d_grads), std::vector<float>(kN, 0.0f))) << "step " << t;
  }
  const Tolerance tight{1e-6, 1e-6};
  EXPECT_TRUE(close(back(d_params), params, tight));
  EXPECT_TRUE(close(back(d_m), m, tight));
  EXPECT_TRUE(close(back(d_v), v, tight));
  std::vector<bf16_t> cpu_converted(kN);
  cpu_->convert(params.data(), DType::f32, cpu_converted.data(), DType::bf16, kN);
  EXPECT_TRUE(same_bytes(cpu_copy, cpu_converted)) << "the CPU's copy in AdamW's pass";
  auto d_converted = gpu_->array<bf16_t>(kN, MemCategory::params);
  gpu_->convert(d_params.data(), DType::f32, d_converted.data(), DType::bf16, kN);
  EXPECT_TRUE(same_bytes(back(d_copy), back(d_converted))) << "the GPU's copy in AdamW's pass";
}

TEST_F(DeviceOpsGpu, Scalars_SquaredSumAndNonFiniteFlags_AreTheCpus) {
  const auto x = values(50);
  auto d_x = on_gpu(x);
  double cpu_sum = 2.5;
  auto d_scalars = on_gpu(std::vector<double>{2.5, 0.0, 0.0});
  cpu_->squared_sum(x.data(), kN, &cpu_sum);
  gpu_->squared_sum(d_x.data(), kN, d_scalars.data());
  gpu_->flag_nonfinite(d_x.data(), kN, d_scalars.data() + 1);  // all finite: the flag stays 0
  auto got = back(d_scalars);
  EXPECT_NEAR(got[0], cpu_sum, 1e-12 * cpu_sum);
  EXPECT_EQ(got[1], 0.0);

  auto with_nan = x;
  with_nan[77777] = std::numeric_limits<float>::quiet_NaN();
  auto d_nan = on_gpu(with_nan);
  gpu_->flag_nonfinite(d_nan.data(), kN, d_scalars.data() + 1);
  gpu_->zero_if_nonfinite(d_x.data(), kN, d_scalars.data() + 2);  // finite: untouched, no flag
  EXPECT_TRUE(same_bytes(back(d_x), x));
  got = back(d_scalars);
  EXPECT_EQ(got[1], 1.0);
  EXPECT_EQ(got[2], 0.0);
  std::vector<float> cpu_nan = with_nan;
  double cpu_flag = 0;
  cpu_->zero_if_nonfinite(cpu_nan.data(), kN, &cpu_flag);
  gpu_->zero_if_nonfinite(d_nan.data(), kN, d_scalars.data() + 2);
  EXPECT_TRUE(same_bytes(back(d_nan), cpu_nan));
  EXPECT_EQ(back(d_scalars)[2], cpu_flag);
}

// The step's loss sum: each micro-batch's loss added in double, as the CPU adds (one rounding each: the same bits).
TEST_F(DeviceOpsGpu, AddScalar_IsTheCpus) {
  const std::vector<double> losses{10.8234567891, 1e-17, -3.25, 7.0000000001};
  auto d_losses = on_gpu(losses);
  auto d_sum = on_gpu(std::vector<double>{0.1});
  double cpu_sum = 0.1;
  for (std::size_t i = 0; i < losses.size(); ++i) {
    cpu_->add_scalar(&cpu_sum, &losses[i]);
    gpu_->add_scalar(d_sum.data(), d_losses.data() + i);
  }
  EXPECT_TRUE(same_bytes(back(d_sum), std::vector<double>{cpu_sum}));
}

}  // namespace
}  // namespace hsdp::gpu_testing
