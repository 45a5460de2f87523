#include "hsdp/core/memory.hpp"

#include <algorithm>
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

}  // namespace hsdp
