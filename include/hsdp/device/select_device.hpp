#pragma once
// device.type = cpu | cuda: which compute backend a rank uses, and for cuda which GPU: a GPU per rank where the host
// has enough, from the GPUs each rank sees (`CUDA_VISIBLE_DEVICES` and the launcher's binding leave them:
// assign_gpus below; hsdp-train gathers them over the host's ranks).
// This header and its target (hsdp_device_select) exist in every build, with or without CUDA, so hsdp-train
// can validate the deck key the same way everywhere; the answer for cuda depends on the build (HSDP_HAVE_CUDA).
#include <string>
#include <string_view>
#include <vector>

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

// The config Error of a process that sees no GPU: "device.type=cuda: no CUDA device is visible on this node
// (<reason>)".
[[noreturn]] void throw_no_gpu(const std::string& reason);

// cuda: makes GPU `index` of those this process sees current (cudaSetDevice) and returns it. Without CUDA: the
// config Error of select_device.
SelectedDevice select_gpu(int index);

// The GPUs this process sees, each by its identity (the UUID CUDA reports, as 32 hex digits), in CUDA's order.
// Empty where none is visible or one cannot be read (then *reason says why, in CUDA's words) or the build has no
// CUDA. Throws nothing: hsdp-train's ranks call it before a collective that every rank must reach.
std::vector<std::string> visible_gpus(std::string* reason);

// Which GPU each rank of a host takes. visible[i]: the identities of the GPUs the host's rank i sees, in its own
// CUDA order (the ranks in order of their world rank). The fewest ranks on the busiest GPU that any placement allows
// (a GPU per rank wherever one exists): the ranks that see fewest GPUs choose first (among equals, in rank order),
// each takes, of the GPUs it sees, one the fewest ranks before it took (the first such in its order), and a rank
// whose GPUs are all at the bound moves a taker of one of them to another GPU it sees (an augmenting path, as a
// bipartite matching does); the bound starts at one rank per GPU and rises until every rank is placed. Where every
// rank sees every GPU this is rank i % count, as a plain launch gives; where a launcher binds each task to the GPUs
// near its cores (Slurm's --gpu-bind=closest, whose tasks alternate between sockets by default: each sees only its
// socket's GPUs, as its devices 0, 1, ...), each rank still gets a GPU of its own while its socket has one free.
// Returns each rank's index into its own list; -1 for a rank that sees none.
std::vector<int> assign_gpus(const std::vector<std::vector<std::string>>& visible);

// assign_gpus for a host's ranks, and who shares: node[i] is rank i's node in the process mesh (emulated nodes on one
// host are nodes of their own; NCCL inside a node needs a GPU per rank of that node).
struct HostGpus {
  std::vector<int> index;             // per rank: its GPU among those it sees (-1: it sees none)
  std::vector<int> ranks_on_gpu;      // per rank: the host's ranks on that GPU, this one included (0: it sees none)
  int most_of_a_node_on_one_gpu = 0;  // over the host's GPUs and nodes: the most ranks of one node on one GPU
  int gpus = 0;                       // the host's GPUs that some rank sees
};
HostGpus plan_host_gpus(const std::vector<std::vector<std::string>>& visible, const std::vector<int>& node);

// True when this build has the CUDA backend (HSDP_HAVE_CUDA).
bool built_with_cuda();

}  // namespace hsdp::device
