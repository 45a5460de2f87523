#include "hsdp/comm/communicator.hpp"

#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp::comm {

std::string_view to_string(Collective c) {
  switch (c) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_gather: return "all_gather";
    case Collective::all_to_all: return "all_to_all";
    case Collective::broadcast: return "broadcast";
    case Collective::barrier: return "barrier";
  }
  return "?";
}

Transport parse_transport(std::string_view text, std::string_view key) {
  if (text == "mpi") return Transport::mpi;
  if (text == "nccl") return Transport::nccl;
  throw_config(std::string(key) + ": unknown value '" + std::string(text) + "' (allowed: mpi|nccl)");
}

const char* to_string(Transport t) { return t == Transport::mpi ? "mpi" : "nccl"; }

Staging parse_staging(std::string_view text, std::string_view key) {
  if (text == "auto") return Staging::automatic;
  if (text == "direct") return Staging::direct;
  if (text == "host") return Staging::host;
  throw_config(std::string(key) + ": unknown value '" + std::string(text) + "' (allowed: auto|direct|host)");
}

const char* to_string(Staging s) {
  switch (s) {
    case Staging::automatic: return "auto";
    case Staging::direct: return "direct";
    case Staging::host: return "host";
  }
  return "?";
}

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
  }
  return "?";
}

// A pending op is waited for before it is replaced or dropped: its buffers must outlive it. wait() aborts the
// job itself when the collective fails or times out, so these never throw in practice; if one ever did, the
// noexcept below turns it into std::terminate, which also ends the job instead of leaving peers hanging.
CommHandle& CommHandle::operator=(CommHandle&& other) noexcept {
  if (this != &other) {
    if (op_) op_->wait();
    op_ = std::move(other.op_);
  }
  return *this;
}

CommHandle::~CommHandle() {
  if (op_) op_->wait();
}

void CommHandle::wait() {
  if (!op_) return;
  op_->wait();
  op_.reset();
}

bool CommHandle::done() {
  if (!op_) return true;
  if (!op_->test()) return false;
  op_.reset();
  return true;
}

void Communicator::check_blocks(std::size_t whole, std::size_t block, const char* what) const {
  const auto n = static_cast<std::size_t>(size());
  if (whole != block * n) {
    throw_internal(std::string(what) + " on group '" + name() + "': the full buffer has " + std::to_string(whole) +
                   " elements but must hold " + std::to_string(n) + " blocks of " + std::to_string(block) +
                   " (pad it with shard_count/padded_count)");
  }
}

void Communicator::check_all_to_all(std::size_t send, std::size_t recv) const {
  const auto n = static_cast<std::size_t>(size());
  if (send != recv || send % n != 0) {
    throw_internal("all_to_all on group '" + name() + "': send has " + std::to_string(send) + " and recv has " +
                   std::to_string(recv) + " elements; both must be equal and divisible by the group size " +
                   std::to_string(n));
  }
}

void check_reduction(DType t, ReduceOp op, const std::string& group, Collective c) {
  if (t == DType::u8) {
    throw_internal(std::string(to_string(c)) + " on group '" + group +
                   "': uint8 carries packed int4 and cannot be reduced (gather or all_to_all it, then dequantize)");
  }
  if (op == ReduceOp::avg && !is_floating(t)) {
    throw_internal(std::string(to_string(c)) + " on group '" + group + "': avg is not defined for " +
                   std::string(to_string(t)) + " (use sum and scale)");
  }
}

}  // namespace hsdp::comm
