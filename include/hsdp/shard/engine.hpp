#pragma once
// The sharding engine: runs a GPT's forward and backward unit by unit, gathering parameters and reducing
// gradients as the strategy prescribes (PyTorch FSDP semantics), then steps AdamW on the local shards.
//
//   no_shard            every rank holds everything; gradients all-reduced (avg) over the world in buckets of
//                       parallel.bucket_mb, each started as soon as the backward of its units is done.
//   zero1               full parameters and gradients on every rank; gradients reduce-scattered, AdamW on the
//                       shard, updated parameters all-gathered.
//   shard_grad_op       parameters gathered before forward and kept until the unit's backward; gradients
//                       reduce-scattered; only the shard persists between steps.
//   full_shard          gathered before forward and freed after it, gathered again before backward.
//   hybrid_shard(_zero2) full_shard (shard_grad_op) inside the node, then the gradient shard all-reduced (avg)
//                       across the replicate group (same local rank on every node).
// The embedding unit is tied to the LM head: it is gathered for the embedding and again for the head; the head's
// backward follows its forward directly, so final norm and embedding stay gathered in between; the embedding's
// own backward needs no parameters.
//
// Gradient accumulation (k micro-batches): gradients reach other nodes only after the last micro-batch.
// no_shard, zero1, shard_grad_op and full_shard keep the unit's full fp32 gradient across micro-batches and reduce
// once; hybrid strategies reduce-scatter inside the node every micro-batch into the fp32 shard (memory stays
// sharded) and all-reduce across nodes once.
//
// Precision: compute is fp32 on the CPU. precision.param (fp32|bf16|fp16) is the dtype parameters are gathered in
// (and rounded to for compute); precision.reduce the dtype gradients are reduced in. Master weights, moments and
// the gradient shard are fp32.
//
// ZeRO++ (full_shard, hybrid_shard): qwZ gathers the forward weights as int8 blocks; hpZ keeps, after each forward
// gather of a block, a secondary 1/k slice of its weights in the rank's hpZ group (k ranks of the node) and gathers
// the backward weights from that group only (the copy is made from the current weights at every forward, so it is
// never stale after an optimizer step or a checkpoint load); qgZ replaces the gradient reduce-scatter by the two-hop
// quantized all-to-all of zeropp.hpp (one node: exact reduce-scatter, said once in the log; hybrid_shard: the
// reduce-scatter inside the node is quantized, the all-reduce across nodes stays in precision.reduce).
//
// Overlap: with parallel.prefetch the next unit's all-gather is issued before the current unit computes, in
// forward and backward; reductions are issued after each unit's backward and completed later. All of it is work on
// stream queues (hsdp/stream/queues.hpp; the queues are listed in engine_impl.hpp): compute waits for a gather's event,
// reductions for compute's, and memory returns to its pool after the event of its last use. Nonblocking MPI
// collectives progress when polled, so the engine polls the queues at every unit boundary and, through
// UnitModel::between_kernels, between a unit's kernels (inline queues).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hsdp/comm/mesh.hpp"
#include "hsdp/core/dtype.hpp"
#include "hsdp/core/log.hpp"
#include "hsdp/core/memory.hpp"
#include "hsdp/model/unit_model.hpp"
#include "hsdp/optim/adamw.hpp"
#include "hsdp/shard/flat_param.hpp"
#include "hsdp/shard/engine_options.hpp"
#include "hsdp/shard/strategy.hpp"
#include "hsdp/shard/zeropp.hpp"
#include "hsdp/stream/device_ops.hpp"
#include "hsdp/stream/queues.hpp"

namespace hsdp::shard {

// The stream runtime the engine runs on (hsdp/stream/).
using stream::AccessMode;
using stream::BufferAccess;
using stream::BufferId;
using stream::Executor;
using stream::make_cpu_device_ops;
using stream::make_threads_executor;
using stream::QueueId;
using stream::QueueRole;
using stream::reads;
using stream::StreamEvent;
using stream::StreamOptions;
using stream::StreamQueues;
using stream::writes;

// Orderings the engine leaves out on purpose, to prove that the stream checker reports them (tests only).
struct StreamFaults {
  bool skip_gather_wait = false;    // compute reads unit 1's gathered weights without waiting for the gather's event
  bool early_staging_free = false;  // a reduce-scatter's receive buffer released before the accumulate that reads it
  bool early_norm_read = false;     // the host reads the squared norm without waiting for its reduction
};

// The scalars of one optimizer step, computed on the device and copied to the host in one read (Engine::step_scalars).
struct StepScalars {
  double loss_sum = 0;      // this rank's micro-batch mean losses, summed over the step's micro-batches
  double norm_squared = 0;  // the global squared gradient norm, the same on every rank
  bool nonfinite = false;   // asked for (fp16, qgZ): any rank's gradients held inf or nan, the same on every rank
};

struct StepTiming {
  double comm_ms = 0;          // wall time with at least one collective in flight (issue -> observed completion):
                               // the union of those intervals, so never more than the step
  double exposed_comm_ms = 0;  // time the compute thread waited for collectives (a part of comm_ms)
};

class Engine {
 public:
  // Allocates and initialises this rank's state, then gathers what the strategy keeps whole (a collective) unless
  // options.defer_first_gather leaves that to derive_if_pending or the first use.
  // `log` (optional) receives one-time notes, e.g. that qgZ falls back to an exact reduce-scatter on one node.
  // `device` does the element work on its memory (device_ops.hpp); null: the CPU (make_cpu_device_ops(memory)).
  Engine(const model::ModelLayout& layout, comm::ProcessMesh& mesh, const EngineOptions& options, std::uint64_t seed,
         MemoryAccountant& memory, const Logger* log = nullptr, std::unique_ptr<DeviceOps> device = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Zeroes the gradients and the step's timers; call before the first micro-batch of a step.
  void begin_step();
  // One micro-batch: forward and backward with gradients scaled by dloss (1/k, times a loss scale for fp16); its
  // mean loss on this rank is added to the step's on the device. `last` marks the last micro-batch of the step.
  // Nothing here waits for the device: the host may refill its token buffers at once (the ids are copied).
  // The model computes in its compute_dtype(), the dtype of the engine's compute copies (fp32 on the CPU device).
  void forward_backward(model::UnitModel& model, std::span<const std::int32_t> tokens,
                        std::span<const std::int32_t> targets, float dloss, bool last);
  // After the last micro-batch: the loss sum, the global squared gradient norm and, with check_nonfinite (fp16
  // overflow; with qgZ, whose quantizer zeroes a non-finite gradient, in every dtype), the flag, all-reduced where
  // they must be and read by the host in one copy: the step's one wait for the device before its optimizer step
  // (the clipping coefficient, an fp16 skip and a divergence are decided on the host).
  StepScalars step_scalars(bool check_nonfinite);
  // AdamW on the local shards, then whatever the strategy needs to make parameters current (zero1: all-gather).
  // Returns without waiting for the device but for zero1 (its all-gathers' time is the step's): the next step's
  // step_scalars, a checkpoint's or the replica check's views, an evaluation's loss wait for it.
  void optimizer_step(const optim::AdamWConfig& config, const optim::AdamWStep& step);
  // Waits for every queued operation (the last step's AdamW); an error of one throws here.
  void synchronize();
  // Forward only (evaluation): mean loss of this rank's batch.
  float evaluate(model::UnitModel& model, std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets);

  const StepTiming& timing() const { return timing_; }
  const std::vector<std::unique_ptr<FlatParamUnit>>& units() const { return units_; }
  // Host views of this rank's shards for a checkpoint (after all queued work): the device memory itself where the
  // host can reach it (DeviceOps::host_address), else host copies. Valid until the next call.
  std::vector<UnitShard> shard_views();
  // After a checkpoint was loaded into shard_views()' views: staged copies go to the device, derived state (the
  // persistent full parameters) is rebuilt.
  void checkpoint_loaded();
  // The persistent full compute parameters this rank holds between steps (zero1's gathered parameters; no_shard's
  // rounded copies with a param dtype below fp32), as host bytes per unit (the device memory itself where the host
  // reaches it, else copies valid until the next call): state every rank holds alike, for the replica check
  // (train/replicas.hpp). Empty where the strategy keeps none.
  struct ReplicatedParams {
    int unit = 0;
    std::byte* bytes = nullptr;
    std::size_t size = 0;
    bool in_place = false;  // the device memory itself (a write there is the parameters')
  };
  std::vector<ReplicatedParams> replicated_params();
  // With EngineOptions::defer_first_gather: the gather the constructor left (collective; no-op once done). The
  // first begin_step, forward_backward, evaluate or replicated_params does it too.
  void derive_if_pending();
  // Exactly one replica of every shard writes checkpoints: the rank with replicate rank 0.
  bool is_checkpoint_writer() const;
  // Tests of the stream checker only.
  void inject(const StreamFaults& faults);
  // The internals, opaque outside src/shard (engine_impl.hpp).
  struct Impl;

 private:
  void configure_zeropp(const ZeroPPOptions& z);
  // What a forward is for: training (a backward follows) or evaluation (the loss only).
  enum class Purpose { training, evaluation };
  void forward_blocks(model::UnitModel& model, std::shared_ptr<const std::vector<std::int32_t>> tokens,
                      Purpose purpose);
  // After the masters changed (AdamW, a checkpoint load): the persistent full parameters follow.
  void refresh_derived_state();
  std::unique_ptr<DeviceOps> device_;
  std::unique_ptr<StreamQueues> queues_;
  std::unique_ptr<Impl> impl_;
  comm::ProcessMesh& mesh_;
  std::vector<std::unique_ptr<FlatParamUnit>> units_;
  StepTiming timing_;
};

}  // namespace hsdp::shard
