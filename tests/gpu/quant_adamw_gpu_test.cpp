// Quantization on the GPU against hsdp::quant (bit for bit: memcmp of packed bytes, scales and dequantized
// values), AdamW against optim::adamw_update, and device.type selection.
#include <algorithm>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "../quant/quant_test_util.hpp"
#include "gpu_test_util.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/device/select_device.hpp"
#include "hsdp/optim/adamw.hpp"
#include "hsdp/optim/cuda/adamw.hpp"
#include "hsdp/quant/blockwise.hpp"
#include "hsdp/quant/cuda/blockwise.hpp"
#include "hsdp/quant/fused.hpp"

namespace hsdp::gpu_testing {
namespace {

namespace qc = hsdp::quant::cuda;
namespace oc = hsdp::optim::cuda;
using quant::Bits;

template <typename T>
bool same_bytes(const std::vector<T>& a, std::type_identity_t<std::span<const T>> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), b.size_bytes()) == 0;
}

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::f32;
  else if constexpr (std::is_same_v<T, bf16_t>)
    return DType::bf16;
  else
    return DType::f16;
}

template <typename T>
std::vector<T> converted(const std::vector<float>& x) {
  std::vector<T> out(x.size());
  convert_from_f32(x, out.data(), dtype_of<T>());
  return out;
}

class QuantGpu : public GpuTest {
 protected:
  // Quantizes x (as T) on the GPU and on the CPU and compares everything bit for bit, then dequantizes both ways.
  template <typename T>
  void check_bit_exact(const std::vector<float>& values, Bits bits, std::size_t block) {
    const std::vector<T> x = converted<T>(values);
    const quant::QuantSpec spec{bits, block};
    quant::QuantizedBuffer cpu(x.size(), spec);
    quant::quantize(std::span<const T>(x), cpu);

    auto d_x = upload(x);
    cuda::DeviceBuffer<std::uint8_t> packed(quant::packed_bytes(x.size(), spec.bits));
    cuda::DeviceBuffer<float> scales(quant::scale_count(x.size(), spec.block));
    qc::QuantStatus status;
    status.reset(stream());
    qc::quantize(d_x.data(), dtype_of<T>(), x.size(), spec, packed.data(), scales.data(), status, stream());
    status.throw_if_non_finite(x.size(), stream());
    const std::string what = std::string(quant::to_string(bits)) + ", block " + std::to_string(block) + ", " +
                             std::string(to_string(dtype_of<T>())) + ", " + std::to_string(x.size()) + " elements";
    ASSERT_TRUE(same_bytes(download(packed), cpu.packed())) << "packed bytes differ: " << what;
    ASSERT_TRUE(same_bytes(download(scales), cpu.scales())) << "scales differ: " << what;

    std::vector<T> want(x.size());
    quant::dequantize(cpu.view(), std::span<T>(want));
    cuda::DeviceBuffer<T> out(x.size());
    qc::dequantize(packed.data(), scales.data(), x.size(), spec, out.data(), dtype_of<T>(), stream());
    ASSERT_TRUE(same_bytes(download(out), std::span<const T>(want))) << "dequantized values differ: " << what;
  }
};

TEST_F(QuantGpu, Quantize_Dequantize_BitExactToCpu_Int8AndInt4_AllInputTypes) {
  for (const Bits bits : {Bits::int8, Bits::int4}) {
    for (const std::size_t block : {std::size_t{2048}, std::size_t{64}, std::size_t{6}}) {
      const auto x = quant::test::mixed_blocks(block, block / 2 + 1, bits, 2024);  // odd tail: a half-filled byte
      check_bit_exact<float>(x, bits, block);
      // FLT_MAX rounds to Inf in bf16 (a non-finite input, refused by design): keep the near-FLT_MAX block below it.
      std::vector<float> below_bf16_inf = x;
      for (float& v : below_bf16_inf) v = std::clamp(v, -3.0e38f, 3.0e38f);
      check_bit_exact<bf16_t>(below_bf16_inf, bits, block);
      // fp16 cannot hold the huge blocks: the same patterns scaled into its range.
      std::vector<float> small = quant::test::mixed_blocks(block, block / 2 + 1, bits, 7);
      for (float& v : small) v = std::abs(v) < 6.0e4f ? v : (v > 0 ? 6.0e4f : -6.0e4f);
      check_bit_exact<f16_t>(small, bits, block);
    }
  }
}

TEST_F(QuantGpu, DequantizeAccumulate_IsTheCpuReduceDequantize_BitForBit) {
  const quant::QuantSpec spec{Bits::int4, 256};
  const std::size_t n = 5000;
  std::vector<quant::QuantizedBuffer> cpu;
  std::vector<quant::QuantizedView> views;
  cuda::DeviceBuffer<float> acc(n);
  cuda::zero_on_device(acc.data(), n, stream());
  std::vector<cuda::DeviceBuffer<std::uint8_t>> packed;
  std::vector<cuda::DeviceBuffer<float>> scales;
  for (int k = 0; k < 3; ++k) {
    const auto x = quant::test::random_values(n, 10.0f, 100 + k);
    cpu.emplace_back(n, spec);
    quant::quantize(std::span<const float>(x), cpu.back());
    packed.push_back(upload(std::vector<std::uint8_t>(cpu.back().packed().begin(), cpu.back().packed().end())));
    scales.push_back(upload(std::vector<float>(cpu.back().scales().begin(), cpu.back().scales().end())));
  }
  for (const auto& q : cpu) views.push_back(q.view());
  std::vector<float> want(n);
  quant::reduce_dequantize(views, want);
  for (int k = 0; k < 3; ++k) {
    qc::dequantize_accumulate(packed[k].data(), scales[k].data(), n, spec, acc.data(), stream());
  }
  EXPECT_TRUE(same_bytes(download(acc), std::span<const float>(want)));
}

TEST_F(QuantGpu, NonFiniteInput_ThrowsTheCpuMessage_NamingTheFirstElement) {
  auto x = random_floats(10000, 3);
  x[7777] = std::numeric_limits<float>::infinity();
  x[5000] = std::numeric_limits<float>::quiet_NaN();
  const quant::QuantSpec spec{Bits::int8, 2048};
  auto d_x = upload(x);
  cuda::DeviceBuffer<std::uint8_t> packed(quant::packed_bytes(x.size(), spec.bits));
  cuda::DeviceBuffer<float> scales(quant::scale_count(x.size(), spec.block));
  qc::QuantStatus status;
  status.reset(stream());
  qc::quantize(d_x.data(), DType::f32, x.size(), spec, packed.data(), scales.data(), status, stream());
  try {
    status.throw_if_non_finite(x.size(), stream());
    FAIL() << "no error for a NaN";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::internal);
    EXPECT_NE(std::string(e.what()).find("non-finite value at element 5000 of 10000"), std::string::npos) << e.what();
  }
}

// Tolerance: params, m and v within 1e-6 relative plus 1e-6 of the tensor's largest magnitude (for elements where
// the update nearly cancels the value). The CPU build contracts some of the update's multiply-adds into FMAs
// (g++ -march=native), nvcc others: results may differ by an ulp or two per operation. The bf16 compute copy must be
// exactly the bf16 rounding of the GPU's own params.
TEST_F(GpuTest, AdamW_MatchesOptimAdamwUpdate_OverSeveralSteps_WithDecaySegments) {
  const std::size_t n = 70001;
  const std::vector<optim::DecaySegment> segments{
      {0, 30000, true}, {30000, 1, false}, {30001, 20000, true}, {50001, 20000, false}};
  const optim::AdamWConfig config{0.9f, 0.95f, 1e-8f, 0.1f};
  auto params = random_floats(n, 80), m = std::vector<float>(n, 0.0f), v = std::vector<float>(n, 0.0f);
  auto d_params = upload(params), d_m = upload(m), d_v = upload(v);
  cuda::DeviceBuffer<bf16_t> d_copy(n);
  const oc::DeviceDecaySegments d_segments(segments, n);
  for (std::int64_t t = 1; t <= 3; ++t) {
    const auto grads = random_floats(n, 90 + static_cast<std::uint64_t>(t), -3.0f, 3.0f);
    const optim::AdamWStep step{1e-3f * static_cast<float>(t), t, 0.5f};
    optim::adamw_update(config, step, params, grads, m, v, segments);
    auto d_grads = upload(grads);
    oc::adamw_update(oc::adamw_values(config, step), d_segments, d_params.data(), d_grads.data(), d_m.data(), d_v.data(), d_copy.data(),
                     stream());
  }
  const Tolerance tight{1e-6, 1e-6};
  const auto got_params = download(d_params);
  EXPECT_TRUE(close(got_params, params, tight)) << "params";
  EXPECT_TRUE(close(download(d_m), m, tight)) << "m";
  EXPECT_TRUE(close(download(d_v), v, tight)) << "v";
  const auto copy = download(d_copy);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(copy[i].bits, float_to_bf16(got_params[i]).bits) << "element " << i;
}

TEST(SelectDevice, CpuNeedsNothing_UnknownTypeIsAConfigErrorNamingTheKey) {
  EXPECT_EQ(device::select_device("cpu", 3).type, device::DeviceType::cpu);
  try {
    device::select_device("gpu", 0);
    FAIL() << "no error for device.type=gpu";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(std::string(e.what()).find("device.type"), std::string::npos) << e.what();
  }
}

// Runs on every machine: with a GPU it selects one; without, it is the config error a user sees.
TEST(SelectDevice, Cuda_TakesLocalRankModuloDevices_OrSaysNoneIsVisible) {
  std::string reason;
  const int count = cuda::visible_device_count(&reason);
  if (count == 0) {
    try {
      device::select_device("cuda", 0);
      FAIL() << "no error without a CUDA device";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::config);
      EXPECT_NE(std::string(e.what()).find("device.type=cuda: no CUDA device is visible on this node"),
                std::string::npos)
          << e.what();
    }
    return;
  }
  const auto selected = device::select_device("cuda", 2 * count + 1);
  EXPECT_EQ(selected.type, device::DeviceType::cuda);
  EXPECT_EQ(selected.cuda_device, 1 % count);
  int current = -1;
  cuda::check(cudaGetDevice(&current), "cudaGetDevice");
  EXPECT_EQ(current, selected.cuda_device);
  EXPECT_FALSE(selected.name.empty());
}

}  // namespace
}  // namespace hsdp::gpu_testing
