#pragma once
// What the training loop needs to know, as typed values (app/ builds it from the deck).
#include <cstdint>
#include <string>

#include "hsdp/comm/mesh.hpp"
#include "hsdp/comm/types.hpp"
#include "hsdp/device/select_device.hpp"
#include "hsdp/model/config.hpp"
#include "hsdp/optim/adamw.hpp"
#include "hsdp/optim/lr_schedule.hpp"
#include "hsdp/shard/engine.hpp"
#include "hsdp/shard/outer.hpp"

namespace hsdp::train {

struct TrainOptions {
  model::GptConfig model;
  std::uint64_t model_seed = 1337;

  std::string train_path;
  std::string val_path;
  std::string entropy_json;  // optional: `hsdp-data synth`'s source.json
  std::string tokenizer;     // data.tokenizer: a SentencePiece model file, or empty for bytes

  std::int64_t steps = 1000;
  int micro_batch = 4;
  int seq_len = 64;
  int grad_accum = 1;
  optim::CosineSchedule schedule;
  optim::AdamWConfig adamw;
  double grad_clip = 1.0;
  std::uint64_t data_seed = 1337;
  // data.part = I/N: read part I of N of every global batch (what island I of N reads), on a world N times smaller.
  int data_part = 0;
  int data_parts = 1;
  std::int64_t eval_every = 100;
  std::int64_t eval_tokens = 0;  // 0: the whole val set (data::EvalLoader)
  bool activation_checkpointing = false;

  shard::EngineOptions engine;  // strategy, precision, prefetch, buckets, grad_accum
  int islands = 1;              // parallel.islands: > 1 trains DiLoCo-style (shard/outer.hpp)
  shard::OuterOptions outer;    // [outer]: the outer step across islands
  int threads = 0;  // 0 = cores of the node / ranks on it
  device::DeviceType device_type = device::DeviceType::cpu;  // hsdp/train/cuda_backend.hpp
  comm::Transport comm_intra = comm::Transport::nccl;  // cuda: what carries the collectives inside a node
  comm::Transport comm_inter = comm::Transport::mpi;   // cuda: what carries the collectives across nodes
  comm::Staging comm_stage = comm::Staging::automatic;  // how MPI reaches the engine's memory (comm/types.hpp)
  comm::CommOptions comm;           // the watchdog's timeout, for the communicators the backend creates
  comm::TopologyOptions topology;   // emulated nodes and placement (comm/topology.hpp)

  std::int64_t stop_at_step = 0;  // 0: run to `steps`
  bool eval_only = false;

  std::string checkpoint_dir;  // empty: no checkpoints
  std::int64_t checkpoint_every = 0;
  std::int64_t replicas_every = 100;  // check.replicas_every (train/replicas.hpp); 0: off
  int checkpoint_keep = 3;
  int checkpoint_keep_every = 0;
  std::string resume = "auto";
  bool checkpoint_overwrite = false;  // a fresh run may delete another run's checkpoints in checkpoint_dir
  bool checkpoint_accept_changes = false;  // a resume may change data.train or the global batch
  bool checkpoint_fallback = true;    // resume=auto: a damaged `latest` falls back to the newest checkpoint that loads
  double checkpoint_timeout_s = 600;  // a checkpoint read or write stalled this long ends the job (exit 4)
  bool checkpoint_continue_on_error = false;  // a save that fails (full disk, quota): skip it and train on

  std::string log_dir = "runs/hsdp";
  bool log_overwrite = false;  // a run that does not continue log_dir's record may replace it
  std::int64_t log_every = 10;
  bool log_trace = false;  // log.dir/trace_rank<R>.json: the engine's queues, collectives and waits (trace.hpp)
  std::string deck_text;  // the resolved deck, recorded in summary.json
};

}  // namespace hsdp::train
