#include "hsdp/comm/staged.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp::comm {
namespace {

constexpr std::size_t kAlignment = 64;

class LandedCopy final : public StagedCopy {
 public:
  bool done() override { return true; }
  void wait() override {}
};

class MemcpyStaging final : public HostStaging {
 public:
  std::string_view name() const override { return "memcpy"; }
  HostBlock allocate(std::size_t bytes) override {
    const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    auto* memory = static_cast<std::byte*>(std::aligned_alloc(kAlignment, rounded));
    if (memory == nullptr)
      throw_internal("staging: cannot allocate " + std::to_string(rounded) + " bytes of host memory");
    return HostBlock(memory, [](std::byte* p) { std::free(p); });
  }
  std::unique_ptr<StagedCopy> to_host(const void* device, void* host, std::size_t bytes) override {
    std::memcpy(host, device, bytes);
    return std::make_unique<LandedCopy>();
  }
  std::unique_ptr<StagedCopy> to_device(const void* host, void* device, std::size_t bytes) override {
    std::memcpy(device, host, bytes);
    return std::make_unique<LandedCopy>();
  }
  std::unique_ptr<StagedCopy> fence() override { return std::make_unique<LandedCopy>(); }
};

}  // namespace

std::shared_ptr<HostStaging> make_memcpy_staging() {
  return std::make_shared<MemcpyStaging>();
}

// Host buffers by size (a step asks for the same sizes again, so best fit finds each exact), and the collectives
// whose carrying call is not issued yet, in call order.
struct StagedCommunicator::Pool {
  struct Block {
    HostBlock memory;
    std::size_t bytes = 0;
  };

  std::shared_ptr<HostStaging> staging;
  std::multimap<std::size_t, Block> free;
  std::size_t allocated = 0;
  std::deque<std::shared_ptr<Operation>> unissued;

  Block take(std::size_t bytes) {
    const std::size_t wanted = bytes == 0 ? 1 : bytes;
    if (auto it = free.lower_bound(wanted); it != free.end()) {
      Block block = std::move(it->second);
      free.erase(it);
      return block;
    }
    ++allocated;
    return Block{staging->allocate(wanted), wanted};
  }
  void give_back(Block block) {
    if (block.memory) free.emplace(block.bytes, std::move(block));
  }
  // Issues the queued collectives whose inputs have landed, in call order; with `until`, waits for the inputs of
  // every collective up to it.
  void advance(const Operation* until = nullptr);
};

struct StagedCommunicator::Operation {
  enum class Step { copying_in, communicating, copying_out, done };

  std::weak_ptr<Pool> pool;  // the communicator's (its destructor issues every queued collective)
  std::shared_ptr<HostStaging> staging;
  Shape shape;
  Pool::Block send_block, recv_block;
  std::byte* host_send = nullptr;
  std::byte* host_recv = nullptr;
  std::unique_ptr<StagedCopy> copy_in, copy_out;
  CommHandle request;
  Step step = Step::copying_in;

  void issue() {
    request = shape.issue(host_send, host_recv);
    step = Step::communicating;
  }
  void copy_back() {
    if (shape.recv_bytes > 0) copy_out = staging->to_device(host_recv, shape.recv, shape.recv_bytes);
    step = Step::copying_out;
  }
  void finish() {
    copy_in.reset();
    copy_out.reset();
    if (const std::shared_ptr<Pool> p = pool.lock()) {  // else the blocks go with the operation
      p->give_back(std::move(send_block));
      p->give_back(std::move(recv_block));
    }
    step = Step::done;
  }
  // Issues what can be issued (until: up to this operation, waiting for the inputs).
  void advance(const Operation* until) {
    if (const std::shared_ptr<Pool> p = pool.lock()) p->advance(until);
  }

  bool test() {
    if (step == Step::copying_in) advance(nullptr);
    if (step == Step::copying_in) return false;
    if (step == Step::communicating) {
      if (!request.done()) return false;
      copy_back();
    }
    if (step == Step::copying_out) {
      if (copy_out && !copy_out->done()) return false;
      finish();
    }
    return true;
  }
  void wait() {
    if (step == Step::copying_in) advance(this);
    if (step == Step::communicating) {
      request.wait();
      copy_back();
    }
    if (step == Step::copying_out) {
      if (copy_out) copy_out->wait();
      finish();
    }
  }
};

void StagedCommunicator::Pool::advance(const Operation* until) {
  while (!unissued.empty()) {
    const std::shared_ptr<Operation> front = unissued.front();
    const bool landed = !front->copy_in || front->copy_in->done();
    if (!landed) {
      if (until == nullptr) return;
      front->copy_in->wait();
    }
    unissued.pop_front();
    front->issue();
    if (front.get() == until) return;
  }
}

namespace {

class StagedOp final : public PendingOp {
 public:
  explicit StagedOp(std::shared_ptr<StagedCommunicator::Operation> op) : op_(std::move(op)) {}
  ~StagedOp() override { op_->wait(); }
  StagedOp(const StagedOp&) = delete;
  StagedOp& operator=(const StagedOp&) = delete;
  void wait() override { op_->wait(); }
  bool test() override { return op_->test(); }

 private:
  std::shared_ptr<StagedCommunicator::Operation> op_;
};

bool within(const std::byte* inner, std::size_t inner_bytes, const std::byte* outer, std::size_t outer_bytes) {
  return inner >= outer && inner + inner_bytes <= outer + outer_bytes;
}

}  // namespace

StagedCommunicator::StagedCommunicator(Communicator& carrier, std::shared_ptr<HostStaging> staging,
                                       DirectCollectives direct)
    : carrier_(carrier),
      staging_(std::move(staging)),
      direct_(direct),
      pool_(std::make_shared<Pool>(Pool{staging_, {}, 0, {}})) {}

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> carrier, std::shared_ptr<HostStaging> staging,
                                       DirectCollectives direct)
    : StagedCommunicator(*carrier, std::move(staging), direct) {
  owned_ = std::move(carrier);
}

StagedCommunicator::~StagedCommunicator() {
  // Handles wait for their collectives when they go; one that outlives the communicator must not find it half-issued.
  if (!pool_->unissued.empty()) pool_->advance(pool_->unissued.back().get());
}

std::size_t StagedCommunicator::host_buffers_allocated() const {
  return pool_->allocated;
}

std::uint64_t StagedCommunicator::sequence() const {
  return carrier_.sequence() + pool_->unissued.size();
}

CommHandle StagedCommunicator::staged(Shape shape) {
  auto op = std::make_shared<Operation>();
  op->pool = pool_;
  op->staging = staging_;
  const auto* send = static_cast<const std::byte*>(shape.send);
  auto* recv = static_cast<std::byte*>(shape.recv);
  const std::size_t sb = shape.send_bytes, rb = shape.recv_bytes;
  // One host buffer where the device ranges nest (the in-place forms), else one for each.
  if (sb > 0 && rb > 0 && within(send, sb, recv, rb)) {
    op->recv_block = pool_->take(rb);
    op->host_recv = op->recv_block.memory.get();
    op->host_send = op->host_recv + (send - recv);
  } else if (sb > 0 && rb > 0 && within(recv, rb, send, sb)) {
    op->send_block = pool_->take(sb);
    op->host_send = op->send_block.memory.get();
    op->host_recv = op->host_send + (recv - send);
  } else {
    if (sb > 0 && rb > 0 && send < recv + rb && recv < send + sb) {
      throw_internal("staged collective on group '" + name() + "': its send and receive ranges overlap partly");
    }
    op->send_block = pool_->take(sb);
    op->recv_block = pool_->take(rb);
    op->host_send = op->send_block.memory.get();
    op->host_recv = op->recv_block.memory.get();
  }
  if (sb > 0) op->copy_in = staging_->to_host(shape.send, op->host_send, sb);
  op->shape = std::move(shape);
  return queued(std::move(op));
}

CommHandle StagedCommunicator::direct(std::function<CommHandle()> issue) {
  auto op = std::make_shared<Operation>();
  op->pool = pool_;
  op->staging = staging_;
  op->copy_in = staging_->fence();
  op->shape.issue = [issue = std::move(issue)](const void*, void*) { return issue(); };
  return queued(std::move(op));
}

// Behind the collectives called before it, issued as soon as its turn and its input have come.
CommHandle StagedCommunicator::queued(std::shared_ptr<Operation> op) {
  pool_->unissued.push_back(op);
  pool_->advance();
  return CommHandle(std::make_unique<StagedOp>(std::move(op)));
}

CommHandle StagedCommunicator::all_reduce_async(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) {
  const std::size_t bytes = count * size_of(t);
  return staged({send, bytes, recv, bytes, [this, count, t, op](const void* s, void* r) {
                   return carrier_.all_reduce_async(s, r, count, t, op);
                 }});
}

CommHandle StagedCommunicator::reduce_scatter_async(const void* send, void* recv, std::size_t recv_count, DType t,
                                                    ReduceOp op) {
  const std::size_t bytes = recv_count * size_of(t);
  return staged(
      {send, bytes * static_cast<std::size_t>(size()), recv, bytes, [this, recv_count, t, op](const void* s, void* r) {
         return carrier_.reduce_scatter_async(s, r, recv_count, t, op);
       }});
}

CommHandle StagedCommunicator::all_gather_async(const void* send, void* recv, std::size_t send_count, DType t) {
  if (direct_ == DirectCollectives::data_movement) {
    return direct([=, this] { return carrier_.all_gather_async(send, recv, send_count, t); });
  }
  const std::size_t bytes = send_count * size_of(t);
  return staged(
      {send, bytes, recv, bytes * static_cast<std::size_t>(size()),
       [this, send_count, t](const void* s, void* r) { return carrier_.all_gather_async(s, r, send_count, t); }});
}

CommHandle StagedCommunicator::all_to_all_async(const void* send, void* recv, std::size_t count_per_peer, DType t) {
  if (direct_ == DirectCollectives::data_movement) {
    return direct([=, this] { return carrier_.all_to_all_async(send, recv, count_per_peer, t); });
  }
  const std::size_t bytes = count_per_peer * size_of(t) * static_cast<std::size_t>(size());
  return staged({send, bytes, recv, bytes, [this, count_per_peer, t](const void* s, void* r) {
                   return carrier_.all_to_all_async(s, r, count_per_peer, t);
                 }});
}

CommHandle StagedCommunicator::broadcast_async(void* buffer, std::size_t count, DType t, int root) {
  if (direct_ == DirectCollectives::data_movement) {
    return direct([=, this] { return carrier_.broadcast_async(buffer, count, t, root); });
  }
  const std::size_t bytes = count * size_of(t);
  // The root's buffer is the input and stays as it is; every other rank's is the output.
  if (rank() == root) {
    return staged({buffer, bytes, nullptr, 0, [this, count, t, root](const void* s, void*) {
                     return carrier_.broadcast_async(const_cast<void*>(s), count, t, root);
                   }});
  }
  return staged({nullptr, 0, buffer, bytes,
                 [this, count, t, root](const void*, void* r) { return carrier_.broadcast_async(r, count, t, root); }});
}

CommHandle StagedCommunicator::barrier_async() {
  if (direct_ == DirectCollectives::data_movement) return direct([this] { return carrier_.barrier_async(); });
  return staged({nullptr, 0, nullptr, 0, [this](const void*, void*) { return carrier_.barrier_async(); }});
}

}  // namespace hsdp::comm
