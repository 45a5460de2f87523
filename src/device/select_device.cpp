// Compiled in every build (target hsdp_device_select); the CUDA calls only where HSDP_HAVE_CUDA is defined.
#include "hsdp/device/select_device.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

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

void throw_no_gpu(const std::string& reason) {
  throw_config("device.type=cuda: no CUDA device is visible on this node (" + reason + ")");
}

#ifdef HSDP_HAVE_CUDA
namespace {

// The GPUs this process sees; none is throw_no_gpu's error.
int visible_count() {
  std::string reason;
  const int count = cuda::visible_device_count(&reason);
  if (count == 0) throw_no_gpu(reason);
  return count;
}

// Makes GPU `index` of the `count` this process sees current.
SelectedDevice use_gpu(int index, int count) {
  if (index < 0 || index >= count) {
    throw_internal("select_gpu: GPU " + std::to_string(index) + " of " + std::to_string(count) + " visible");
  }
  SelectedDevice selected;
  selected.type = DeviceType::cuda;
  selected.visible_devices = count;
  selected.cuda_device = index;
  cuda::check(cudaSetDevice(index), "cudaSetDevice(" + std::to_string(index) + ")");
  selected.name = cuda::current_device_info().name;
  return selected;
}

}  // namespace
#endif

SelectedDevice select_device(DeviceType type, int local_rank) {
  if (type == DeviceType::cpu) {
    SelectedDevice selected;
    selected.name = "cpu";
    return selected;
  }
#ifdef HSDP_HAVE_CUDA
  const int count = visible_count();
  if (local_rank < 0) throw_internal("select_device: negative local rank " + std::to_string(local_rank));
  return use_gpu(local_rank % count, count);
#else
  (void)local_rank;
  return select_gpu(0);
#endif
}

SelectedDevice select_gpu(int index) {
#ifdef HSDP_HAVE_CUDA
  return use_gpu(index, visible_count());
#else
  (void)index;
  throw_config("device.type=cuda: this hsdp was built without CUDA (HSDP_CUDA=OFF or nvcc not found)");
#endif
}

std::vector<std::string> visible_gpus(std::string* reason) {
  std::vector<std::string> ids;
#ifdef HSDP_HAVE_CUDA
  const int count = cuda::visible_device_count(reason);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (const cudaError_t status = cudaGetDeviceProperties(&prop, i); status != cudaSuccess) {
      cudaGetLastError();  // reset the runtime's last error, as visible_device_count does
      if (reason != nullptr)
        *reason = "cudaGetDeviceProperties(" + std::to_string(i) + "): " + cudaGetErrorString(status);
      return {};
    }
    char hex[33];
    for (int b = 0; b < 16; ++b) {
      std::snprintf(hex + 2 * b, 3, "%02x", static_cast<unsigned>(static_cast<unsigned char>(prop.uuid.bytes[b])));
    }
    ids.emplace_back(hex, 32);
  }
#else
  if (reason != nullptr) *reason = "this hsdp was built without CUDA";
#endif
  return ids;
}

namespace {

// assign_gpus with at most `cap` ranks on a GPU: each rank in `order` takes, of the GPUs it sees below the cap, one
// the fewest ranks took so far (the first such in its order); where all it sees are full, an augmenting path moves
// ranks along (a rank on a full GPU to another GPU it sees, ...) until one has room, as a bipartite matching does.
// False when no placement under the cap exists.
bool place_under_cap(const std::vector<std::vector<std::string>>& visible, const std::vector<std::size_t>& order,
                     int cap, std::vector<int>& index) {
  std::map<std::string, std::vector<std::size_t>> on;  // the ranks on each GPU
  const auto load = [&](const std::string& gpu) { return static_cast<int>(on[gpu].size()); };
  index.assign(visible.size(), -1);
  const auto put = [&](std::size_t rank, std::size_t choice) {
    on[visible[rank][choice]].push_back(rank);
    index[rank] = static_cast<int>(choice);
  };
  const auto take_off = [&](std::size_t rank) {
    std::erase(on[visible[rank][static_cast<std::size_t>(index[rank])]], rank);
  };
  // Room for `rank` on a GPU it sees that the search has not passed (`seen`: full ones): a GPU below the cap, else a
  // full one where a rank on it finds room elsewhere the same way. Moves `rank` there (off its GPU, if placed).
  std::set<std::string> seen;
  const auto move = [&](const auto& self, std::size_t rank) -> bool {
    const auto move_to = [&](std::size_t choice) {
      if (index[rank] >= 0) take_off(rank);
      put(rank, choice);
      return true;
    };
    for (std::size_t c = 0; c < visible[rank].size(); ++c) {
      if (!seen.contains(visible[rank][c]) && load(visible[rank][c]) < cap) return move_to(c);
    }
    for (std::size_t c = 0; c < visible[rank].size(); ++c) {
      if (!seen.insert(visible[rank][c]).second) continue;
      for (const std::size_t other : std::vector<std::size_t>(on[visible[rank][c]])) {
        if (self(self, other)) return move_to(c);
      }
    }
    return false;
  };
  for (const std::size_t r : order) {
    const std::vector<std::string>& sees = visible[r];
    if (sees.empty()) continue;
    int best = -1;
    for (std::size_t i = 0; i < sees.size(); ++i) {
      if (load(sees[i]) < cap && (best < 0 || load(sees[i]) < load(sees[static_cast<std::size_t>(best)]))) {
        best = static_cast<int>(i);
      }
    }
    if (best >= 0) {
      put(r, static_cast<std::size_t>(best));
      continue;
    }
    seen.clear();
    if (!move(move, r)) return false;
  }
  return true;
}

}  // namespace

std::vector<int> assign_gpus(const std::vector<std::vector<std::string>>& visible) {
  // The ranks with the fewest choices first (in world-rank order among equals), so that a rank that sees more GPUs
  // does not take the one GPU of a rank that sees only it; then the smallest cap on ranks per GPU that places all.
  std::vector<std::size_t> order(visible.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return visible[a].size() < visible[b].size(); });
  std::vector<int> index;
  for (int cap = 1;; ++cap) {  // cap = the number of ranks always places every rank that sees a GPU
    if (place_under_cap(visible, order, cap, index)) return index;
  }
}

HostGpus plan_host_gpus(const std::vector<std::vector<std::string>>& visible, const std::vector<int>& node) {
  if (node.size() != visible.size()) throw_internal("plan_host_gpus: a node for each rank");
  HostGpus plan;
  plan.index = assign_gpus(visible);
  std::map<std::string, int> on_gpu;
  std::map<std::pair<int, std::string>, int> of_node_on_gpu;
  for (std::size_t i = 0; i < visible.size(); ++i) {
    if (plan.index[i] < 0) continue;
    const std::string& gpu = visible[i][static_cast<std::size_t>(plan.index[i])];
    ++on_gpu[gpu];
    plan.most_of_a_node_on_one_gpu = std::max(plan.most_of_a_node_on_one_gpu, ++of_node_on_gpu[{node[i], gpu}]);
  }
  std::set<std::string> gpus;
  for (std::size_t i = 0; i < visible.size(); ++i) {
    plan.ranks_on_gpu.push_back(plan.index[i] < 0 ? 0 : on_gpu[visible[i][static_cast<std::size_t>(plan.index[i])]]);
    gpus.insert(visible[i].begin(), visible[i].end());
  }
  plan.gpus = static_cast<int>(gpus.size());
  return plan;
}

SelectedDevice select_device(std::string_view type, int local_rank) {
  return select_device(parse_device_type(type), local_rank);
}

}  // namespace hsdp::device
