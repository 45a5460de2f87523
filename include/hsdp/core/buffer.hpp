#pragma once
// Buffer<T>: an owned, 64-byte aligned, zero-initialised array, optionally charged to a MemoryAccountant
// category for as long as it lives. Views are std::span.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

#include "hsdp/core/memory.hpp"

namespace hsdp {

inline constexpr std::size_t kBufferAlignment = 64;

template <typename T>
class Buffer {
  static_assert(std::is_trivially_copyable_v<T>, "Buffer holds plain data only");

 public:
  Buffer() = default;
  explicit Buffer(std::size_t count) { reset(count); }
  Buffer(std::size_t count, MemoryAccountant& accountant, MemCategory category) {
    reset(count, &accountant, category);
  }
  ~Buffer() { free_storage(); }

  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& other) noexcept { swap(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      free_storage();
      swap(other);
    }
    return *this;
  }

  // Re-sizes to `count` zeroed elements (old contents are dropped), charged to `accountant` if given.
  void reset(std::size_t count, MemoryAccountant* accountant = nullptr,
             MemCategory category = MemCategory::params) {
    free_storage();
    if (count == 0) return;
    const std::size_t bytes = round_up(count * sizeof(T));
    data_ = static_cast<T*>(std::aligned_alloc(kBufferAlignment, bytes));
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(static_cast<void*>(data_), 0, bytes);
    size_ = count;
    accountant_ = accountant;
    category_ = category;
    if (accountant_ != nullptr) accountant_->allocate(category_, size_bytes());
  }
  void clear() { free_storage(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t size_bytes() const { return size_ * sizeof(T); }
  bool empty() const { return size_ == 0; }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  std::span<T> span() { return {data_, size_}; }
  std::span<const T> span() const { return {data_, size_}; }
  operator std::span<T>() { return span(); }
  operator std::span<const T>() const { return span(); }
  void fill_zero() {
    if (size_) std::memset(static_cast<void*>(data_), 0, size_bytes());
  }

 private:
  static std::size_t round_up(std::size_t bytes) {
    return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  }
  void free_storage() {
    if (data_ == nullptr) return;
    if (accountant_ != nullptr) accountant_->release(category_, size_bytes());
    std::free(data_);
    data_ = nullptr;
    size_ = 0;
    accountant_ = nullptr;
  }
  void swap(Buffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(accountant_, other.accountant_);
    std::swap(category_, other.category_);
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
  MemoryAccountant* accountant_ = nullptr;
  MemCategory category_ = MemCategory::params;
};

}  // namespace hsdp
