// device.type in a build without CUDA (HSDP_CUDA=OFF or nvcc not found): cpu works, cuda is the config error that
// says why. (Builds with CUDA test select_device in quant_adamw_gpu_test.cpp.)
#include <gtest/gtest.h>

#include <string>

#include "hsdp/core/error.hpp"
#include "hsdp/device/select_device.hpp"

namespace hsdp::device {
namespace {

TEST(SelectDevice, WithoutCuda_CpuIsSelected_CudaIsAConfigErrorSayingTheBuildLacksCuda) {
  EXPECT_FALSE(built_with_cuda());
  EXPECT_EQ(select_device("cpu", 0).type, DeviceType::cpu);
  try {
    select_device("cuda", 0);
    FAIL() << "device.type=cuda was accepted by a build without CUDA";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_EQ(std::string(e.what()),
              "device.type=cuda: this hsdp was built without CUDA (HSDP_CUDA=OFF or nvcc not found)");
  }
}

}  // namespace
}  // namespace hsdp::device
