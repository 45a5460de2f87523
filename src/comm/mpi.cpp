#include "hsdp/comm/mpi.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "hsdp/comm/sequence_board.hpp"
#include "hsdp/comm/staged.hpp"
#include "hsdp/comm/traffic.hpp"
#include "hsdp/comm/watchdog.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/timer.hpp"

namespace hsdp::comm {
namespace {


std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

void check_mpi(int code, const std::string& what) {
  if (code != MPI_SUCCESS) throw Error(ErrorKind::comm, what + " failed: " + mpi_error_text(code));
}

int to_mpi_count(std::size_t count, std::string_view what) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw_internal(std::string(what) + ": " + std::to_string(count) + " elements exceed MPI's int count limit");
  }
  return static_cast<int>(count);
}

// User reduction ops for the 2-byte float types: each element is summed in f32 and rounded back.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const bf16_t*>(in);
  auto* b = static_cast<bf16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

void f16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const f16_t*>(in);
  auto* b = static_cast<f16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_f16(f16_to_float(a[i]) + f16_to_float(b[i]));
}

// avg = sum / n in the element type (through f32 for bf16 and f16).
void divide_in_place(void* data, std::size_t count, DType t, int n) {
  switch (t) {
    case DType::f32: {
      auto* x = static_cast<float*>(data);
      for (std::size_t i = 0; i < count; ++i) x[i] /= static_cast<float>(n);
      break;
    }
    case DType::f64: {
      auto* x = static_cast<double*>(data);
      for (std::size_t i = 0; i < count; ++i) x[i] /= static_cast<double>(n);
      break;
    }
    case DType::bf16: {
      auto* x = static_cast<bf16_t*>(data);
      for (std::size_t i = 0; i < count; ++i) x[i] = float_to_bf16(bf16_to_float(x[i]) / static_cast<float>(n));
      break;
    }
    case DType::f16: {
      auto* x = static_cast<f16_t*>(data);
      for (std::size_t i = 0; i < count; ++i) x[i] = float_to_f16(f16_to_float(x[i]) / static_cast<float>(n));
      break;
    }
    case DType::i8:
    case DType::u8: throw_internal("avg on an integer type reached the division step");
  }
}

// An average's division, done once the sum has arrived (data == nullptr: nothing to do).
struct AverageStep {
  void* data = nullptr;
  std::size_t count = 0;
  DType dtype = DType::f32;
  int size = 1;
};

// Advances every ring in flight (defined below): MPI's own nonblocking collectives move on inside any MPI call, a
// ring only when polled, so every poll of any operation polls the rings too.
void progress_rings();

class MpiPendingOp final : public WatchedOp {
 public:
  MpiPendingOp(MPI_Request request, OpIdentity identity, AverageStep average)
      : WatchedOp(std::move(identity)), request_(request), average_(average) {}
  ~MpiPendingOp() override {
    if (!done()) wait();
  }
  MpiPendingOp(const MpiPendingOp&) = delete;
  MpiPendingOp& operator=(const MpiPendingOp&) = delete;

 protected:
  bool poll() override {
    progress_rings();
    int flag = 0;
    const int code = MPI_Test(&request_, &flag, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS) fail(mpi_error_text(code));
    if (flag == 0) return false;
    if (average_.data != nullptr) divide_in_place(average_.data, average_.count, average_.dtype, average_.size);
    return true;
  }

 private:
  MPI_Request request_;
  AverageStep average_;
};

// acc[i] = in[i] + acc[i], in the element type (through f32 for bf16 and f16, as the MPI ops above).
void add_into(std::byte* acc, const std::byte* in, std::size_t n, DType t) {
  switch (t) {
    case DType::f32: {
      auto* a = reinterpret_cast<float*>(acc);
      const auto* b = reinterpret_cast<const float*>(in);
      for (std::size_t i = 0; i < n; ++i) a[i] = b[i] + a[i];
      break;
    }
    case DType::f64: {
      auto* a = reinterpret_cast<double*>(acc);
      const auto* b = reinterpret_cast<const double*>(in);
      for (std::size_t i = 0; i < n; ++i) a[i] = b[i] + a[i];
      break;
    }
    case DType::bf16: {
      auto* a = reinterpret_cast<bf16_t*>(acc);
      const auto* b = reinterpret_cast<const bf16_t*>(in);
      for (std::size_t i = 0; i < n; ++i) a[i] = float_to_bf16(bf16_to_float(b[i]) + bf16_to_float(a[i]));
      break;
    }
    case DType::f16: {
      auto* a = reinterpret_cast<f16_t*>(acc);
      const auto* b = reinterpret_cast<const f16_t*>(in);
      for (std::size_t i = 0; i < n; ++i) a[i] = float_to_f16(f16_to_float(b[i]) + f16_to_float(a[i]));
      break;
    }
    case DType::i8: {
      auto* a = reinterpret_cast<std::int8_t*>(acc);
      const auto* b = reinterpret_cast<const std::int8_t*>(in);
      for (std::size_t i = 0; i < n; ++i) a[i] = static_cast<std::int8_t>(b[i] + a[i]);
      break;
    }
    case DType::u8:
      throw_internal("a ring reduction reached uint8 (packed int4 is never reduced)");
  }
}

// The ring (mpi.hpp) over the members in node-major order (order[q]: the rank at place q; the traffic model's
// ring, crossing nodes once per node): place q sends to q+1 and receives from q-1, one step at a time, each step a
// send and a receive posted together and completed by poll(). Blocks are named by place (block j: rank order[j]'s).
// Reduce phase, steps k = 0..n-2: block q-k-1 goes out (at k = 0 straight from the input, after that the partial
// sum received the step before), block q-k-2 comes in and this rank's own part of it is added; the last block in
// is q's own, whole. Gather phase, steps k = 0..n-2: the complete block q-k goes out, q-k-1 comes in, into place.
// all_reduce runs both phases, reduce_scatter the first, all_gather the second. Blocks past the end of the buffer
// are short or empty. In place (send == recv) is safe: the input's block j is read for the last time before
// anything lands in it.
class RingOp final : public WatchedOp {
 public:
  struct Shape {
    MPI_Comm comm = MPI_COMM_NULL;
    std::vector<int> order;  // the ring: comm ranks in node-major order
    int place = 0;           // this rank's place in it
    int tag = 0;
    const std::byte* send = nullptr;
    std::byte* recv = nullptr;  // the whole buffer, except for reduce_scatter: this rank's block
    std::size_t count = 0;      // elements of the whole buffer
    std::size_t block = 0;      // elements per block
    DType dtype = DType::f32;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    bool reduce = true;  // the reduce phase
    bool gather = true;  // the gather phase
  };
  RingOp(OpIdentity identity, Shape shape, AverageStep average)
      : WatchedOp(std::move(identity)),
        s_(std::move(shape)),
        average_(average),
        n_(static_cast<int>(s_.order.size())),
        reduce_steps_(s_.reduce ? n_ - 1 : 0),
        steps_(reduce_steps_ + (s_.gather ? n_ - 1 : 0)) {
    if (s_.reduce) {
      const std::size_t bytes = s_.block * size_of(s_.dtype);
      for (auto& t : partial_) t.resize(bytes);
    }
    rings_in_flight().push_back(this);
    try {
      advance();  // the first step's messages go out now
    } catch (...) {
      forget();
      throw;
    }
  }
  ~RingOp() override {
    if (!done()) wait();
    forget();
  }
  RingOp(const RingOp&) = delete;
  RingOp& operator=(const RingOp&) = delete;

  // Runs the steps whose messages have arrived and posts the next; true once the last is done.
  bool advance() {
    while (!finished_) {
      if (active_) {
        int flag = 0;
        const int code = MPI_Testall(2, requests_, &flag, MPI_STATUSES_IGNORE);
        if (code != MPI_SUCCESS) fail(mpi_error_text(code));
        if (flag == 0) return false;
        active_ = false;
        finish_step();
        ++step_;
      }
      if (step_ == steps_) {
        if (average_.data != nullptr) divide_in_place(average_.data, average_.count, average_.dtype, average_.size);
        finished_ = true;
        forget();
        break;
      }
      start_step();
    }
    return true;
  }
  static std::vector<RingOp*>& rings_in_flight() {
    static std::vector<RingOp*> rings;  // the host thread's (MPI is FUNNELED)
    return rings;
  }

 protected:
  bool poll() override {
    progress_rings();
    return advance();
  }

 private:
  void forget() {
    auto& rings = rings_in_flight();
    rings.erase(std::remove(rings.begin(), rings.end(), this), rings.end());
  }
  // The block of the place `k` steps around the ring (any integer).
  int block_at(int k) const { return s_.order[static_cast<std::size_t>(((k % n_) + n_) % n_)]; }
  std::size_t first(int b) const { return std::min(static_cast<std::size_t>(b) * s_.block, s_.count); }
  int elements(int b) const { return static_cast<int>(std::min(s_.block, s_.count - first(b))); }
  std::size_t offset(int b) const { return first(b) * size_of(s_.dtype); }

  void post(const std::byte* out, int out_count, std::byte* in, int in_count) {
    const int right = block_at(s_.place + 1), left = block_at(s_.place - 1);
    check_mpi(MPI_Irecv(in, in_count, s_.type, left, s_.tag, s_.comm, &requests_[0]), "MPI_Irecv (ring)");
    check_mpi(MPI_Isend(out, out_count, s_.type, right, s_.tag, s_.comm, &requests_[1]), "MPI_Isend (ring)");
    active_ = true;
  }
  void start_step() {
    const int q = s_.place;
    if (step_ < reduce_steps_) {
      const int k = step_;
      const int out = block_at(q - k - 1);
      const int in = block_at(q - k - 2);
      const std::byte* from = k == 0 ? s_.send + offset(out) : partial_[(k + 1) % 2].data();
      post(from, elements(out), partial_[k % 2].data(), elements(in));
      return;
    }
    const int k = step_ - reduce_steps_;
    const int out = block_at(q - k);
    const int in = block_at(q - k - 1);
    post(s_.recv + offset(out), elements(out), s_.recv + offset(in), elements(in));
  }
  void finish_step() {
    if (step_ >= reduce_steps_) return;  // gather phase: the block landed in place
    const int k = step_;
    const int in = block_at(s_.place - k - 2);
    std::byte* partial = partial_[k % 2].data();
    add_into(partial, s_.send + offset(in), static_cast<std::size_t>(elements(in)), s_.dtype);
    if (k == reduce_steps_ - 1) {  // this rank's block is complete
      std::byte* to = s_.gather ? s_.recv + offset(in) : s_.recv;
      std::memcpy(to, partial, static_cast<std::size_t>(elements(in)) * size_of(s_.dtype));
    }
  }

  Shape s_;
  AverageStep average_;
  int n_;
  int reduce_steps_;
  int steps_;
  int step_ = 0;
  bool active_ = false;
  bool finished_ = false;
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::array<std::vector<std::byte>, 2> partial_;
};

void progress_rings() {
  const std::vector<RingOp*> rings = RingOp::rings_in_flight();  // a ring that finishes leaves the list
  for (RingOp* r : rings) r->advance();
}

}  // namespace

// ---- MpiEnvironment ----

MpiEnvironment::MpiEnvironment(int* argc, char*** argv) {
  int provided = 0;
  check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
}

MpiEnvironment::~MpiEnvironment() {
  if (!mpi_finalized()) MPI_Finalize();
}

void MpiEnvironment::abort_job(int exit_code) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized != 0 && !mpi_finalized()) {
    // MPI_Abort asks the launcher to end the job; a launcher that cannot be reached (its host's link cut) never
    // answers. The rank then ends itself after a bounded grace, so its local launcher daemon sees it exit.
    std::thread([exit_code] {
      std::this_thread::sleep_for(std::chrono::duration<double>(kAbortGraceS));
      std::_Exit(exit_code);
    }).detach();
    MPI_Abort(MPI_COMM_WORLD, exit_code);
  }
  std::_Exit(exit_code);
}

// ---- MpiComm ----

MpiComm::~MpiComm() {
  if (comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF && !mpi_finalized()) {
    MPI_Comm_free(&comm_);
  }
}

MpiComm& MpiComm::operator=(MpiComm&& o) noexcept {
  if (this != &o) {
    MpiComm old(comm_);  // frees the current one
    comm_ = o.comm_;
    o.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

// ---- MpiCommunicator ----

// MPI types and ops of one communicator: a 2-byte contiguous type for bf16/f16 and their f32-accumulating sums.
struct MpiCommunicator::Impl {
  MPI_Datatype half = MPI_DATATYPE_NULL;
  MPI_Op bf16_sum_op = MPI_OP_NULL;
  MPI_Op f16_sum_op = MPI_OP_NULL;

  Impl() {
    check_mpi(MPI_Type_contiguous(2, MPI_BYTE, &half), "MPI_Type_contiguous");
    check_mpi(MPI_Type_commit(&half), "MPI_Type_commit");
    check_mpi(MPI_Op_create(&bf16_sum, 1, &bf16_sum_op), "MPI_Op_create");
    check_mpi(MPI_Op_create(&f16_sum, 1, &f16_sum_op), "MPI_Op_create");
  }
  ~Impl() {
    if (mpi_finalized()) return;
    if (f16_sum_op != MPI_OP_NULL) MPI_Op_free(&f16_sum_op);
    if (bf16_sum_op != MPI_OP_NULL) MPI_Op_free(&bf16_sum_op);
    if (half != MPI_DATATYPE_NULL) MPI_Type_free(&half);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  MPI_Datatype type_of(DType t) const {
    switch (t) {
      case DType::f32: return MPI_FLOAT;
      case DType::f64: return MPI_DOUBLE;
      case DType::bf16:
      case DType::f16: return half;
      case DType::i8: return MPI_INT8_T;
      case DType::u8: return MPI_UINT8_T;
    }
    return MPI_DATATYPE_NULL;
  }
  // The MPI op for a reduction; avg is a sum followed by a division once the collective completes.
  MPI_Op sum_op_of(DType t) const {
    if (t == DType::bf16) return bf16_sum_op;
    if (t == DType::f16) return f16_sum_op;
    return MPI_SUM;
  }
};

MpiCommunicator::MpiCommunicator(MpiComm comm, std::string name, const std::vector<int>& node_of_world_rank,
                                 const CommOptions& options, const Logger& logger,
                                 std::shared_ptr<SequenceBoard> side_channel)
    : impl_(std::make_unique<Impl>()),
      comm_(std::move(comm)),
      name_(std::move(name)),
      node_of_world_rank_(node_of_world_rank),
      options_(options),
      logger_(logger),
      side_channel_(std::move(side_channel)) {
  if (comm_.get() == MPI_COMM_NULL) throw_internal("communicator '" + name_ + "' was given MPI_COMM_NULL");
  check_mpi(MPI_Comm_rank(comm_.get(), &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_.get(), &size_), "MPI_Comm_size");
  int world_rank = 0;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), "MPI_Comm_rank");
  // Set-up traffic, not counted: every member's world rank, to know which node it is on.
  std::vector<int> world_ranks(static_cast<std::size_t>(size_));
  check_mpi(MPI_Allgather(&world_rank, 1, MPI_INT, world_ranks.data(), 1, MPI_INT, comm_.get()), "MPI_Allgather");
  node_of_rank_.reserve(world_ranks.size());
  for (const int w : world_ranks) {
    if (w < 0 || static_cast<std::size_t>(w) >= node_of_world_rank_.size()) {
      throw_internal("communicator '" + name_ + "': world rank " + std::to_string(w) +
                     " is outside the topology's node map of " + std::to_string(node_of_world_rank_.size()) +
                     " ranks");
    }
    node_of_rank_.push_back(node_of_world_rank_[static_cast<std::size_t>(w)]);
  }
  if (size_ > 1) {
    if (side_channel_ == nullptr) {
      side_channel_ = std::make_shared<SequenceBoard>(comm_.get(), world_ranks);
      if (!side_channel_->unavailable().empty()) {
        logger_.info("comm: the watchdog's side channel is not available on this MPI transport (",
                     side_channel_->unavailable(),
                     "; Open MPI's ob1 with the tcp BTL has no one-sided communication): training goes on, and a "
                     "stalled collective is reported by group and number without naming the ranks behind it (with "
                     "UCX, `--mca pml ucx --mca osc ucx`, they are named)");
      }
    }
    seat_ = side_channel_->take_seat(comm_.get());
    MPI_Comm dup = MPI_COMM_NULL;
    check_mpi(MPI_Comm_dup(comm_.get(), &dup), "MPI_Comm_dup of '" + name_ + "' (its rings)");
    ring_comm_ = MpiComm(dup);
  }
  for (int r = 0; r < size_; ++r) ring_order_.push_back(r);
  std::stable_sort(ring_order_.begin(), ring_order_.end(), [this](int a, int b) {
    return node_of_rank_[static_cast<std::size_t>(a)] < node_of_rank_[static_cast<std::size_t>(b)];
  });
  ring_place_ = static_cast<int>(std::find(ring_order_.begin(), ring_order_.end(), rank_) - ring_order_.begin());
}

MpiCommunicator::~MpiCommunicator() = default;

CommHandle MpiCommunicator::all_reduce_async(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) {
  check_reduction(t, op, name_, Collective::all_reduce);
  const int n = to_mpi_count(count, "all_reduce");
  if (use_ring(count * size_of(t))) {
    const auto p = static_cast<std::size_t>(size_);
    return ring(Collective::all_reduce, send, recv, count, (count + p - 1) / p, t, op);
  }
  const void* send_arg = send == recv ? MPI_IN_PLACE : send;
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallreduce(send_arg, recv, n, impl_->type_of(t), impl_->sum_op_of(t), comm_.get(), &request),
            "MPI_Iallreduce on '" + name_ + "'");
  return issued(request, Collective::all_reduce, count, t, op == ReduceOp::avg ? recv : nullptr, count);
}

CommHandle MpiCommunicator::reduce_scatter_async(const void* send, void* recv, std::size_t recv_count, DType t,
                                                 ReduceOp op) {
  check_reduction(t, op, name_, Collective::reduce_scatter);
  const int n = to_mpi_count(recv_count, "reduce_scatter");
  to_mpi_count(recv_count * static_cast<std::size_t>(size_), "reduce_scatter");
  const std::size_t whole = recv_count * static_cast<std::size_t>(size_);
  if (use_ring(whole * size_of(t))) return ring(Collective::reduce_scatter, send, recv, whole, recv_count, t, op);
  // In place (send == recv): the full input is read from recv and this rank's block lands at its start.
  const void* send_arg = send == recv ? MPI_IN_PLACE : send;
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ireduce_scatter_block(send_arg, recv, n, impl_->type_of(t), impl_->sum_op_of(t), comm_.get(),
                                      &request),
            "MPI_Ireduce_scatter_block on '" + name_ + "'");
  return issued(request, Collective::reduce_scatter, recv_count, t, op == ReduceOp::avg ? recv : nullptr,
                recv_count);
}

CommHandle MpiCommunicator::all_gather_async(const void* send, void* recv, std::size_t send_count, DType t) {
  const int n = to_mpi_count(send_count, "all_gather");
  to_mpi_count(send_count * static_cast<std::size_t>(size_), "all_gather");
  const auto* own_block = static_cast<const char*>(recv) + static_cast<std::size_t>(rank_) * send_count * size_of(t);
  const std::size_t whole = send_count * static_cast<std::size_t>(size_);
  if (use_ring(whole * size_of(t))) {
    if (send != own_block) std::memcpy(const_cast<char*>(own_block), send, send_count * size_of(t));
    return ring(Collective::all_gather, recv, recv, whole, send_count, t, ReduceOp::sum);
  }
  const void* send_arg = send == own_block ? MPI_IN_PLACE : send;
  const MPI_Datatype type = impl_->type_of(t);
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallgather(send_arg, n, type, recv, n, type, comm_.get(), &request),
            "MPI_Iallgather on '" + name_ + "'");
  return issued(request, Collective::all_gather, send_count, t, nullptr, 0);
}

CommHandle MpiCommunicator::all_to_all_async(const void* send, void* recv, std::size_t count_per_peer, DType t) {
  const int n = to_mpi_count(count_per_peer, "all_to_all");
  to_mpi_count(count_per_peer * static_cast<std::size_t>(size_), "all_to_all");
  const MPI_Datatype type = impl_->type_of(t);
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ialltoall(send, n, type, recv, n, type, comm_.get(), &request), "MPI_Ialltoall on '" + name_ + "'");
  return issued(request, Collective::all_to_all, count_per_peer, t, nullptr, 0);
}

CommHandle MpiCommunicator::broadcast_async(void* buffer, std::size_t count, DType t, int root) {
  if (root < 0 || root >= size_) {
    throw_internal("broadcast on group '" + name_ + "': root " + std::to_string(root) +
                   " is not a rank of a group of " + std::to_string(size_));
  }
  const int n = to_mpi_count(count, "broadcast");
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibcast(buffer, n, impl_->type_of(t), root, comm_.get(), &request), "MPI_Ibcast on '" + name_ + "'");
  return issued(request, Collective::broadcast, count, t, nullptr, 0, root);
}

CommHandle MpiCommunicator::barrier_async() {
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibarrier(comm_.get(), &request), "MPI_Ibarrier on '" + name_ + "'");
  return issued(request, Collective::barrier, 0, DType::u8, nullptr, 0);
}

OpIdentity MpiCommunicator::identify(Collective c, std::size_t count, DType t, int root) {
  ++sequence_;
  if (seat_ != nullptr) seat_->publish(sequence_);
  counters_.record(c, traffic_bytes(c, count, size_of(t), rank_, node_of_rank_, root));
  return OpIdentity{c, name_, sequence_, size_, rank_, options_.timeout_s, &logger_, "", seat_};
}

CommHandle MpiCommunicator::issued(MPI_Request request, Collective c, std::size_t count, DType t, void* avg_data,
                                   std::size_t avg_count, int root) {
  return CommHandle(
      std::make_unique<MpiPendingOp>(request, identify(c, count, t, root), AverageStep{avg_data, avg_count, t, size_}));
}

CommHandle MpiCommunicator::ring(Collective c, const void* send, void* recv, std::size_t count, std::size_t block,
                                 DType t, ReduceOp op) {
  to_mpi_count(block, to_string(c));
  RingOp::Shape shape;
  shape.comm = ring_comm_.get();
  shape.order = ring_order_;
  shape.place = ring_place_;
  shape.tag = static_cast<int>(rings_++ % 32767);  // MPI guarantees tags up to 32767
  shape.send = static_cast<const std::byte*>(send);
  shape.recv = static_cast<std::byte*>(recv);
  shape.count = count;
  shape.block = block;
  shape.dtype = t;
  shape.type = impl_->type_of(t);
  shape.reduce = c != Collective::all_gather;
  shape.gather = c != Collective::reduce_scatter;
  const std::size_t result = c == Collective::reduce_scatter ? block : count;
  const AverageStep average{op == ReduceOp::avg ? recv : nullptr, result, t, size_};
  // Counted as the collective it implements, with the traffic model's element count: the whole buffer for
  // all_reduce, the block for reduce_scatter and all_gather.
  const std::size_t counted = c == Collective::all_reduce ? count : block;
  return CommHandle(std::make_unique<RingOp>(identify(c, counted, t, 0), std::move(shape), average));
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key, std::string name) const {
  MPI_Comm part = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(comm_.get(), color, key, &part), "MPI_Comm_split of '" + name_ + "' into '" + name + "'");
  return std::make_unique<MpiCommunicator>(MpiComm(part), std::move(name), node_of_world_rank_, options_, logger_,
                                           side_channel_);
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

const MpiCommunicator& as_mpi(const Communicator& group) {
  if (const auto* staged = dynamic_cast<const StagedCommunicator*>(&group)) return as_mpi(staged->carrier());
  const auto* mpi = dynamic_cast<const MpiCommunicator*>(&group);
  if (mpi == nullptr) throw_internal("the group '" + group.name() + "' is not carried by MPI");
  return *mpi;
}

MpiCommunicator& as_mpi(Communicator& group) {
  return const_cast<MpiCommunicator&>(as_mpi(static_cast<const Communicator&>(group)));
}

}  // namespace hsdp::comm
