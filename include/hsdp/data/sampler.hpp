#pragma once
// Distributed, resumable sampling of training windows from token files (TokenShards: one file or many).
//
// A window is seq_len + 1 consecutive tokens of one file starting at a multiple of seq_len (window w starts at token
// w*seq_len; they overlap by the one token that is the last target of w and the first input of w+1), so a
// file of T tokens holds (T-1)/seq_len windows, and several files hold theirs in order (shards.hpp). Each epoch visits
// the windows in a seeded permutation that depends only on (seed, epoch), so every rank computes the same one. A
// micro-batch consumes G = dp_size*batch windows of the permutation; rank r takes the slice [r*batch, (r+1)*batch) of
// it; an optimizer step of micro_batches micro-batches (grad_accum) consumes S = micro_batches*G. When fewer than S
// windows are left at the start of a step, the epoch ends (those last windows of this epoch's order are skipped; the
// next permutation puts different ones last) and the next epoch begins: an epoch ends between steps, never inside one,
// so every split of the same global batch S into ranks and micro-batches reads the same windows in every step.
//
// The state is (epoch, position = windows of the permutation consumed), saved between steps, independent of dp_rank
// and, for the same global batch S, of dp_size and micro_batches: a restored sampler continues bit for bit.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "hsdp/data/shards.hpp"

namespace hsdp::data {

struct SamplerState {
  std::uint64_t epoch = 0;
  std::uint64_t position = 0;
  bool operator==(const SamplerState&) const = default;
};

class Sampler {
 public:
  // The files must outlive the sampler. Throws a config Error for a non-positive batch/seq_len/micro_batches or a
  // rank out of range, and a data Error naming the files and sizes when they hold fewer windows than one step.
  Sampler(const TokenShards& data, int batch, int seq_len, int dp_rank, int dp_size, std::uint64_t seed,
          int micro_batches = 1);

  // Fills this rank's batch*seq_len inputs and targets (targets = inputs shifted by one token) of the next
  // micro-batch; the first of a step may start the next epoch.
  void next(std::span<std::int32_t> inputs, std::span<std::int32_t> targets);

  // Between steps: the state, and a restored one (a data Error when its position is beyond the window count).
  SamplerState state() const { return state_; }
  void restore(const SamplerState& state);
  // Between steps: another split of the step (a resume on another world size keeps S, with another grad_accum).
  void set_micro_batches(int micro_batches);

  std::uint64_t window_count() const { return window_count_; }
  std::uint64_t steps_per_epoch() const { return window_count_ / step_windows(); }
  // The window indices (start token / seq_len) this rank's next call to next() will read, in order.
  std::vector<std::uint64_t> peek_windows() const;
  // FNV-1a over the indices of every window the job read (all ranks', in the permutation's order) since the last
  // call, then reset: per step, the same value on every rank and for any split of the same global batch into ranks
  // and micro-batches (hsdp-train's metrics `data`: a resume on another world size reads the same windows).
  std::uint64_t take_fingerprint();

 private:
  void start_epoch(std::uint64_t epoch);
  std::uint64_t step_windows() const { return global_batch_ * micro_batches_; }
  // The state the next micro-batch reads from: the next epoch's start where a step begins with fewer than S left.
  SamplerState next_read() const;

  TokenShards data_;
  std::size_t batch_;
  std::size_t seq_len_;
  std::vector<std::uint64_t> starts_;  // data_.window_starts(seq_len_)
  std::size_t dp_rank_;
  std::uint64_t global_batch_;
  std::uint64_t micro_batches_ = 1;
  std::uint64_t micro_ = 0;  // micro-batches of the current step read
  std::uint64_t seed_;
  std::uint64_t window_count_;
  SamplerState state_;
  std::uint64_t permutation_epoch_ = UINT64_MAX;  // the epoch `permutation_` was built for
  std::vector<std::uint32_t> permutation_;
  std::uint64_t fingerprint_ = 0xcbf29ce484222325ull;  // FNV-1a's offset basis
};

// The permutation of [0, count) for (seed, epoch): Fisher-Yates driven by SplitMix64.
std::vector<std::uint32_t> epoch_permutation(std::uint64_t count, std::uint64_t seed, std::uint64_t epoch);

// Deterministic evaluation over a (validation) file, a property of the data and not of the world size: the
// evaluation set is the first W windows of seq_len + 1 tokens in the files' order, W = eval_tokens / seq_len (eval_tokens
// = 0: every whole window of the file). Batch b of the pass gives rank r the windows [b*G + r*batch,
// b*G + (r+1)*batch) that are below W (G = dp_size*batch); every rank has batch_count() batches, the last ones
// partly or wholly padding (rows repeating window 0, to be left out of the loss: next() says how many are real).
// So 1 rank and 4 ranks see the same W windows. reset() starts a pass again; next() wraps after the last batch.
class EvalLoader {
 public:
  // A data Error naming both sizes when the file holds fewer than W windows (or none).
  EvalLoader(const TokenShards& data, int batch, int seq_len, int dp_rank, int dp_size, std::int64_t eval_tokens);

  // Fills batch rows; returns how many leading rows are evaluation windows (the rest are padding).
  std::size_t next(std::span<std::int32_t> inputs, std::span<std::int32_t> targets);
  void reset() { batch_index_ = 0; }
  std::uint64_t batch_count() const { return batch_count_; }
  std::uint64_t windows() const { return windows_; }  // W

 private:
  TokenShards data_;
  std::size_t batch_;
  std::size_t seq_len_;
  std::vector<std::uint64_t> starts_;
  std::size_t dp_rank_;
  std::uint64_t global_batch_;
  std::uint64_t windows_;
  std::uint64_t batch_count_;
  std::uint64_t batch_index_ = 0;
};

}  // namespace hsdp::data
