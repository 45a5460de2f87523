// Every deck key hsdp-train understands, each spelled here only. Adding a key here makes it parse, validate, print
// in --help and --print-config, and its `.into` puts its value into TrainOptions (train_options(), deck.cpp).
#include <exception>
#include <string>

#include "hsdp/app/deck.hpp"
#include "hsdp/comm/types.hpp"
#include "hsdp/core/dtype.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/shard/strategy.hpp"
#include "hsdp/train/options.hpp"

namespace hsdp::app {

namespace {
using V = const DeckValue&;
using O = train::TrainOptions&;

OptionSpec integer(std::string key, std::string def, std::string help, double min, double max = 1e18) {
  return {std::move(key), std::move(def), std::move(help), OptionKind::integer, "", min, max, {}};
}
// The watchdogs' limits count nanoseconds in 64 bits (9.2e9 s at most): beyond 1e9 s (31 years) a limit would wrap
// around and fire at once.
constexpr double kMaxTimeoutS = 1e9;

OptionSpec real(std::string key, std::string def, std::string help, double min, double max = 1e300) {
  return {std::move(key), std::move(def), std::move(help), OptionKind::real, "", min, max, {}};
}
OptionSpec boolean(std::string key, std::string def, std::string help) {
  return {std::move(key), std::move(def), std::move(help), OptionKind::boolean, "", 0, 1, {}};
}
OptionSpec choice(std::string key, std::string def, std::string help, std::string choices) {
  return {std::move(key), std::move(def), std::move(help), OptionKind::choice, std::move(choices), 0, 0, {}};
}
OptionSpec text(std::string key, std::string def, std::string help) {
  return {std::move(key), std::move(def), std::move(help), OptionKind::text, "", 0, 0, {}};
}
OptionSpec path(std::string key, std::string def, std::string help) {
  return {std::move(key), std::move(def), std::move(help), OptionKind::path, "", 0, 0, {}};
}
}  // namespace

const std::vector<std::string>& section_order() {
  static const std::vector<std::string> order = {"model", "data",   "train",  "parallel", "precision",
                                                 "zeropp",   "outer",    "checkpoint", "check", "topology", "comm", "device", "log"};
  return order;
}

const std::vector<OptionSpec>& option_table() {
  static const std::vector<OptionSpec> table = {
      // [model] GPT-2 as nanoGPT defines it (the defaults are GPT-2 124M), or a Llama.
      choice("model.arch", "gpt2",
             "gpt2 = LayerNorm, learned positions, GELU MLP, biases, LM head tied to the embedding; llama = RMSNorm, "
             "rotary positions (RoPE), SwiGLU MLP, grouped-query attention, no biases, Hugging Face's "
             "LlamaForCausalLM names",
             "gpt2|llama")
          .into([](V v, O o) { o.model.arch = model::parse_arch(v.text()); }),
      integer("model.n_layer", "12", "transformer blocks", 1, model::kMaxLayers).into([](V v, O o) {
        o.model.n_layer = v.int32();
      }),
      integer("model.n_head", "12", "attention heads per block; must divide model.n_embd", 1, model::kMaxHeads)
          .into([](V v, O o) { o.model.n_head = v.int32(); }),
      integer("model.n_embd", "768", "embedding width C", 1, model::kMaxEmbd).into([](V v, O o) {
        o.model.n_embd = v.int32();
      }),
      integer("model.block_size", "1024", "maximum sequence length (GPT-2: rows of the position embedding)", 1,
              model::kMaxBlockSize)
          .into([](V v, O o) { o.model.block_size = v.int32(); }),
      integer("model.vocab_size", "50257", "vocabulary size V; every token id in the data must be < V", 1,
              model::kMaxVocab)
          .into([](V v, O o) { o.model.vocab_size = v.int32(); }),
      integer("model.padded_vocab_size", "0",
              "rows of the token embedding (>= V; padded rows never enter the loss); 0 = V rounded up to a "
              "multiple of 128, as llm.c does",
              0, model::kMaxVocab)
          .into([](V v, O o) { o.model.padded_vocab_size = v.int32(); }),
      integer("model.n_kv_head", "0",
              "llama: key/value heads (grouped-query attention: each serves n_head / n_kv_head query heads; must "
              "divide model.n_head); 0 = model.n_head (multi-head attention)",
              0, model::kMaxHeads)
          .into([](V v, O o) { o.model.n_kv_head = v.int32(); }),
      integer("model.ffn_dim", "0",
              "llama: the SwiGLU MLP's hidden width; 0 = 8 C / 3 rounded up to a multiple of 256 (Meta's rule: "
              "C = 4096 gives 11008)",
              0, 16 * model::kMaxEmbd)
          .into([](V v, O o) { o.model.ffn_dim = v.int32(); }),
      real("model.rope_theta", "10000", "llama: the base of the rotary position angles (Llama 3: 500000)", 1.0, 1e12)
          .into([](V v, O o) { o.model.rope_theta = v.real(); }),
      real("model.norm_eps", "1e-5", "llama: the RMSNorm epsilon", 0.0, 1.0).into([](V v, O o) {
        o.model.norm_eps = v.real();
      }),
      boolean("model.tie_embeddings", "false",
              "llama: the LM head reads the token embedding (no lm_head.weight); GPT-2's head is always tied")
          .into([](V v, O o) { o.model.tie_embeddings = v.boolean(); }),
      choice("model.attention", "unfused",
             "how a GPU computes attention: unfused = cuBLASLt products with the T x T probabilities stored (the "
             "validated path); fused = FlashAttention-2's algorithm, no T x T scores in memory (head sizes up to 128; "
             "written, not yet validated on a GPU: docs/gpu.md). The CPU has one attention and ignores it",
             "unfused|fused")
          .into([](V v, O o) { o.model.fused_attention = v.text() == "fused"; }),
      choice("model.gemm_epilogue", "separate",
             "what a GPU does after a matmul: separate = its own kernels for the GELU, its gradient and the residual "
             "adds (the validated path); fused = all three in cuBLASLt's GEMM epilogue, one pass over the output "
             "instead of two or three (written, not yet validated on a GPU: docs/gpu.md). The CPU ignores it",
             "separate|fused")
          .into([](V v, O o) { o.model.fused_epilogues = v.text() == "fused"; }),
      integer("model.seed", "1337", "seed of the parameter initialisation", 0).into([](V v, O o) {
        o.model_seed = static_cast<std::uint64_t>(v.integer());
      }),

      // [data] token files in llm.c's format (hsdp-data writes them).
      path("data.train", "data/train.bin",
           "training tokens (llm.c .bin: 256-int32 header, uint16 tokens (version 1) or uint32 (version 2)): one "
           "file, a glob of shards (fineweb_train_*.bin: sorted by name) or a comma-separated list of files and "
           "globs (in that order); windows never cross a file's end")
          .into([](V v, O o) { o.train_path = v.text(); }),
      path("data.val", "data/val.bin", "validation tokens, the same forms").into([](V v, O o) {
        o.val_path = v.text();
      }),
      path("data.tokenizer", "",
           "the tokenizer that made the token files: a SentencePiece .model (hsdp-data tokenizer train; "
           "model.vocab_size must hold its vocabulary), or empty for bytes. Checkpoints record which one (a hash of "
           "the file) and a resume with another is refused; hsdp-sample and the HF export use it")
          .into([](V v, O o) { o.tokenizer = v.text(); }),
      path("data.entropy_json", "",
           "optional source.json from `hsdp-data synth`: its entropy rate is logged next to the val loss")
          .into([](V v, O o) { o.entropy_json = v.text(); }),
      text("data.part", "0/1",
           "I/N: read only part I of N of every global batch, on a world N times smaller: the share island I of N "
           "reads in a run with parallel.islands=N (to reproduce one island as a job of its own); 0/1 = all of it")
          .into([](V v, O o) {
            const std::string& t = v.text();
            const auto slash = t.find('/');
            std::size_t used_i = 0, used_n = 0;
            int part = -1, parts = 0;
            try {
              if (slash != std::string::npos) {
                part = std::stoi(t.substr(0, slash), &used_i);
                parts = std::stoi(t.substr(slash + 1), &used_n);
              }
            } catch (const std::exception&) {
              parts = 0;
            }
            if (slash == std::string::npos || used_i != slash || used_n != t.size() - slash - 1 || parts < 1 ||
                part < 0 || part >= parts) {
              throw_config("data.part='" + t + "': expected I/N with 0 <= I < N, e.g. 1/2");
            }
            o.data_part = part;
            o.data_parts = parts;
          }),

      // [train]
      integer("train.steps", "1000", "optimizer steps to run", 1).into([](V v, O o) { o.steps = v.integer(); }),
      integer("train.micro_batch", "4", "sequences per micro-batch per data-parallel rank", 1, 1 << 20)
          .into([](V v, O o) { o.micro_batch = v.int32(); }),
      integer("train.seq_len", "64", "tokens per sequence (<= model.block_size)", 1, 1 << 20).into([](V v, O o) {
        o.seq_len = v.int32();
      }),
      integer("train.grad_accum", "1", "micro-batches accumulated per optimizer step", 1, 1 << 20).into([](V v, O o) {
        o.grad_accum = v.int32();
      }),
      real("train.lr", "6e-4", "peak learning rate", 0).into([](V v, O o) { o.schedule.lr = v.real(); }),
      real("train.min_lr", "6e-5", "learning rate at the end of the cosine decay", 0).into([](V v, O o) {
        o.schedule.min_lr = v.real();
      }),
      integer("train.warmup_steps", "100", "linear warm-up steps before the cosine decay", 0).into([](V v, O o) {
        o.schedule.warmup_steps = v.integer();
      }),
      real("train.weight_decay", "0.1", "AdamW decoupled weight decay (matrices and embeddings only)", 0)
          .into([](V v, O o) { o.adamw.weight_decay = static_cast<float>(v.real()); }),
      real("train.beta1", "0.9", "AdamW beta1", 0, 1).into([](V v, O o) {
        o.adamw.beta1 = static_cast<float>(v.real());
      }),
      real("train.beta2", "0.95", "AdamW beta2", 0, 1).into([](V v, O o) {
        o.adamw.beta2 = static_cast<float>(v.real());
      }),
      real("train.eps", "1e-8", "AdamW epsilon", 0).into([](V v, O o) { o.adamw.eps = static_cast<float>(v.real()); }),
      real("train.grad_clip", "1.0", "clip the global gradient norm to this; 0 = no clipping", 0).into([](V v, O o) {
        o.grad_clip = v.real();
      }),
      integer("train.seed", "1337", "seed of the data order (all other randomness comes from model.seed)", 0)
          .into([](V v, O o) { o.data_seed = static_cast<std::uint64_t>(v.integer()); }),
      integer("train.eval_every", "100", "evaluate on data.val every N steps (and at the end); 0 = never", 0)
          .into([](V v, O o) { o.eval_every = v.integer(); }),
      integer("train.eval_tokens", "0",
              "tokens per evaluation: the first eval_tokens / seq_len windows of data.val, the same on any number of "
              "ranks (so the val loss does not depend on the world size); 0 = the whole val set",
              0)
          .into([](V v, O o) { o.eval_tokens = v.integer(); }),
      boolean("train.activation_checkpointing", "false",
              "keep only each block's input and recompute the block in backward (less memory, ~1/3 more compute)")
          .into([](V v, O o) { o.activation_checkpointing = v.boolean(); }),

      boolean("train.eval_only", "false",
              "evaluate the model (resumed from checkpoint.resume, or freshly initialised) on train.eval_tokens of "
              "data.val, print the val loss, write eval_step_<N>.json in log.dir (never a training run's "
              "summary.json), and exit without training")
          .into([](V v, O o) { o.eval_only = v.boolean(); }),
      integer("train.stop_at_step", "0",
              "stop after this step (with a checkpoint if checkpoint.dir is set) although the schedule runs to "
              "train.steps; a later run resumes; 0 = run to train.steps",
              0)
          .into([](V v, O o) { o.stop_at_step = v.integer(); }),

      // [checkpoint]
      path("checkpoint.dir", "",
           "directory of the HDF5 checkpoints step_<N>.h5 and the `latest` pointer; empty = no checkpoints")
          .into([](V v, O o) { o.checkpoint_dir = v.text(); }),
      integer("checkpoint.every", "0",
              "write a checkpoint every N steps (and always after the last step); 0 = only "
              "after the last step and on SIGUSR1/SIGTERM",
              0)
          .into([](V v, O o) { o.checkpoint_every = v.integer(); }),
      integer("checkpoint.keep", "3", "keep the newest N checkpoints (<= 0: keep all)", -1, 1 << 30).into([](V v, O o) {
        o.checkpoint_keep = v.int32();
      }),
      integer("checkpoint.keep_every", "0", "also keep every checkpoint whose step is a multiple of N, forever", 0,
              1 << 30)
          .into([](V v, O o) { o.checkpoint_keep_every = v.int32(); }),
      boolean("checkpoint.overwrite", "false",
              "a run that does not resume from checkpoint.dir while it holds checkpoints (another run's) is an "
              "error, so runs never mix; true deletes them first")
          .into([](V v, O o) { o.checkpoint_overwrite = v.boolean(); }),
      boolean("checkpoint.accept_changes", "false",
              "a resume whose deck differs from the checkpoint's says each difference in one line; a difference in "
              "what is trained (the data and its order: data.train, train.seq_len, train.seed, data.part, the "
              "files' window count; the global batch in tokens per step) is an error unless this is true; a "
              "checkpoint of another model shape never loads")
          .into([](V v, O o) { o.checkpoint_accept_changes = v.boolean(); }),
      boolean("checkpoint.fallback", "true",
              "checkpoint.resume=auto with a damaged `latest` (missing file, failed checksum): resume from the newest "
              "checkpoint of checkpoint.dir that loads, saying which were skipped and why; false: exit 2 instead")
          .into([](V v, O o) { o.checkpoint_fallback = v.boolean(); }),
      real("checkpoint.timeout_s", "600",
           "watchdog of checkpoint I/O: a resume read, a checkpoint write or its commit that makes no progress for "
           "this many seconds (a rank stopped or frozen, a file system that does not answer) ends the job with exit 4, "
           "naming the phase and the operation; the previous checkpoint and `latest` stay as they were",
           0.001, kMaxTimeoutS)
          .into([](V v, O o) { o.checkpoint_timeout_s = v.real(); }),
      choice("checkpoint.on_error", "stop",
             "a checkpoint that cannot be written (a full disk, a quota, a permission): stop = exit 2 with one line "
             "naming checkpoint.dir, the bytes needed and the error; continue = say so once, skip that checkpoint and "
             "train on (the previous checkpoint and `latest` stay as they were either way)",
             "stop|continue")
          .into([](V v, O o) { o.checkpoint_continue_on_error = v.text() == "continue"; }),
      text("checkpoint.resume", "auto",
           "auto = resume from checkpoint.dir/latest if it exists; none = start fresh; or the path of a checkpoint "
           "(any world size and strategy)")
          .into([](V v, O o) { o.resume = v.text(); }),

      // [check] train/replicas.hpp
      integer("check.replicas_every", "100",
              "every N steps, before step 1 and before every checkpoint, ranks that hold the same state (no_shard's "
              "world, hybrid_shard's replicas across nodes, the islands' outer state) compare checksums of every "
              "unit's master weights and AdamW state; a difference ends the run with exit 7 naming the unit, ranks "
              "and hosts, before a checkpoint of it is written. 0 = off",
              0)
          .into([](V v, O o) { o.replicas_every = v.integer(); }),

      // [parallel]
      choice("parallel.sharding", "no_shard",
             "how model state is split over ranks: no_shard (DDP), zero1, shard_grad_op (ZeRO-2), full_shard "
             "(ZeRO-3), hybrid_shard (full_shard inside a node, replicas across nodes), hybrid_shard_zero2",
             shard::sharding_choices())
          .into([](V v, O o) { o.engine.strategy = shard::parse_sharding(v.text()); }),
      boolean("parallel.prefetch", "true",
              "issue the next unit's all-gather before the current unit computes (forward and backward)")
          .into([](V v, O o) { o.engine.prefetch = v.boolean(); }),
      real("parallel.bucket_mb", "25", "no_shard: gradient all-reduce bucket size in MiB (fp32 gradients)", 0.001)
          .into([](V v, O o) { o.engine.bucket_mb = v.real(); }),
      integer("parallel.islands", "1",
              "N > 1 splits the job into N islands of whole nodes (N must divide the nodes) that train apart, each "
              "with parallel.sharding over its own ranks and its share of every global batch, and meet every "
              "outer.inner_steps steps in DiLoCo's outer step (the [outer] keys): for links too slow for any "
              "per-step strategy; 1 = one synchronous job",
              1, 1 << 20)
          .into([](V v, O o) { o.islands = v.int32(); }),

      // [precision]
      choice("precision.param", "fp32",
             "dtype parameters are all-gathered in and rounded to for compute (compute itself is fp32 on the CPU); "
             "master weights and AdamW state stay fp32; fp16 adds a dynamic loss scaler that skips overflowed steps",
             "fp32|bf16|fp16")
          .into([](V v, O o) { o.engine.param_dtype = parse_dtype(v.text(), v.key); }),
      choice("precision.reduce", "fp32", "dtype gradients are reduced (reduce-scatter, all-reduce) in",
             "fp32|bf16|fp16")
          .into([](V v, O o) { o.engine.reduce_dtype = parse_dtype(v.text(), v.key); }),

      // [zeropp] ZeRO++ (with full_shard or hybrid_shard)
      boolean("zeropp.quantized_weights", "false",
              "qwZ: the forward all-gather of weights moves int8 blocks plus one fp32 scale per zeropp.block "
              "elements (half the bytes of bf16); master weights stay exact")
          .into([](V v, O o) { o.engine.zeropp.quantized_weights = v.boolean(); }),
      integer("zeropp.hpz_partition_size", "0",
              "hpZ: k > 0 keeps, after each forward gather, a secondary 1/k slice of the weights in groups of k ranks "
              "of a node, and gathers backward weights from that group only (no inter-node bytes); full_shard only "
              "(hybrid_shard's shard group is the node already); k must divide the ranks per node; 0 = off",
              0, 1 << 20)
          .into([](V v, O o) { o.engine.zeropp.hpz_partition_size = v.int32(); }),
      boolean("zeropp.quantized_gradients", "false",
              "qgZ: full_shard's gradient reduce-scatter becomes a two-hop quantized all-to-all (inside the node, "
              "then across nodes; on one node the exact reduce-scatter is kept, said once in the log); "
              "hybrid_shard's reduce-scatter inside the node becomes a one-hop quantized all-to-all, and the "
              "all-reduce across nodes stays in precision.reduce")
          .into([](V v, O o) { o.engine.zeropp.quantized_gradients = v.boolean(); }),
      choice("zeropp.grad_bits", "4", "qgZ: bits per quantized gradient value", "4|8").into([](V v, O o) {
        o.engine.zeropp.grad_bits = v.text() == "8" ? quant::Bits::int8 : quant::Bits::int4;
      }),
      integer("zeropp.block", "2048", "elements per quantization block (one fp32 scale each); even", 2, 1 << 24)
          .into([](V v, O o) { o.engine.zeropp.block = static_cast<std::size_t>(v.integer()); }),

      // [outer] DiLoCo across islands (parallel.islands > 1): hsdp/shard/outer.hpp
      integer("outer.inner_steps", "32",
              "H: inner steps each island trains apart between outer steps (with fragments: between two exchanges "
              "of the same fragment); 32 came closest to synchronous training in docs/islands.md's study",
              1, 1 << 30)
          .into([](V v, O o) { o.outer.inner_steps = v.integer(); }),
      real("outer.lr", "0.7", "the outer step's learning rate on the averaged pseudo-gradient (outer - inner)", 0)
          .into([](V v, O o) { o.outer.lr = static_cast<float>(v.real()); }),
      real("outer.momentum", "0.9", "the outer step's Nesterov momentum, in [0, 1)", 0, 1).into([](V v, O o) {
        o.outer.momentum = static_cast<float>(v.real());
      }),
      choice("outer.bits", "4",
             "the pseudo-gradient's wire format across islands: 32 = fp32 all-reduce; 16 = bf16, 8 or 4 = block-wise "
             "int8 or int4 with one fp32 scale per outer.block elements (all-gathered, summed in island order); int4 "
             "lost nothing measurable against bf16 in docs/islands.md's study",
             "32|16|8|4")
          .into([](V v, O o) { o.outer.bits = std::stoi(v.text()); }),
      boolean("outer.error_feedback", "true",
              "outer.bits < 32: each island adds what rounding took from its last message to its next one (no "
              "measurable difference with int4 at H = 32 in docs/islands.md's study)")
          .into([](V v, O o) { o.outer.error_feedback = v.boolean(); }),
      integer("outer.block", "256", "outer.bits 8 or 4: elements per fp32 scale; even", 2, 1 << 24).into([](V v, O o) {
        o.outer.block = static_cast<std::size_t>(v.integer());
      }),
      integer("outer.fragments", "1",
              "F > 1 (Streaming DiLoCo): the units split into F fragments of consecutive units and near-equal size, "
              "fragment f exchanged at the steps s with s mod H = f*H/F (F divides H): 1/F of the bytes each time",
              1, 1 << 20)
          .into([](V v, O o) { o.outer.fragments = v.int32(); }),
      integer("outer.overlap", "0",
              "tau > 0 (Streaming DiLoCo's overlap): a fragment's exchange runs during the next tau inner steps and is "
              "applied after them, keeping what the island learnt meanwhile; 0 = the step waits for it; at most "
              "outer.inner_steps / outer.fragments",
              0, 1 << 30)
          .into([](V v, O o) { o.outer.overlap = v.int32(); }),

      // [topology]
      integer("topology.ranks_per_node", "0",
              "0 = nodes are the ranks that share memory (MPI_COMM_TYPE_SHARED); N > 0 = emulate nodes of N ranks "
              "(tests, one machine)",
              0, 1 << 20)
          .into([](V v, O o) { o.topology.ranks_per_node = v.int32(); }),
      choice("topology.placement", "block",
             "with emulated nodes: block = consecutive ranks share a node (mpirun --map-by core); cyclic = rank r "
             "on node r % nodes (mpirun --map-by node)",
             "block|cyclic")
          .into([](V v, O o) { o.topology.placement = comm::parse_placement(v.text()); }),

      // [comm]
      real("comm.timeout_s", "300",
           "watchdog: a collective unfinished after this many seconds aborts the job, naming the collective, its "
           "group and its sequence number",
           0.001, kMaxTimeoutS)
          .into([](V v, O o) { o.comm.timeout_s = v.real(); }),
      real("comm.startup_timeout_s", "600",
           "start-up watchdog, apart from comm.timeout_s (start-up does work collectives do not: opening the data, "
           "building the model): a rank that has not arrived or a start-up step unfinished after this many seconds "
           "ends the job (exit 4), naming the step; rank 0 says every timeout / 4 s (at most 30 s) that it waits",
           0.001, kMaxTimeoutS)
          .into([](V v, O o) { o.comm.startup_timeout_s = v.real(); }),

      choice("comm.intra", "nccl",
             "device.type=cuda: the collectives inside a node run over nccl (one GPU per rank) or mpi (CUDA-aware "
             "MPI when the library is, else staged through pinned host memory; several ranks may share a GPU, as "
             "when a one-GPU machine emulates nodes); device.type=cpu always uses MPI",
             "mpi|nccl")
          .into([](V v, O o) { o.comm_intra = comm::parse_transport(v.text(), v.key); }),
      choice("comm.inter", "mpi",
             "device.type=cuda, more than one node: the collectives across nodes run over mpi (CUDA-aware MPI when "
             "the library is, else staged through pinned host memory) or nccl (NCCL's network transports); "
             "device.type=cpu always uses MPI",
             "mpi|nccl")
          .into([](V v, O o) { o.comm_inter = comm::parse_transport(v.text(), v.key); }),
      choice("comm.stage", "auto",
             "how MPI reaches the memory the engine trains in: direct = MPI reads and writes it (on a GPU only "
             "where the MPI library is CUDA-aware); host = every collective is staged through host buffers (a copy "
             "to the host, MPI on the copy, a copy back after it completes; on the CPU the copies are memcpy: the "
             "GPU's staged path, run where it can be checked bit for bit against direct); auto = direct on the CPU "
             "and with CUDA-aware MPI, else host",
             "auto|direct|host")
          .into([](V v, O o) { o.comm_stage = comm::parse_staging(v.text(), v.key); }),

      // [device]
      choice("device.type", "cpu",
             "cpu = the sharding engine on the CPU, fp32 compute; cuda = the same engine on one GPU per rank (each "
             "rank of a host takes one of the GPUs it sees that the fewest others took), every strategy and ZeRO++, "
             "fp32 master weights, compute in bf16 with "
             "precision.param=bf16 (else fp32); groups over comm.intra and comm.inter (validated on an H100 at "
             "commit f541df3: see docs/gpu.md)",
             "cpu|cuda")
          .into([](V v, O o) { o.device_type = device::parse_device_type(v.text()); }),
      integer("device.threads", "0", "CPU threads per rank for compute; 0 = cores of the node / ranks on it", 0, 4096)
          .into([](V v, O o) { o.threads = v.int32(); }),
      choice("device.streams", "inline",
             "how the engine's stream queues run on the CPU device: inline = the host runs each queue's work in order "
             "(the fast path); check = the stream checker follows every access of every kernel and collective and "
             "ends the run naming the buffer, the two operations and their queues if one is not ordered after what it "
             "depends on; threads = check, with every queue on its own worker thread after random delays (the "
             "ordering a GPU's streams need, proven on the CPU; slower: for checking, not for training)",
             "inline|check|threads")
          .into([](V v, O o) {
            o.engine.streams.check = v.text() != "inline";
            o.engine.streams.threads = v.text() == "threads";
          }),
      integer("device.streams_seed", "1", "device.streams=threads: the seed of the random delays (a seed replays them)",
              0)
          .into([](V v, O o) { o.engine.streams.seed = static_cast<std::uint64_t>(v.integer()); }),

      // [log]
      path("log.dir", "runs/hsdp",
           "directory for metrics.jsonl and summary.json (created if missing); a run that does not resume refuses one "
           "that holds another run's record")
          .into([](V v, O o) { o.log_dir = v.text(); }),
      boolean("log.overwrite", "false",
              "a run that does not continue log.dir's record replaces it instead of refusing (so does a run with "
              "checkpoint.overwrite=true, which starts over)")
          .into([](V v, O o) { o.log_overwrite = v.boolean(); }),
      integer("log.every", "10", "print the progress line every N steps (and the first and last step)", 1)
          .into([](V v, O o) { o.log_every = v.integer(); }),
      boolean("log.trace", "false",
              "write log.dir/trace_rank<R>.json on every rank: the timeline of the engine's queues (compute, gather, "
              "reduce, cross, regather: each operation while it ran, each collective from issue to observed "
              "completion) and the host's waits, in Chrome's trace event format (open in ui.perfetto.dev); a few "
              "hundred events per step, for short runs (on a GPU each operation's span is its kernels' time, from CUDA "
              "events around it); tools/bench/trace_gaps.py lists where a queue stood idle in each step")
          .into([](V v, O o) { o.log_trace = v.boolean(); }),
  };
  return table;
}

}  // namespace hsdp::app
