#pragma once
// device.type = cpu | cuda: which compute backend a rank uses, and for cuda which GPU (one GPU per rank:
// local rank r takes device r % <visible devices>, as `CUDA_VISIBLE_DEVICES` and the launcher leave them).
// This header and its target (hsdp_device_select) exist in every build, with or without CUDA, so hsdp-train
// can validate the deck key the same way everywhere; the answer for cuda depends on the build (HSDP_HAVE_CUDA).
#include <string>
#include <string_view>

namespace hsdp::device {

enum class DeviceType { cpu, cuda };

// Parses "cpu" / "cuda"; throws a config Error naming device.type on anything else.
DeviceType parse_device_type(std::string_view text);
const char* to_string(DeviceType type);

struct SelectedDevice {
  DeviceType type = DeviceType::cpu;
  int cuda_device = -1;     // the GPU made current (cudaSetDevice) for cuda, -1 for cpu
  int visible_devices = 0;  // GPUs this process sees (0 for cpu)
  std::string name;         // "cpu" or the GPU's name, e.g. "NVIDIA H100 80GB HBM3"
};

// cpu: nothing to do. cuda: cudaSetDevice(local_rank % visible devices) and returns it. Throws a config Error
//   "device.type=cuda: this hsdp was built without CUDA (HSDP_CUDA=OFF or nvcc not found)", or
//   "device.type=cuda: no CUDA device is visible on this node (<CUDA's reason>)".
SelectedDevice select_device(DeviceType type, int local_rank);
SelectedDevice select_device(std::string_view type, int local_rank);

// True when this build has the CUDA backend (HSDP_HAVE_CUDA).
bool built_with_cuda();

}  // namespace hsdp::device
