#pragma once
// A HostStaging whose copies land late, as a GPU's do: each copy is a memcpy made only when done() has been asked
// a number of times drawn per copy (a fence likewise, copying nothing) (0 to 3, from a generator seeded by the rank, so
// that the ranks see their copies land in different orders), or at wait(). A StagedCommunicator over it must still
// issue its collectives in call order on every rank, and never read a host buffer before its copy landed or free one
// before its copy back did.
#include <cstring>
#include <functional>
#include <memory>
#include <random>

#include "hsdp/comm/staged.hpp"

namespace hsdp::comm::testing {

// A staged copy that lands late: a memcpy (nothing for a fence) made at the first done() that finds ready() true,
// or at wait(); done() is true from then on.
class LateCopy final : public StagedCopy {
 public:
  LateCopy(const void* from, void* to, std::size_t bytes, std::function<bool()> ready)
      : from_(from), to_(to), bytes_(bytes), ready_(std::move(ready)) {}
  bool done() override {
    if (!landed_ && !ready_()) return false;
    wait();
    return true;
  }
  void wait() override {
    if (!landed_ && from_ != nullptr) std::memcpy(to_, from_, bytes_);
    landed_ = true;
  }

 private:
  const void* from_;
  void* to_;
  std::size_t bytes_;
  std::function<bool()> ready_;
  bool landed_ = false;
};

class DeferredStaging final : public HostStaging {
 public:
  explicit DeferredStaging(std::uint64_t seed) : memcpy_(make_memcpy_staging()), random_(seed) {}

  std::string_view name() const override { return "deferred memcpy"; }
  HostBlock allocate(std::size_t bytes) override { return memcpy_->allocate(bytes); }
  std::unique_ptr<StagedCopy> to_host(const void* device, void* host, std::size_t bytes) override {
    return later(device, host, bytes);
  }
  std::unique_ptr<StagedCopy> to_device(const void* host, void* device, std::size_t bytes) override {
    return later(host, device, bytes);
  }
  std::unique_ptr<StagedCopy> fence() override { return later(nullptr, nullptr, 0); }

 private:
  std::unique_ptr<StagedCopy> later(const void* from, void* to, std::size_t bytes) {
    return std::make_unique<LateCopy>(
        from, to, bytes,
        [polls = std::uniform_int_distribution<int>(0, 3)(random_)]() mutable { return polls-- <= 0; });
  }

  std::shared_ptr<HostStaging> memcpy_;
  std::mt19937_64 random_;
};

}  // namespace hsdp::comm::testing
