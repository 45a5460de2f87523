// Compiled in every build (target hsdp_device_select); the CUDA calls only where HSDP_HAVE_CUDA is defined.
#include "hsdp/device/select_device.hpp"

#include <string>

#include "hsdp/core/error.hpp"

#ifdef HSDP_HAVE_CUDA
#include "hsdp/device/cuda/runtime.hpp"
#endif

namespace hsdp::device {

DeviceType parse_device_type(std::string_view text) {
  if (text == "cpu") return DeviceType::cpu;
  if (text == "cuda") return DeviceType::cuda;
  throw_config("device.type: unknown device '" + std::string(text) + "' (expected cpu or cuda)");
}

const char* to_string(DeviceType type) {
  return type == DeviceType::cuda ? "cuda" : "cpu";
}

bool built_with_cuda() {
#ifdef HSDP_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

SelectedDevice select_device(DeviceType type, int local_rank) {
  SelectedDevice selected;
  if (type == DeviceType::cpu) {
    selected.name = "cpu";
    return selected;
  }
#ifdef HSDP_HAVE_CUDA
  std::string reason;
  const int count = cuda::visible_device_count(&reason);
  if (count == 0) throw_config("device.type=cuda: no CUDA device is visible on this node (" + reason + ")");
  if (local_rank < 0) throw_internal("select_device: negative local rank " + std::to_string(local_rank));
  selected.type = DeviceType::cuda;
  selected.visible_devices = count;
  selected.cuda_device = local_rank % count;
  cuda::check(cudaSetDevice(selected.cuda_device), "cudaSetDevice(" + std::to_string(selected.cuda_device) + ")");
  selected.name = cuda::current_device_info().name;
  return selected;
#else
  (void)local_rank;
  throw_config("device.type=cuda: this hsdp was built without CUDA (HSDP_CUDA=OFF or nvcc not found)");
#endif
}

SelectedDevice select_device(std::string_view type, int local_rank) {
  return select_device(parse_device_type(type), local_rank);
}

}  // namespace hsdp::device
