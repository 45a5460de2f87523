#pragma once
// UnitBuffers<T>: one flat Buffer<T> per unit of a ModelLayout, with the per-unit pointer arrays that
// Gpt::forward/backward take. For a single rank, tests and benchmarks; the sharding engine keeps its own
// FlatParamUnits instead.
#include <cstdint>
#include <span>
#include <vector>

#include "hsdp/core/buffer.hpp"
#include "hsdp/core/memory.hpp"
#include "hsdp/model/init.hpp"
#include "hsdp/model/layout.hpp"

namespace hsdp::model {

template <typename T>
class UnitBuffers {
 public:
  explicit UnitBuffers(const ModelLayout& layout, MemoryAccountant* accountant = nullptr,
                       MemCategory category = MemCategory::params) {
    units_.reserve(static_cast<std::size_t>(layout.num_units()));
    for (const UnitInfo& u : layout.units()) {
      units_.emplace_back();
      units_.back().reset(u.numel, accountant, category);
    }
    for (Buffer<T>& b : units_) {
      pointers_.push_back(b.data());
      const_pointers_.push_back(b.data());
    }
  }

  int num_units() const { return static_cast<int>(units_.size()); }
  std::span<T> unit(int i) { return units_[static_cast<std::size_t>(i)].span(); }
  std::span<const T> unit(int i) const { return units_[static_cast<std::size_t>(i)].span(); }
  // A parameter's elements as stored (p.numel).
  std::span<T> param(const ParamInfo& p) { return unit(p.unit).subspan(p.offset, p.numel); }
  std::span<const T> param(const ParamInfo& p) const { return unit(p.unit).subspan(p.offset, p.numel); }

  std::span<T* const> pointers() { return pointers_; }
  std::span<const T* const> const_pointers() const { return const_pointers_; }

  void init(const ModelLayout& layout, std::uint64_t seed) {
    for (int i = 0; i < num_units(); ++i) init_unit<T>(layout, i, unit(i), seed);
  }
  void zero() {
    for (Buffer<T>& b : units_) b.fill_zero();
  }

 private:
  std::vector<Buffer<T>> units_;  // a Buffer's storage does not move when the vector grows
  std::vector<T*> pointers_;
  std::vector<const T*> const_pointers_;
};

}  // namespace hsdp::model
