#include "hsdp/shard/outer.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "hsdp/core/dtype.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/timer.hpp"
#include "hsdp/quant/blockwise.hpp"

namespace hsdp::shard {
namespace {

bool quantized(const OuterOptions& o) {
  return o.bits == 8 || o.bits == 4;
}

quant::QuantSpec spec_of(const OuterOptions& o) {
  return {o.bits == 8 ? quant::Bits::int8 : quant::Bits::int4, o.block};
}

// Packed values padded to 4 bytes, then the fp32 scales: one message of `count` quantized elements.
std::size_t packed_padded(std::size_t count, const OuterOptions& o) {
  return (quant::packed_bytes(count, spec_of(o).bits) + 3) / 4 * 4;
}
std::size_t message_bytes(std::size_t count, const OuterOptions& o) {
  if (o.bits == 32) return count * sizeof(float);
  if (o.bits == 16) return count * sizeof(bf16_t);
  return packed_padded(count, o) + sizeof(float) * quant::scale_count(count, o.block);
}

quant::QuantizedSpan message_span(std::uint8_t* bytes, std::size_t count, const OuterOptions& o) {
  const std::size_t packed = packed_padded(count, o);
  return {{bytes, quant::packed_bytes(count, spec_of(o).bits)},
          {reinterpret_cast<float*>(bytes + packed), quant::scale_count(count, o.block)},
          count,
          spec_of(o)};
}

}  // namespace

void validate(const OuterOptions& o, int num_units) {
  if (o.bits != 32 && o.bits != 16 && o.bits != 8 && o.bits != 4) {
    throw_config("outer.bits=" + std::to_string(o.bits) +
                 ": the pseudo-gradient's wire format is 32 (fp32), 16 "
                 "(bf16), 8 or 4 (block-wise int8 or int4)");
  }
  if (o.inner_steps < 1) throw_config("outer.inner_steps must be at least 1");
  if (o.fragments < 1 || o.fragments > num_units) {
    throw_config("outer.fragments=" + std::to_string(o.fragments) + " must be between 1 and the model's " +
                 std::to_string(num_units) + " units (the embedding, each block, the final norm)");
  }
  if (o.inner_steps % o.fragments != 0) {
    throw_config("outer.fragments=" + std::to_string(o.fragments) + " must divide outer.inner_steps=" +
                 std::to_string(o.inner_steps) + " (fragment f is exchanged at steps f*H/F mod H)");
  }
  if (!(o.lr > 0)) throw_config("outer.lr must be positive");
  if (!(o.momentum >= 0 && o.momentum < 1)) throw_config("outer.momentum must be in [0, 1)");
  if (o.overlap < 0 || o.overlap > o.inner_steps / o.fragments) {
    throw_config("outer.overlap=" + std::to_string(o.overlap) + " must be between 0 and outer.inner_steps / " +
                 "outer.fragments = " + std::to_string(o.inner_steps / o.fragments) +
                 " (one exchange in flight at a time, applied before the next starts)");
  }
  if (quantized(o)) quant::validate(spec_of(o));
}

std::vector<int> unit_fragments(const model::ModelLayout& layout, int fragments) {
  std::vector<std::size_t> numel;
  for (int u = 0; u < layout.num_units(); ++u) numel.push_back(layout.unit(u).numel);
  return unit_fragments(numel, fragments);
}

std::vector<int> unit_fragments(std::span<const std::size_t> unit_numel, int fragments) {
  const int units = static_cast<int>(unit_numel.size());
  std::size_t total = 0;
  for (const std::size_t n : unit_numel) total += n;
  std::vector<int> of(static_cast<std::size_t>(units), 0);
  std::size_t run = 0;
  int f = 0;
  for (int u = 0; u < units; ++u) {
    of[static_cast<std::size_t>(u)] = f;
    run += unit_numel[static_cast<std::size_t>(u)];
    const bool reached = static_cast<double>(run) * fragments >= static_cast<double>(total) * (f + 1);
    const bool units_left_just_enough = units - u - 1 == fragments - 1 - f;
    if (f < fragments - 1 && (reached || units_left_just_enough)) ++f;
  }
  return of;
}

int fragment_due(const OuterOptions& o, std::int64_t step) {
  if (step <= 0) return -1;
  const std::int64_t period = o.inner_steps / o.fragments;
  const std::int64_t at = step % o.inner_steps;
  if (at % period != 0) return -1;
  return static_cast<int>(at / period);
}

std::uint64_t outer_exchange_bytes(const OuterOptions& o, std::size_t count, int islands) {
  const auto n = static_cast<std::uint64_t>(islands);
  if (n <= 1 || count == 0) return 0;
  if (o.bits == 32) return 2 * (n - 1) * ((count + n - 1) / n) * sizeof(float);
  return (n - 1) * message_bytes(count, o);
}

std::vector<std::size_t> fragment_counts(std::span<const std::size_t> unit_numel, int shard_size, int fragments) {
  const std::vector<int> fragment_of = unit_fragments(unit_numel, fragments);
  const auto n = static_cast<std::size_t>(shard_size);
  std::vector<std::size_t> count(static_cast<std::size_t>(fragments), 0);
  for (std::size_t u = 0; u < unit_numel.size(); ++u) {
    count[static_cast<std::size_t>(fragment_of[u])] += (unit_numel[u] + n - 1) / n;
  }
  return count;
}

std::uint64_t outer_scratch_bytes(const OuterOptions& o, std::span<const std::size_t> fragment_counts, int islands) {
  if (islands <= 1) return 0;
  std::size_t c = 0;
  for (const std::size_t f : fragment_counts) c = std::max(c, f);
  if (o.bits == 32) return sizeof(float) * c;
  return 2 * sizeof(float) * c + (static_cast<std::uint64_t>(islands) + 1) * message_bytes(c, o);
}

OuterOptimizer::OuterOptimizer(const OuterOptions& options, comm::Communicator& outer, const model::ModelLayout& layout,
                               std::span<const UnitShard> views, MemoryAccountant& memory)
    : options_(options), outer_(outer), memory_(memory) {
  validate(options_, layout.num_units());
  const std::vector<int> fragment = unit_fragments(layout, options_.fragments);
  std::size_t total = 0;
  std::vector<std::size_t> held(static_cast<std::size_t>(options_.fragments), 0);
  for (const UnitShard& v : views) {
    const int f = fragment[static_cast<std::size_t>(v.unit)];
    ranges_.push_back({v.unit, v.begin, v.count, total, f});
    total += v.count;
    held[static_cast<std::size_t>(f)] += v.count;
  }
  largest_fragment_ = *std::max_element(held.begin(), held.end());
  params_.reset(total, &memory, MemCategory::optimizer);
  momentum_.reset(total, &memory, MemCategory::optimizer);
  error_.reset(total, &memory, MemCategory::optimizer);
  if (options_.overlap > 0) ensure_shift();
}

void OuterOptimizer::ensure_shift() {
  if (shift_.size() != params_.size()) shift_.reset(params_.size(), &memory_, MemCategory::optimizer);
}

void OuterOptimizer::ensure_scratch() {
  if (!delta_.empty() || largest_fragment_ == 0) return;
  delta_.reset(largest_fragment_, &memory_, MemCategory::comm_buffers);
  if (options_.bits == 32) return;  // the all-reduce runs in place
  const std::size_t bytes = message_bytes(largest_fragment_, options_);
  wire_.reset(largest_fragment_, &memory_, MemCategory::comm_buffers);
  message_.reset(bytes, &memory_, MemCategory::comm_buffers);
  received_.reset(bytes * static_cast<std::size_t>(outer_.size()), &memory_, MemCategory::comm_buffers);
}

void OuterOptimizer::reset(std::span<const UnitShard> inner) {
  for (std::size_t i = 0; i < ranges_.size(); ++i) {
    std::memcpy(params_.data() + ranges_[i].offset, inner[i].params, ranges_[i].count * sizeof(float));
  }
  std::fill_n(momentum_.data(), momentum_.size(), 0.0f);
  std::fill_n(error_.data(), error_.size(), 0.0f);
  flight_ = {};
  settled_ = false;
}

std::vector<UnitShard> OuterOptimizer::state_views() {
  std::vector<UnitShard> views;
  for (const Range& r : ranges_) {
    views.push_back(
        {r.unit, r.begin, r.count, params_.data() + r.offset, momentum_.data() + r.offset, error_.data() + r.offset});
  }
  return views;
}

std::vector<UnitShard> OuterOptimizer::shift_views() {
  ensure_shift();
  std::vector<UnitShard> views;
  for (const Range& r : ranges_)
    views.push_back({r.unit, r.begin, r.count, shift_.data() + r.offset, nullptr, nullptr});
  return views;
}

void OuterOptimizer::resume_flight(const OuterFlight& flight) {
  flight_ = flight;
  settled_ = flight.fragment >= 0;
  if (settled_) ensure_shift();
}

std::vector<std::size_t> OuterOptimizer::ranges_of(int fragment) const {
  std::vector<std::size_t> mine;
  for (std::size_t i = 0; i < ranges_.size(); ++i) {
    if (ranges_[i].fragment == fragment) mine.push_back(i);
  }
  return mine;
}

void OuterOptimizer::start_exchange(std::span<const std::size_t> mine) {
  const std::size_t n = count_;
  const bool feedback = options_.error_feedback && options_.bits < 32;
  if (feedback) {  // the rounding error this island's last message left, carried into this one
    std::size_t at = 0;
    for (const std::size_t i : mine) {
      const float* e = error_.data() + ranges_[i].offset;
      for (std::size_t k = 0; k < ranges_[i].count; ++k) delta_[at + k] += e[k];
      at += ranges_[i].count;
    }
  }
  if (options_.bits == 32) {
    pending_ = outer_.all_reduce_async(delta_.data(), delta_.data(), n, DType::f32, comm::ReduceOp::avg);
    return;
  }
  const std::size_t bytes = message_bytes(n, options_);
  if (bytes > 0) std::memset(message_.data(), 0, bytes);  // the padding after the packed values too: the same bytes
  const std::span<const float> delta(delta_.data(), n);
  const std::span<float> wire(wire_.data(), n);  // this island's message as the others read it
  if (options_.bits == 16) {
    auto* values = reinterpret_cast<bf16_t*>(message_.data());
    for (std::size_t k = 0; k < n; ++k) {
      values[k] = float_to_bf16(delta_[k]);
      wire[k] = bf16_to_float(values[k]);
    }
  } else {
    const quant::QuantizedSpan message = message_span(message_.data(), n, options_);
    if (quant::all_finite(delta)) {
      quant::quantize(delta, message);
    } else {
      // A master gone non-finite on this island: NaN scales, so that every island decodes NaN into the outer
      // parameters and the next step's loss ends the job on every rank as a divergence, as a NaN does at 16 and 32
      // bits (quantize's throw, on this island alone, would leave the others waiting in the all-gather).
      std::fill(message.scales.begin(), message.scales.end(), std::numeric_limits<float>::quiet_NaN());
    }
    quant::dequantize(message, wire);
  }
  if (feedback) {
    std::size_t at = 0;
    for (const std::size_t i : mine) {
      float* e = error_.data() + ranges_[i].offset;
      for (std::size_t k = 0; k < ranges_[i].count; ++k) e[k] = delta_[at + k] - wire[at + k];
      at += ranges_[i].count;
    }
  }
  pending_ = outer_.all_gather_async(message_.data(), received_.data(), bytes, DType::u8);
}

void OuterOptimizer::finish_exchange() {
  pending_.wait();
  if (options_.bits == 32) return;  // the all-reduce's average, the same bits on every rank
  // The mean of the N messages, summed in island order: the same bits on every rank.
  const std::size_t n = count_;
  const std::size_t bytes = message_bytes(n, options_);
  const auto islands = static_cast<std::size_t>(outer_.size());
  const std::span<float> wire(wire_.data(), n);
  std::fill_n(delta_.data(), n, 0.0f);
  for (std::size_t i = 0; i < islands; ++i) {
    std::uint8_t* theirs = received_.data() + i * bytes;
    if (options_.bits == 16) {
      const auto* values = reinterpret_cast<const bf16_t*>(theirs);
      for (std::size_t k = 0; k < n; ++k) delta_[k] += bf16_to_float(values[k]);
    } else {
      quant::dequantize(message_span(theirs, n, options_), wire);
      for (std::size_t k = 0; k < n; ++k) delta_[k] += wire[k];
    }
  }
  const auto count = static_cast<float>(islands);
  for (std::size_t k = 0; k < n; ++k) delta_[k] /= count;
}

void OuterOptimizer::outer_step(std::span<const std::size_t> mine) {
  const float lr = options_.lr;
  const float mu = options_.momentum;
  std::size_t at = 0;
  for (const std::size_t i : mine) {
    const Range& r = ranges_[i];
    float* outer = params_.data() + r.offset;
    float* m = momentum_.data() + r.offset;
    for (std::size_t k = 0; k < r.count; ++k) {
      const float g = delta_[at + k];
      m[k] = mu * m[k] + g;
      outer[k] -= lr * (g + mu * m[k]);
    }
    at += r.count;
  }
}

void OuterOptimizer::settle() {
  if (flight_.fragment < 0 || settled_) return;
  finish_exchange();
  const std::vector<std::size_t> mine = ranges_of(flight_.fragment);
  outer_step(mine);
  // The shift from the masters the island sent (shift_ holds them until now).
  for (const std::size_t i : mine) {
    const float* outer = params_.data() + ranges_[i].offset;
    float* shift = shift_.data() + ranges_[i].offset;
    for (std::size_t k = 0; k < ranges_[i].count; ++k) shift[k] = outer[k] - shift[k];
  }
  settled_ = true;
}

bool OuterOptimizer::needs_masters(std::int64_t step) const {
  return fragment_due(options_, step) >= 0 || (flight_.fragment >= 0 && step >= flight_.apply_step);
}

OuterReport OuterOptimizer::after_step(std::int64_t step, std::span<const UnitShard> inner) {
  OuterReport report;
  const int due = fragment_due(options_, step);
  if (needs_masters(step) && inner.size() != ranges_.size()) {
    throw_internal("outer step " + std::to_string(step) + ": " + std::to_string(inner.size()) + " views of the " +
                   std::to_string(ranges_.size()) + " shards it reads");
  }
  Stopwatch clock;
  if (flight_.fragment >= 0) {
    if (step < flight_.apply_step && due < 0) {
      pending_.done();  // moves a ring on; an MPI collective moves on inside any MPI call
      return report;
    }
    settle();
    for (const std::size_t i : ranges_of(flight_.fragment)) {
      const float* shift = shift_.data() + ranges_[i].offset;
      for (std::size_t k = 0; k < ranges_[i].count; ++k) inner[i].params[k] += shift[k];
    }
    report.applied = flight_.fragment;
    flight_ = {};
    settled_ = false;
  }
  report.fragment = due;
  if (due >= 0) {
    // The fragment's pseudo-gradient, gathered from its ranges into one message.
    const std::vector<std::size_t> mine = ranges_of(due);
    for (const std::size_t i : mine) report.count += ranges_[i].count;
    ensure_scratch();
    count_ = report.count;
    std::size_t at = 0;
    for (const std::size_t i : mine) {
      const Range& r = ranges_[i];
      const float* outer = params_.data() + r.offset;
      for (std::size_t k = 0; k < r.count; ++k) delta_[at + k] = outer[k] - inner[i].params[k];
      at += r.count;
    }
    start_exchange(mine);
    report.bytes = outer_exchange_bytes(options_, report.count, outer_.size());
    if (options_.overlap > 0) {
      for (const std::size_t i : mine) {
        std::copy_n(inner[i].params, ranges_[i].count, shift_.data() + ranges_[i].offset);
      }
      flight_ = {due, step + options_.overlap};
    } else {
      // Blocking: the outer step; the masters become the outer parameters.
      finish_exchange();
      outer_step(mine);
      for (const std::size_t i : mine) {
        std::copy_n(params_.data() + ranges_[i].offset, ranges_[i].count, inner[i].params);
      }
      report.applied = due;
    }
  }
  report.ms = clock.milliseconds();
  return report;
}

}  // namespace hsdp::shard
