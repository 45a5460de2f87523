#include "hsdp/train/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "hsdp/comm/agree.hpp"
#include "hsdp/core/buffer.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/json.hpp"
#include "hsdp/core/timer.hpp"
#include "hsdp/data/sampler.hpp"
#include "hsdp/data/token_file.hpp"
#include "hsdp/device/threads.hpp"
#include "hsdp/model/gpt.hpp"
#include "hsdp/model/init.hpp"
#include "hsdp/model/layout.hpp"
#include "hsdp/optim/grad_clip.hpp"
#include "hsdp/train/metrics.hpp"

namespace hsdp::train {

namespace {

// The model state one rank holds when every rank keeps everything (no_shard): fp32 parameters, gradients
// and the two AdamW moments, one flat buffer per unit.
struct ReplicatedState {
  std::vector<Buffer<float>> params, grads, m, v;
  std::vector<std::vector<optim::DecaySegment>> segments;

  ReplicatedState(const model::ModelLayout& layout, std::uint64_t seed, MemoryAccountant& memory) {
    for (int u = 0; u < layout.num_units(); ++u) {
      const std::size_t n = layout.unit(u).numel;
      params.emplace_back(n, memory, MemCategory::params);
      grads.emplace_back(n, memory, MemCategory::grads);
      m.emplace_back(n, memory, MemCategory::optimizer);
      v.emplace_back(n, memory, MemCategory::optimizer);
      model::init_unit<float>(layout, u, params.back().span(), seed);
      std::vector<optim::DecaySegment> unit_segments;
      for (const model::ParamInfo* p : layout.unit_params(u)) {
        unit_segments.push_back({p->offset, p->numel, p->weight_decay});
      }
      segments.push_back(std::move(unit_segments));
    }
  }
  std::vector<const float*> param_pointers() const {
    std::vector<const float*> out;
    for (const auto& b : params) out.push_back(b.data());
    return out;
  }
  std::vector<float*> grad_pointers() {
    std::vector<float*> out;
    for (auto& b : grads) out.push_back(b.data());
    return out;
  }
};

double read_entropy_rate(const std::string& path) {
  if (path.empty()) return -1;
  std::ifstream file(path);
  if (!file) throw_data("data.entropy_json: cannot open '" + path + "'");
  std::stringstream text;
  text << file.rdbuf();
  const std::string s = text.str();
  const std::string key = "\"entropy_nats_per_token\":";
  const auto at = s.find(key);
  if (at == std::string::npos) throw_data("data.entropy_json: '" + path + "' has no entropy_nats_per_token");
  return std::strtod(s.c_str() + at + key.size(), nullptr);
}

// device.threads = 0: share the node's cores among its ranks, within this rank's affinity mask.
int threads_per_rank(int configured, const comm::Topology& topology) {
  if (configured > 0) return configured;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int share = std::max(1, cores / std::max(1, topology.node_size(topology.node())));
  return std::min(share, device::available_cores());
}

double global_mean(comm::Communicator& comm, double value) {
  comm.all_reduce(std::span<double>(&value, 1), comm::ReduceOp::avg);
  return value;
}

}  // namespace

TrainSummary train(const TrainOptions& o, comm::ProcessMesh& mesh, const Logger& log) {
  if (o.sharding != comm::Sharding::no_shard) {
    throw_config(std::string("parallel.sharding=") + comm::to_string(o.sharding) +
                 ": training with this strategy is not implemented yet (only no_shard trains in this version; "
                 "--print-mesh shows its groups)");
  }
  comm::MpiCommunicator& world = mesh.world();
  comm::Communicator& data_parallel = mesh.replicate();  // no_shard: every rank is a replica
  const int dp_rank = data_parallel.rank();
  const int dp_size = data_parallel.size();
  const int thread_count = threads_per_rank(o.threads, mesh.topology());
  const device::ThreadCountScope threads(thread_count);

  MemoryAccountant memory;
  std::unique_ptr<model::ModelLayout> layout;
  std::unique_ptr<data::TokenFile> train_file, val_file;
  std::unique_ptr<data::Sampler> sampler;
  std::unique_ptr<data::EvalLoader> evaluator;
  std::unique_ptr<MetricsLog> metrics;
  double entropy_rate = -1;
  comm::agree(world.raw(), [&] {
    layout = std::make_unique<model::ModelLayout>(o.model);
    train_file = std::make_unique<data::TokenFile>(o.train_path, "data.train");
    train_file->validate_vocab(o.model.vocab_size);
    sampler = std::make_unique<data::Sampler>(*train_file, o.micro_batch, o.seq_len, dp_rank, dp_size, o.data_seed);
    if (o.eval_every > 0) {
      val_file = std::make_unique<data::TokenFile>(o.val_path, "data.val");
      val_file->validate_vocab(o.model.vocab_size);
      evaluator = std::make_unique<data::EvalLoader>(*val_file, o.micro_batch, o.seq_len, dp_rank, dp_size);
    }
    entropy_rate = read_entropy_rate(o.entropy_json);
    if (log.is_root()) metrics = std::make_unique<MetricsLog>(o.log_dir);
  });

  ReplicatedState state(*layout, o.model_seed, memory);
  model::Gpt<float> gpt(*layout, o.micro_batch, o.seq_len, memory, o.activation_checkpointing);
  const std::vector<const float*> params = state.param_pointers();
  const std::vector<float*> grads = state.grad_pointers();
  const std::size_t tokens_per_micro = static_cast<std::size_t>(o.micro_batch) * o.seq_len;
  std::vector<std::int32_t> inputs(tokens_per_micro), targets(tokens_per_micro);
  const std::int64_t tokens_per_step = static_cast<std::int64_t>(tokens_per_micro) * o.grad_accum * dp_size;

  log.info("hsdp-train: ", layout->total_numel(), " parameters (", layout->num_units(), " units), ",
           mesh.topology().world_size, " rank(s), strategy ", comm::to_string(o.sharding), ", ",
           tokens_per_step, " tokens per step (micro_batch ", o.micro_batch, " x seq_len ", o.seq_len,
           " x grad_accum ", o.grad_accum, " x ", dp_size, " data-parallel), ", thread_count,
           " thread(s) per rank");

  auto evaluate = [&]() {
    evaluator->reset();
    double sum = 0;
    for (int b = 0; b < o.eval_batches; ++b) {
      evaluator->next(inputs, targets);
      sum += gpt.evaluate(inputs, targets, params);
    }
    return global_mean(data_parallel, sum / o.eval_batches);
  };

  TrainSummary summary;
  summary.entropy_rate = entropy_rate;
  Stopwatch run_clock;
  double timed_seconds = 0;
  std::int64_t timed_tokens = 0;
  for (std::int64_t step = 0; step < o.steps; ++step) {
    Stopwatch step_clock;
    mesh.reset_counters();
    double comm_ms = 0;
    for (auto& g : state.grads) g.fill_zero();
    double loss = 0;
    for (int micro = 0; micro < o.grad_accum; ++micro) {
      sampler->next(inputs, targets);
      loss += gpt.forward(inputs, targets, params);
      gpt.backward(params, grads, 1.0f / static_cast<float>(o.grad_accum));
    }
    loss /= o.grad_accum;
    {
      ScopedTimer timer(comm_ms);
      if (dp_size > 1) {
        for (auto& g : state.grads) data_parallel.all_reduce(g.span(), comm::ReduceOp::avg);
      }
      loss = global_mean(data_parallel, loss);
    }
    double squared = 0;
    for (const auto& g : state.grads) squared += optim::local_squared_sum(g.span());
    const optim::ClipResult clip = optim::clip_coefficient(squared, o.grad_clip);
    if (!clip.finite) {
      throw Error(ErrorKind::internal, "step " + std::to_string(step + 1) +
                                           ": the gradient norm is not finite (loss " + std::to_string(loss) +
                                           "); lower train.lr or check the data");
    }
    const double lr = optim::learning_rate(o.schedule, step);
    const optim::AdamWStep update{static_cast<float>(lr), step + 1, clip.coefficient};
    for (std::size_t u = 0; u < state.params.size(); ++u) {
      optim::adamw_update(o.adamw, update, state.params[u].span(), state.grads[u].span(), state.m[u].span(),
                          state.v[u].span(), state.segments[u]);
    }

    StepMetrics m;
    m.step = step + 1;
    m.loss = loss;
    m.lr = lr;
    m.grad_norm = clip.norm;
    m.tokens = tokens_per_step;
    m.step_ms = step_clock.milliseconds();
    m.comm_ms = comm_ms;
    m.tokens_per_s = static_cast<double>(tokens_per_step) / (m.step_ms / 1e3);
    m.bytes = mesh.total_counters().total();
    if (step > 0) {  // the first step pays for page faults and warm-up
      timed_seconds += m.step_ms / 1e3;
      timed_tokens += tokens_per_step;
    }
    const bool last = step + 1 == o.steps;
    if (evaluator && ((o.eval_every > 0 && m.step % o.eval_every == 0) || last)) {
      m.val_loss = evaluate();
      summary.final_val_loss = m.val_loss;
    }
    summary.final_loss = loss;
    if (log.is_root()) {
      metrics->write(to_json(m, memory));
      if (m.step == 1 || m.step % o.log_every == 0 || last) {
        const double per_step = run_clock.seconds() / static_cast<double>(m.step);
        log.info(progress_line(m, o.steps, memory, per_step * static_cast<double>(o.steps - m.step)));
      }
      if (m.val_loss >= 0) {
        std::ostringstream line;
        line << "eval step " << m.step << " | val loss " << m.val_loss;
        if (entropy_rate > 0) line << " | source entropy " << entropy_rate << " (ratio " << m.val_loss / entropy_rate << ")";
        log.info(line.str());
      }
    }
  }
  summary.steps = o.steps;
  summary.seconds = run_clock.seconds();
  summary.tokens_per_s = timed_seconds > 0 ? static_cast<double>(timed_tokens) / timed_seconds : 0;

  if (log.is_root()) {
    JsonLine j;
    j.add("steps", summary.steps).add("final_loss", summary.final_loss);
    if (summary.final_val_loss >= 0) j.add("final_val_loss", summary.final_val_loss);
    if (entropy_rate > 0) j.add("entropy_rate", entropy_rate);
    j.add("tokens_per_s", summary.tokens_per_s).add("seconds", summary.seconds);
    j.add("world_size", mesh.topology().world_size).add("nodes", mesh.topology().num_nodes());
    j.add("strategy", comm::to_string(o.sharding));
    j.add("params", static_cast<std::uint64_t>(layout->total_numel()));
    j.add_raw("memory_peak", [&] {
      JsonLine p;
      for (const MemCategory c : kAllMemCategories) p.add(to_string(c), memory.peak(c));
      p.add("total", memory.peak_total());
      return p.str();
    }());
    j.add("deck", o.deck_text);
    std::ofstream(metrics->dir() + "/summary.json") << j.str() << "\n";
    log.info("done: ", summary.steps, " steps in ", format_duration(summary.seconds), ", ",
             static_cast<long long>(summary.tokens_per_s), " tokens/s; metrics in ", metrics->dir());
  }
  return summary;
}

}  // namespace hsdp::train
