#pragma once
// DiLoCo's outer step across islands (parallel.islands > 1; Douillard et al. 2023; Streaming DiLoCo, 2025).
//
// Each island trains apart for H = outer.inner_steps steps: its own AdamW, its own share of every global batch, its
// strategy over its own ranks. Then the ranks that hold the same shard in every island (the mesh's outer group, one
// rank per island) average their pseudo-gradients and apply one Nesterov step to the outer parameters, which every
// island takes as its master weights (AdamW's moments stay each island's):
//   delta_i = outer - inner_i                     island i's masters against the last outer parameters
//   g       = (wire(delta_1 + e_1) + ... + wire(delta_N + e_N)) / N        summed in island order, in fp32
//   e_i     = delta_i + e_i - wire(delta_i + e_i)  error feedback (outer.bits < 32 with outer.error_feedback; else 0)
//   m       = mu m + g                             outer.momentum (Nesterov, as torch.optim.SGD(nesterov=True))
//   outer   = outer - lr (g + mu m)                outer.lr
//   inner_i = outer
// wire() is the exchange's number format (outer.bits): 32 = fp32 (an all-reduce, avg: the ring's sum / N, the same
// bits on every rank); 16 = bf16 (round to nearest even); 8 and 4 = block-wise int8/int4 with one fp32 scale per
// outer.block elements (quant/blockwise.hpp: |wire(x) - x| <= scale / 2). Below 32 bits the N messages are
// all-gathered and every rank sums them in island order, so every island computes the same g bit for bit.
//
// Fragments (outer.fragments = F, Streaming DiLoCo): the units split into F runs of consecutive units of near-equal
// size; fragment f is exchanged after every step s (1-based) with s mod H == f H / F (F divides H). F = 1: after
// every H-th step.
//
// Overlap (outer.overlap = tau > 0, Streaming DiLoCo's delayed application): the fragment's exchange starts after
// step s and runs while the islands train steps s+1 .. s+tau; after step s+tau it completes and
//   outer, m   the Nesterov step above on the islands' mean
//   shift      = outer_new - inner_i(s)          the new outer parameters against the masters the island sent
//   inner_i    = inner_i(s + tau) + shift        the new outer parameters plus what the island learnt meanwhile
// (tau = 0 is the blocking exchange above, inner_i = outer). The shift is a function of the mean, the outer state and
// the snapshot, none of which change in flight, so computing it early (a checkpoint does: settle) changes no bit;
// a checkpoint holds it, with the fragment and the step it applies after. tau is at most H / F: one fragment in
// flight at a time, applied no later than the next exchange starts.
//
// Each rank keeps the outer state of the ranges it holds (its shard views): outer parameters, momentum and error
// feedback, 12 bytes per element, and with overlap the shift, 16 (shard/formulas.hpp: outer_state_bytes).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "hsdp/comm/communicator.hpp"
#include "hsdp/core/buffer.hpp"
#include "hsdp/core/memory.hpp"
#include "hsdp/model/layout.hpp"
#include "hsdp/shard/flat_param.hpp"

namespace hsdp::shard {

struct OuterOptions {
  std::int64_t inner_steps = 32;  // H
  float lr = 0.7f;
  float momentum = 0.9f;
  int bits = 4;  // the pseudo-gradient's wire format: 32, 16, 8 or 4
  int fragments = 1;
  bool error_feedback = true;  // bits < 32: carry each island's rounding error into its next exchange
  std::size_t block = 256;     // bits 8 and 4: elements per fp32 scale (even)
  int overlap = 0;             // tau: inner steps the exchange runs behind (0: the step waits for it); <= H / F
};

// Config errors naming the key: bits not in {32, 16, 8, 4}, F not dividing H or exceeding the model's units, an odd
// or zero block, lr <= 0, momentum outside [0, 1), overlap outside [0, H / F].
void validate(const OuterOptions& options, int num_units);

// The fragment of every unit: F runs of consecutive units, the cut after the unit where the running element count
// first reaches f/F of the total (each fragment gets at least one unit).
std::vector<int> unit_fragments(const model::ModelLayout& layout, int fragments);
std::vector<int> unit_fragments(std::span<const std::size_t> unit_numel, int fragments);

// The fragment exchanged after step `step` (1-based), or -1 for none.
int fragment_due(const OuterOptions& options, std::int64_t step);

// Bytes one rank sends for a fragment of `count` elements over `islands` islands: all_reduce's ring
// 2 (N-1) ceil(c/N) 4 for fp32, else an all_gather of its message, (N-1) times its bytes.
std::uint64_t outer_exchange_bytes(const OuterOptions& options, std::size_t count, int islands);

// The elements of each fragment in one rank's shard: sum over the fragment's units of ceil(numel / shard_size) (at
// most what any rank of the shard group holds; shard_size 1 without sharding).
std::vector<std::size_t> fragment_counts(std::span<const std::size_t> unit_numel, int shard_size, int fragments);

// The exchange's scratch on one rank, held from the first exchange on and sized once for its largest fragment of c
// elements (`fragment_counts`): the pseudo-gradient, 4 c; below 32 bits also this island's message M(c), the N
// messages gathered, N M(c), and one fp32 decode, 4 c. Charged to the accountant as comm_buffers.
std::uint64_t outer_scratch_bytes(const OuterOptions& options, std::span<const std::size_t> fragment_counts,
                                  int islands);

struct OuterReport {
  int fragment = -1;        // the fragment whose exchange started after this step; -1: none
  int applied = -1;         // the fragment whose outer step was applied after this step (the masters rewritten)
  std::size_t count = 0;    // the started fragment's elements on this rank
  std::uint64_t bytes = 0;  // what this rank sends for it (outer_exchange_bytes)
  double ms = 0;            // the wall time the step spent on exchanges: starting one, waiting for one, applying it
};

// An exchange in flight (outer.overlap): its fragment (-1: none) and the step after which it is applied.
struct OuterFlight {
  int fragment = -1;
  std::int64_t apply_step = 0;
};

class OuterOptimizer {
 public:
  // `views`: this rank's shard ranges (unit, begin, count), the same on every member of `outer`; their pointers are
  // not kept. Collective over nothing; `memory` is charged the outer state (optimizer) and, at the first exchange,
  // its scratch (comm_buffers, outer_scratch_bytes).
  OuterOptimizer(const OuterOptions& options, comm::Communicator& outer, const model::ModelLayout& layout,
                 std::span<const UnitShard> views, MemoryAccountant& memory);

  // The outer parameters become the masters of `inner` (views of the same ranges); momentum and error are zeroed,
  // nothing is in flight.
  void reset(std::span<const UnitShard> inner);
  // After the inner optimizer step of `step` (1-based), every step: the exchange in flight applied when its step
  // has come (or a new one is due), the due fragment's exchange started (and with overlap 0 applied). The masters of
  // `inner` are rewritten when report.applied >= 0 (the caller makes the backend follow). Collective over outer when
  // a fragment is due or applied.
  OuterReport after_step(std::int64_t step, std::span<const UnitShard> inner);
  // Whether after_step(step) reads or rewrites the masters (a fragment due, or the exchange in flight applied): at the
  // other steps it only moves the exchange on, and `inner` may be empty (views cost the backend a wait, and on a GPU
  // a copy of the shards).
  bool needs_masters(std::int64_t step) const;
  // Completes the exchange in flight and computes its outer step and shift (no bit changes: see above); before a
  // checkpoint. Collective over outer when an exchange is pending.
  void settle();
  OuterFlight in_flight() const { return flight_; }
  // After a checkpoint's shifts were read into shift_views(): that exchange is in flight again, settled.
  void resume_flight(const OuterFlight& flight);
  // The outer state as checkpoint views of the same ranges: params = outer parameters, exp_avg = momentum,
  // exp_avg_sq = error feedback (zero when unused).
  std::vector<UnitShard> state_views();
  // The shifts (params; settled) as checkpoint views of the same ranges, with no optimizer buffers.
  std::vector<UnitShard> shift_views();
  const OuterOptions& options() const { return options_; }

 private:
  struct Range {
    int unit = 0;
    std::size_t begin = 0;
    std::size_t count = 0;
    std::size_t offset = 0;  // into the state buffers
    int fragment = 0;
  };
  // Starts the exchange of the first count_ elements of delta_ (the fragment's pseudo-gradient, error added and
  // updated in error_ through the fragment's ranges `mine`) into pending_.
  void start_exchange(std::span<const std::size_t> mine);
  // Waits for it; delta_ becomes the islands' mean.
  void finish_exchange();
  // Nesterov with the mean in delta_ on the outer parameters and momentum of the fragment's ranges `mine`.
  void outer_step(std::span<const std::size_t> mine);
  // The fragment's ranges (indices into ranges_).
  std::vector<std::size_t> ranges_of(int fragment) const;
  void ensure_shift();
  // The scratch below, allocated at the first exchange for the largest fragment this rank holds.
  void ensure_scratch();

  OuterOptions options_;
  comm::Communicator& outer_;
  MemoryAccountant& memory_;
  std::vector<Range> ranges_;
  Buffer<float> params_, momentum_, error_, shift_;
  std::size_t largest_fragment_ = 0;  // elements
  std::size_t count_ = 0;             // the exchange's elements: the first count_ of delta_ and wire_
  Buffer<float> delta_, wire_;        // the pseudo-gradient, then the islands' mean; a message decoded
  Buffer<std::uint8_t> message_, received_;
  comm::CommHandle pending_;
  OuterFlight flight_;
  bool settled_ = false;
};

}  // namespace hsdp::shard
