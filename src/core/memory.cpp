#include "hsdp/core/memory.hpp"

#include <algorithm>
#include <fstream>
#include <optional>
#include <utility>
#include <numeric>

#include "hsdp/core/error.hpp"

namespace hsdp {

std::string_view to_string(MemCategory c) {
  switch (c) {
    case MemCategory::params: return "params";
    case MemCategory::grads: return "grads";
    case MemCategory::optimizer: return "optimizer";
    case MemCategory::activations: return "activations";
    case MemCategory::comm_buffers: return "comm_buffers";
    case MemCategory::hpz_secondary: return "hpz_secondary";
  }
  return "?";
}

void MemoryAccountant::allocate(MemCategory c, std::size_t bytes) {
  auto& cur = current_[index(c)];
  cur += static_cast<std::int64_t>(bytes);
  peak_[index(c)] = std::max(peak_[index(c)], cur);
  peak_total_ = std::max(peak_total_, current_total());
}

void MemoryAccountant::release(MemCategory c, std::size_t bytes) {
  auto& cur = current_[index(c)];
  if (cur < static_cast<std::int64_t>(bytes)) {
    throw_internal("memory accountant: releasing more " + std::string(to_string(c)) + " bytes than allocated");
  }
  cur -= static_cast<std::int64_t>(bytes);
}

std::int64_t MemoryAccountant::current_total() const {
  return std::accumulate(current_.begin(), current_.end(), std::int64_t{0});
}

void MemoryAccountant::reset_peaks() {
  peak_ = current_;
  peak_total_ = current_total();
}

namespace {

// The first number of a one-line file (cgroup files); nothing if absent or "max".
std::optional<std::uint64_t> read_number(const char* path) {
  std::ifstream file(path);
  std::string word;
  if (!(file >> word) || word.empty() || word.find_first_not_of("0123456789") != std::string::npos) return {};
  return std::stoull(word);
}

}  // namespace

HostMemory host_memory_available() {
  HostMemory m;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") {
      m.available = kib * 1024;
      m.source = "MemAvailable";
      break;
    }
  }
  const std::pair<const char*, const char*> cgroups[] = {
      {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
  for (const auto& [limit_path, usage_path] : cgroups) {
    const std::optional<std::uint64_t> limit = read_number(limit_path);
    const std::optional<std::uint64_t> usage = read_number(usage_path);
    if (!limit || !usage) continue;
    const std::uint64_t left = *limit > *usage ? *limit - *usage : 0;
    if (m.source.empty() || left < m.available) {
      m.available = left;
      m.source = "cgroup limit";
    }
    break;
  }
  return m;
}

}  // namespace hsdp
