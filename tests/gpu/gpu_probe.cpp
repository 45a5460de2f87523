// Says whether this process sees a CUDA device: tools/test.sh prints its line before ctest, and run_with_gpus.sh
// uses it to size MPI GPU tests. Exit 0 with a device, 77 (ctest's skip code for the gpu label) without.
//   gpu_probe            "2 CUDA devices visible: NVIDIA H100 80GB HBM3, ..." or "no CUDA device visible: <reason>"
//   gpu_probe --count    just the number of devices (or the no-device line, exit 77)
#include <cuda_runtime_api.h>

#include <iostream>
#include <string>
#include <string_view>

#include "hsdp/device/cuda/runtime.hpp"

int main(int argc, char** argv) {
  std::string reason;
  const int count = hsdp::device::cuda::visible_device_count(&reason);
  if (count == 0) {
    std::cout << "no CUDA device visible: " << reason << "\n";
    return 77;
  }
  if (argc > 1 && std::string_view(argv[1]) == "--count") {
    std::cout << count << "\n";
    return 0;
  }
  std::cout << count << (count == 1 ? " CUDA device" : " CUDA devices") << " visible:";
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) std::cout << (d ? ", " : " ") << prop.name;
  }
  std::cout << "\n";
  return 0;
}
