#include "hsdp/data/sampler.hpp"

#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "hsdp/core/error.hpp"
#include "hsdp/data/random.hpp"

namespace hsdp::data {

namespace {

void check_shape(const char* who, int batch, int seq_len, int dp_rank, int dp_size) {
  const std::string name = who;
  if (batch < 1) throw_config(name + ": batch must be >= 1, got " + std::to_string(batch));
  if (seq_len < 1) throw_config(name + ": seq_len must be >= 1, got " + std::to_string(seq_len));
  if (dp_size < 1) throw_config(name + ": dp_size must be >= 1, got " + std::to_string(dp_size));
  if (dp_rank < 0 || dp_rank >= dp_size) {
    throw_config(name + ": dp_rank " + std::to_string(dp_rank) + " is outside [0, " + std::to_string(dp_size) + ")");
  }
}

void require_windows(const TokenShards& data, std::uint64_t windows, std::size_t seq_len, std::uint64_t batch,
                     std::uint64_t dp_size, std::uint64_t micro_batches) {
  const std::uint64_t step = batch * dp_size * micro_batches;
  if (windows >= step) return;
  throw_data(data.what() + ": " + data.describe() + " has " + std::to_string(data.tokens()) +
             " tokens = " + std::to_string(windows) + " windows of seq_len+1 = " + std::to_string(seq_len + 1) +
             " tokens, fewer than one step's global batch of dp_size x batch x grad_accum = " +
             std::to_string(dp_size) + " x " + std::to_string(batch) + " x " + std::to_string(micro_batches) + " = " +
             std::to_string(step) + " windows");
}

void check_spans(std::span<std::int32_t> inputs, std::span<std::int32_t> targets, std::size_t expected) {
  if (inputs.size() != expected || targets.size() != expected) {
    throw_internal("sampler: inputs/targets hold " + std::to_string(inputs.size()) + "/" +
                   std::to_string(targets.size()) + " tokens, expected batch*seq_len = " + std::to_string(expected));
  }
}

void copy_window(const TokenShards& data, const std::vector<std::uint64_t>& starts, std::uint64_t window,
                 std::size_t seq_len, std::int32_t* inputs, std::int32_t* targets) {
  thread_local std::vector<std::uint32_t> tokens;
  tokens.resize(seq_len + 1);
  data.copy_window(starts, window, seq_len, tokens.data());  // a file cut under the job: a data Error
  for (std::size_t i = 0; i < seq_len; ++i) {
    inputs[i] = static_cast<std::int32_t>(tokens[i]);
    targets[i] = static_cast<std::int32_t>(tokens[i + 1]);
  }
}

}  // namespace

std::vector<std::uint32_t> epoch_permutation(std::uint64_t count, std::uint64_t seed, std::uint64_t epoch) {
  std::vector<std::uint32_t> order(count);
  std::iota(order.begin(), order.end(), 0u);
  SplitMix64 rng(derive_seed(seed, epoch));
  for (std::uint64_t i = count; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  return order;
}

Sampler::Sampler(const TokenShards& data, int batch, int seq_len, int dp_rank, int dp_size, std::uint64_t seed,
                 int micro_batches)
    : data_(data), seed_(seed) {
  check_shape("sampler", batch, seq_len, dp_rank, dp_size);
  batch_ = static_cast<std::size_t>(batch);
  seq_len_ = static_cast<std::size_t>(seq_len);
  dp_rank_ = static_cast<std::size_t>(dp_rank);
  global_batch_ = static_cast<std::uint64_t>(batch) * static_cast<std::uint64_t>(dp_size);
  starts_ = data_.window_starts(seq_len_);
  window_count_ = starts_.back();
  if (window_count_ > std::numeric_limits<std::uint32_t>::max()) {
    throw_data(data_.what() + ": " + data_.describe() + " has more than 2^32 windows; raise seq_len");
  }
  set_micro_batches(micro_batches);
}

void Sampler::set_micro_batches(int micro_batches) {
  if (micro_batches < 1) throw_config("sampler: grad_accum must be >= 1, got " + std::to_string(micro_batches));
  require_windows(data_, window_count_, seq_len_, batch_, global_batch_ / batch_,
                  static_cast<std::uint64_t>(micro_batches));
  micro_batches_ = static_cast<std::uint64_t>(micro_batches);
  micro_ = 0;
}

SamplerState Sampler::next_read() const {
  if (micro_ == 0 && state_.position + step_windows() > window_count_) return {state_.epoch + 1, 0};
  return state_;
}

void Sampler::start_epoch(std::uint64_t epoch) {
  if (permutation_epoch_ == epoch) return;
  permutation_ = epoch_permutation(window_count_, seed_, epoch);
  permutation_epoch_ = epoch;
}

std::vector<std::uint64_t> Sampler::peek_windows() const {
  const SamplerState at = next_read();
  std::vector<std::uint32_t> fresh;
  const std::vector<std::uint32_t>* order = &permutation_;
  if (at.epoch != permutation_epoch_) {
    fresh = epoch_permutation(window_count_, seed_, at.epoch);
    order = &fresh;
  }
  std::vector<std::uint64_t> windows(batch_);
  for (std::size_t b = 0; b < batch_; ++b) windows[b] = (*order)[at.position + dp_rank_ * batch_ + b];
  return windows;
}

void Sampler::next(std::span<std::int32_t> inputs, std::span<std::int32_t> targets) {
  check_spans(inputs, targets, batch_ * seq_len_);
  state_ = next_read();
  start_epoch(state_.epoch);
  for (std::size_t b = 0; b < batch_; ++b) {
    const std::uint64_t window = permutation_[state_.position + dp_rank_ * batch_ + b];
    copy_window(data_, starts_, window, seq_len_, inputs.data() + b * seq_len_, targets.data() + b * seq_len_);
  }
  for (std::uint64_t i = 0; i < global_batch_; ++i) {  // every rank's windows of this global batch
    std::uint64_t w = permutation_[state_.position + i];
    for (int byte = 0; byte < 8; ++byte, w >>= 8) fingerprint_ = (fingerprint_ ^ (w & 0xFF)) * 0x100000001b3ull;
  }
  state_.position += global_batch_;
  micro_ = (micro_ + 1) % micro_batches_;
}

std::uint64_t Sampler::take_fingerprint() {
  return std::exchange(fingerprint_, 0xcbf29ce484222325ull);
}

void Sampler::restore(const SamplerState& state) {
  if (state.position > window_count_) {
    throw_data(data_.what() + ": sampler state position " + std::to_string(state.position) + " is beyond the " +
               std::to_string(window_count_) + " windows of " + data_.describe() +
               " at this seq_len: was the checkpoint written for other data files or another seq_len?");
  }
  state_ = state;
  micro_ = 0;
}

EvalLoader::EvalLoader(const TokenShards& data, int batch, int seq_len, int dp_rank, int dp_size,
                       std::int64_t eval_tokens)
    : data_(data) {
  check_shape("eval loader", batch, seq_len, dp_rank, dp_size);
  if (eval_tokens < 0) throw_config("train.eval_tokens must be >= 0, got " + std::to_string(eval_tokens));
  batch_ = static_cast<std::size_t>(batch);
  seq_len_ = static_cast<std::size_t>(seq_len);
  dp_rank_ = static_cast<std::size_t>(dp_rank);
  global_batch_ = static_cast<std::uint64_t>(batch) * static_cast<std::uint64_t>(dp_size);
  starts_ = data_.window_starts(seq_len_);
  const std::uint64_t available = starts_.back();
  windows_ = eval_tokens > 0 ? static_cast<std::uint64_t>(eval_tokens) / seq_len_ : available;
  if (windows_ == 0 || windows_ > available) {
    const std::string wanted = eval_tokens > 0 ? "train.eval_tokens = " + std::to_string(eval_tokens) + " needs " +
                                                     std::to_string(windows_) + " windows of seq_len+1 = " +
                                                     std::to_string(seq_len_ + 1) + " tokens"
                                               : "an evaluation needs at least one window of seq_len+1 = " +
                                                     std::to_string(seq_len_ + 1) + " tokens";
    throw_data(data_.what() + ": " + data_.describe() + " has " + std::to_string(data_.tokens()) + " tokens = " +
               std::to_string(available) + " windows, but " + wanted +
               (windows_ == 0 ? " (train.eval_tokens is below train.seq_len)" : std::string()));
  }
  batch_count_ = (windows_ + global_batch_ - 1) / global_batch_;
}

std::size_t EvalLoader::next(std::span<std::int32_t> inputs, std::span<std::int32_t> targets) {
  check_spans(inputs, targets, batch_ * seq_len_);
  if (batch_index_ == batch_count_) batch_index_ = 0;
  const std::uint64_t first = batch_index_ * global_batch_ + dp_rank_ * batch_;
  std::size_t real = 0;
  for (std::size_t b = 0; b < batch_; ++b) {
    const bool in_set = first + b < windows_;
    if (in_set) ++real;
    copy_window(data_, starts_, in_set ? first + b : 0, seq_len_, inputs.data() + b * seq_len_,
                targets.data() + b * seq_len_);
  }
  ++batch_index_;
  return real;
}

}  // namespace hsdp::data
