#pragma once
// Memory accounting by category: every model-state and buffer allocation is charged to one category, so
// tests can compare bytes per rank with the formulas of shard/formulas.hpp and the log can show peaks.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hsdp {

enum class MemCategory { params, grads, optimizer, activations, comm_buffers, hpz_secondary };
inline constexpr std::size_t kMemCategoryCount = 6;
inline constexpr std::array<MemCategory, kMemCategoryCount> kAllMemCategories = {
    MemCategory::params,      MemCategory::grads,        MemCategory::optimizer,
    MemCategory::activations, MemCategory::comm_buffers, MemCategory::hpz_secondary};

std::string_view to_string(MemCategory c);

class MemoryAccountant {
 public:
  void allocate(MemCategory c, std::size_t bytes);
  void release(MemCategory c, std::size_t bytes);

  std::int64_t current(MemCategory c) const { return current_[index(c)]; }
  std::int64_t peak(MemCategory c) const { return peak_[index(c)]; }
  std::int64_t current_total() const;
  // Peak of the sum over categories (not the sum of per-category peaks).
  std::int64_t peak_total() const { return peak_total_; }
  // Forget peaks (e.g. after set-up, to measure a step): peaks restart at the current values.
  void reset_peaks();

 private:
  static std::size_t index(MemCategory c) { return static_cast<std::size_t>(c); }
  std::array<std::int64_t, kMemCategoryCount> current_{};
  std::array<std::int64_t, kMemCategoryCount> peak_{};
  std::int64_t peak_total_ = 0;
};

// Memory this process may still allocate on its host: /proc/meminfo's MemAvailable, lowered to the cgroup's limit
// minus its usage where one is set (cgroup v2 memory.max, or v1 memory.limit_in_bytes). 0 if neither is readable.
// `source` says which bound it is ("MemAvailable" or "cgroup limit").
struct HostMemory {
  std::uint64_t available = 0;
  std::string source;
};
HostMemory host_memory_available();

}  // namespace hsdp
