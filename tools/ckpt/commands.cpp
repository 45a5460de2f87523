#include "commands.hpp"

#include <mpi.h>

#include <array>
#include <boost/program_options.hpp>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>

#include "../common/subcommands.hpp"
#include "hsdp/ckpt/checkpoint.hpp"
#include "hsdp/ckpt/export.hpp"
#include "hsdp/ckpt/hf.hpp"
#include "hsdp/ckpt/inspect.hpp"
#include "hsdp/core/error.hpp"
#include "hsdp/core/files.hpp"
#include "hsdp/data/tokenizer.hpp"

namespace po = boost::program_options;

namespace hsdp::ckpt_tool {
namespace {

constexpr unsigned kHelpWidth = 100;

po::positional_options_description one_positional(const char* name) {
  po::positional_options_description p;
  p.add(name, 1);
  return p;
}

// An output that is a regular file is replaced (a re-export after more training), but never one holding an HDF5 file
// (core's require_not_checkpoint), nor a checkpoint directory's `latest` (it names the checkpoint a run resumes from);
// nor is the temporary file it is written to first.
void require_output(const std::string& output) {
  require_regular_output(output, "--output");
  require_not_checkpoint(output, "--output", "hsdp-ckpt");
  // Written first to "<output>.tmp", which must not be a checkpoint either (the input of `export x.tmp --output x`).
  require_not_checkpoint(output + ".tmp", "--output's temporary file", "hsdp-ckpt");
  std::error_code ec;
  if (std::filesystem::path(output).filename() == "latest" && std::filesystem::exists(output, ec)) {
    throw Error(ErrorKind::config, "--output: '" + output +
                                       "' is a checkpoint directory's `latest` (the checkpoint a run resumes from), "
                                       "which hsdp-ckpt never writes over: give another path");
  }
}

std::string human_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int u = 0;
  while (value >= 1024.0 && u < 4) value /= 1024.0, ++u;
  std::ostringstream s;
  s << std::fixed << std::setprecision(u == 0 ? 0 : 1) << value << ' ' << units[u];
  return s.str();
}

std::string hex(std::uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%016" PRIx64, value);
  return text;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string describe_model(const model::GptConfig& c) {
  const model::ModelLayout layout(c);
  const std::string llama = c.llama() ? "llama (n_kv_head " + std::to_string(c.kv_heads()) + ", ffn_dim " +
                                            std::to_string(c.ffn()) + (c.tie_embeddings ? ", tied head), " : "), ")
                                      : "";
  return llama + "n_layer " + std::to_string(c.n_layer) + ", n_head " + std::to_string(c.n_head) + ", n_embd " +
         std::to_string(c.n_embd) + ", block_size " + std::to_string(c.block_size) + ", vocab_size " +
         std::to_string(c.vocab_size) + " (padded " + std::to_string(c.padded_vocab_size) +
         "): " + std::to_string(layout.logical_numel()) + " parameters";
}

// A checkpoint with everything but the model: world size 1 (for consolidate and import).
void write_one_rank(const std::string& output, ckpt::FullCheckpoint& full) {
  const model::ModelLayout layout(full.config);
  const std::vector<ckpt::UnitShard> shards = full.whole_units();
  ckpt::write_checkpoint_file(MPI_COMM_SELF, output, layout, shards, true, full.state);
}

}  // namespace

int run_inspect(const std::vector<std::string>& args) {
  po::options_description options("options", kHelpWidth);
  // clang-format off
  options.add_options()
      ("file", po::value<std::string>()->required(), "checkpoint file (.h5); may be given without --file")
      ("summary", po::bool_switch(), "print the header only, not every dataset");
  // clang-format on
  const auto vm = tool::parse_options(args, options, one_positional("file"),
                        "usage: hsdp-ckpt inspect FILE [--summary]\n\n"
                        "Prints what a checkpoint holds: step, tokens, data and loss-scaler state, the world size,\n"
                        "nodes, mesh and strategy it was saved with, the model shape, and every dataset with its\n"
                        "shape, size and checksum. Reads metadata only (fast on any size).\n");
  if (!vm) return kExitOk;
  const ckpt::CheckpointInfo info = ckpt::inspect_checkpoint(ckpt::checkpoint_file((*vm)["file"].as<std::string>()));
  const ckpt::TrainState& s = info.state;
  std::cout << "checkpoint " << info.path << " (" << human_bytes(info.file_bytes) << ", format " << info.format_version
            << ", written by hsdp " << info.hsdp_version << ")\n"
            << "  step " << s.step << ", tokens " << s.tokens
            << (s.tokens_per_step > 0 ? " (" + std::to_string(s.tokens_per_step) + " a step)" : std::string())
            << ", sampler epoch " << s.sampler.epoch << " position " << s.sampler.position
            << (s.data_windows > 0 ? " of " + std::to_string(s.data_windows) + " windows" : std::string())
            << ", loss scale " << s.scaler.scale << " (good steps " << s.scaler.good_steps << ", skipped "
            << s.scaler.skipped_steps << ")\n"
            << "  saved by " << s.world_size << " rank(s) on " << s.nodes << " node(s), mesh " << s.mesh
            << ", strategy " << s.strategy << "\n"
            << "  model " << describe_model(info.config) << ", tokenizer " << s.tokenizer << "\n";
  if (s.islands > 1) {
    std::cout << "  " << s.islands << " islands: island 0's state is /model and /optim, island i's under /islands/<i>;"
              << " each island's outer state (parameters, momentum, error feedback) under <its group>/outer\n";
  }
  if ((*vm)["summary"].as<bool>()) {
    std::cout << "  " << info.datasets.size() << " datasets\n";
    return kExitOk;
  }
  std::string group;
  for (const ckpt::DatasetInfo& d : info.datasets) {
    const std::string parent = d.path.substr(0, d.path.rfind('/'));
    if (parent != group) {
      group = parent;
      std::cout << group << "/\n";
    }
    std::cout << "  " << std::left << std::setw(40) << d.path.substr(parent.size() + 1) << std::setw(14)
              << shape_text(d.shape) << std::right << std::setw(11) << human_bytes(d.bytes) << "  checksum "
              << (d.checksum ? hex(*d.checksum) : "(none)") << "  at byte " << d.file_offset << "\n";
  }
  return kExitOk;
}

int run_verify(const std::vector<std::string>& args) {
  po::options_description options("options", kHelpWidth);
  options.add_options()("file", po::value<std::string>()->required(), "checkpoint file; may be given bare");
  const auto vm = tool::parse_options(args, options, one_positional("file"),
                        "usage: hsdp-ckpt verify FILE\n\n"
                        "Checks a checkpoint completely: the metadata is readable, every parameter and Adam\n"
                        "moment of the model described in /meta is present with its shape, and every dataset's\n"
                        "checksum matches its data. Exit 0 when intact, 2 with one line naming the file and the\n"
                        "dataset otherwise.\n");
  if (!vm) return kExitOk;
  const std::string path = ckpt::checkpoint_file((*vm)["file"].as<std::string>());
  const ckpt::FullCheckpoint full = ckpt::read_full_checkpoint(path);
  const ckpt::CheckpointInfo info = ckpt::inspect_checkpoint(path);
  const model::ModelLayout layout(full.config);
  const int islands = full.state.islands;
  std::size_t expected = 0;
  for (const ckpt::StateSet& set : ckpt::all_state_sets(full.state)) expected += set.count() * layout.params().size();
  if (info.datasets.size() != expected) {
    throw Error(ErrorKind::checkpoint, "checkpoint '" + path + "' holds " + std::to_string(info.datasets.size()) +
                                           " datasets; its model has " + std::to_string(expected));
  }
  if (islands > 1) ckpt::verify_island_sets(path, full.state);
  std::cout << "OK " << path << ": step " << full.state.step << ", " << expected << " datasets ("
            << layout.logical_numel() << " parameters, Adam m and v"
            << (islands > 1 ? " of each of " + std::to_string(islands) + " islands, and their outer state" +
                                  (full.state.outer_in_flight >= 0 ? " with the exchange in flight" : "")
                            : "")
            << ") complete, all checksums match\n";
  return kExitOk;
}

int run_consolidate(const std::vector<std::string>& args) {
  po::options_description options("options", kHelpWidth);
  // clang-format off
  options.add_options()
      ("file", po::value<std::string>()->required(), "checkpoint to read; may be given bare")
      ("output", po::value<std::string>()->required(), "checkpoint to write (as OUTPUT.tmp, then renamed)");
  // clang-format on
  const auto vm = tool::parse_options(
      args, options, one_positional("file"),
      "usage: hsdp-ckpt consolidate FILE --output OUT.h5\n\n"
      "Rewrites a checkpoint as if one rank had saved it (same format, world_size 1, nodes 1,\n"
      "mesh 1x1), verifying every checksum on the way. Any checkpoint already loads at any\n"
      "world size; this makes one that says so and is independent of the original run.\n"
      "A checkpoint of several islands (parallel.islands) is refused: it holds more than one model.\n");
  if (!vm) return kExitOk;
  const std::string output = (*vm)["output"].as<std::string>();
  require_output(output);
  const std::string input = ckpt::checkpoint_file((*vm)["file"].as<std::string>());
  // Every island's model and the outer state are sets of their own, which the one-rank rewrite does not carry: a
  // file that said islands = N and held one island would load nowhere.
  if (const int islands = ckpt::inspect_checkpoint(input).state.islands; islands > 1) {
    throw Error(ErrorKind::config, "consolidate: '" + input + "' holds the state of " + std::to_string(islands) +
                                       " islands (parallel.islands) and the outer step's; consolidate rewrites one "
                                       "model's. Resume it as it is (any world size loads it), or export island 0's "
                                       "model (hsdp-ckpt export)");
  }
  ckpt::FullCheckpoint full = ckpt::read_full_checkpoint(input);
  full.state.world_size = 1;
  full.state.nodes = 1;
  full.state.mesh = "1x1";
  write_one_rank(output, full);
  std::cout << "wrote " << output << ": step " << full.state.step << ", world_size 1\n";
  return kExitOk;
}

int run_export(const std::vector<std::string>& args) {
  po::options_description options("options", kHelpWidth);
  // clang-format off
  options.add_options()
      ("file", po::value<std::string>()->required(), "checkpoint to read; may be given bare")
      ("format", po::value<std::string>()->required(), "safetensors, llmc or hf")
      ("output", po::value<std::string>()->required(),
       "file to write (as OUTPUT.tmp, then renamed); hf: the directory to write (made if missing)")
      ("no-lm-head", po::bool_switch(), "safetensors: do not add lm_head.weight (a copy of the tied wte)")
      ("tokenizer", po::value<std::string>()->default_value(""),
       "hf: the SentencePiece .model the run trained with (default: its data.tokenizer, from the checkpoint's "
       "deck), written beside the weights as tokenizer.model and tokenizer_config.json; a run on bytes has none");
  // clang-format on
  const auto vm = tool::parse_options(args, options, one_positional("file"),
                        "usage: hsdp-ckpt export FILE --format safetensors|llmc|hf --output OUT\n\n"
                        "Writes the model weights (fp32; no optimizer state) for other programs:\n"
                        "  safetensors  nanoGPT state_dict names and shapes (transformer.wte.weight is\n"
                        "               [vocab_size, C]), plus lm_head.weight as a copy of wte, so that nanoGPT's\n"
                        "               model.load_state_dict(safetensors.torch.load_file(OUT)) loads strictly on\n"
                        "               PyTorch >= 2.0 (flash attention: no attn.bias buffers). With older PyTorch\n"
                        "               or --no-lm-head pass strict=False (attn.bias / lm_head.weight are then\n"
                        "               rebuilt or tied by nanoGPT). Build nanoGPT with the checkpoint's vocab_size.\n"
                        "               A Llama's names are LlamaForCausalLM's (lm_head.weight its own unless\n"
                        "               tied).\n"
                        "  llmc         llm.c's GPT-2 model file (train_gpt2.c, version 3, fp32): 256-int32 header\n"
                        "               {20240326, 3, maxT, V, L, NH, C, Vp}, then the tensors in llm.c's order with\n"
                        "               wte padded to Vp rows of zeros. GPT-2 only.\n"
                        "  hf           a Hugging Face transformers directory. A Llama: OUT/config.json (LlamaConfig)\n"
                        "               and OUT/model.safetensors (LlamaForCausalLM names, [out, in], q/k in\n"
                        "               transformers' rotate_half layout: no permutation), for\n"
                        "               LlamaForCausalLM.from_pretrained(OUT). A GPT-2: OUT/config.json (GPT2Config:\n"
                        "               vocab_size not padded, n_positions = n_ctx = block_size, gelu_new,\n"
                        "               layer_norm_epsilon 1e-05, tie_word_embeddings) and OUT/model.safetensors\n"
                        "               (GPT2LMHeadModel names; Conv1D weights [in, out], the transpose of nanoGPT's;\n"
                        "               no lm_head.weight: tied to wte), so GPT2LMHeadModel.from_pretrained(OUT)\n"
                        "               loads it. The same weights always give the same bytes. A run trained\n"
                        "               with a SentencePiece tokenizer (data.tokenizer) also gets tokenizer.model\n"
                        "               and tokenizer_config.json (LlamaTokenizer), for AutoTokenizer.\n");
  if (!vm) return kExitOk;
  const std::string format = (*vm)["format"].as<std::string>();
  if (format != "safetensors" && format != "llmc" && format != "hf") {
    throw Error(ErrorKind::config, "--format must be safetensors, llmc or hf, got '" + format + "'");
  }
  if (format != "safetensors" && (*vm)["no-lm-head"].as<bool>()) {
    throw Error(ErrorKind::config, "--no-lm-head is for --format safetensors (" + format + " writes no lm_head copy)");
  }
  if (format != "hf" && !(*vm)["tokenizer"].as<std::string>().empty()) {
    throw Error(ErrorKind::config, "--tokenizer is for --format hf (" + format + " holds the weights only)");
  }
  const std::string path = ckpt::checkpoint_file((*vm)["file"].as<std::string>());
  const std::string output = (*vm)["output"].as<std::string>();
  if (format != "hf") {
    require_output(output);
  } else {  // a directory of two files, and the tokenizer's two: each checked before the checkpoint is read
    std::error_code ec;
    if (std::filesystem::exists(output + "/latest", ec)) {
      throw Error(ErrorKind::config, "--output: '" + output +
                                         "' is a checkpoint directory (it holds `latest`): an hf export there would "
                                         "sit among the run's checkpoints; give a folder of its own");
    }
    for (const char* name :
         {ckpt::kHfConfigFile, ckpt::kHfWeightsFile, ckpt::kHfTokenizerFile, ckpt::kHfTokenizerConfigFile}) {
      require_output(output + "/" + name);
    }
  }
  const ckpt::FullCheckpoint full = ckpt::read_full_checkpoint(path);
  const model::ModelLayout layout(full.config);
  if (format == "safetensors") {
    ckpt::SafetensorsOptions st;
    st.tied_lm_head = full.config.tied_head() && !(*vm)["no-lm-head"].as<bool>();
    st.metadata = {{"format", "pt"},
                   {"source", path},
                   {"step", std::to_string(full.state.step)},
                   {"tokens", std::to_string(full.state.tokens)},
                   {"hsdp_version", HSDP_VERSION}};
    ckpt::write_safetensors(output, layout, full.params, st);
  } else if (format == "llmc") {
    if (full.config.llama()) {
      throw Error(ErrorKind::config, "--format llmc: llm.c's model file holds GPT-2 only, and '" + path +
                                         "' is a Llama (model.arch=llama); use --format hf or safetensors");
    }
    ckpt::write_llmc(output, layout, full.params);
  } else {
    const data::Tokenizer tokenizer =
        data::Tokenizer::of_run((*vm)["tokenizer"].as<std::string>(), full.state.tokenizer, full.state.deck_text);
    // A model of a bytes run written beside an earlier export's tokenizer would be read with that tokenizer.
    for (const char* name : {ckpt::kHfTokenizerFile, ckpt::kHfTokenizerConfigFile}) {
      std::error_code ec;
      if (tokenizer.is_bytes() && std::filesystem::exists(output + "/" + name, ec)) {
        throw Error(ErrorKind::config, "--output: '" + output + "' holds " + name +
                                           " of an earlier export, and this checkpoint's run read bytes (no "
                                           "tokenizer): the folder would pair this model with another tokenizer; "
                                           "give a new folder, or remove " +
                                           name + " first");
      }
    }
    ckpt::write_hf(output, layout, full.params);
    if (!tokenizer.is_bytes()) {
      ckpt::write_hf_tokenizer(output, tokenizer.model_bytes(), full.config.block_size);
      std::cout << "wrote " << output << "/" << ckpt::kHfTokenizerFile << " and " << ckpt::kHfTokenizerConfigFile
                << " (" << tokenizer.identity() << ")\n";
    }
  }
  std::cout << "wrote " << output << " (" << format << "): " << layout.logical_numel() << " parameters of step "
            << full.state.step << "\n";
  return kExitOk;
}

int run_import(const std::vector<std::string>& args) {
  po::options_description options("options", kHelpWidth);
  // clang-format off
  options.add_options()
      ("input", po::value<std::string>()->required(), "model file (llmc) or directory (hf) to read; may be given bare")
      ("format", po::value<std::string>()->required(),
       "llmc (llm.c's fp32 GPT-2 model file, version 3) or hf (a Hugging Face GPT-2 or Llama directory)")
      ("output", po::value<std::string>()->required(), "checkpoint to write, e.g. run/step_0.h5")
      ("padded-vocab-size", po::value<int>()->default_value(0),
       "hf: rows of wte hsdp stores (>= vocab_size; the extra rows are zero); 0: the value hsdp-ckpt export wrote\n"
       "into model.safetensors, else vocab_size rounded up to a multiple of 128 (hsdp-train's default)");
  // clang-format on
  const auto vm = tool::parse_options(
      args, options, one_positional("input"),
      "usage: hsdp-ckpt import --format llmc gpt2.bin --output step_0.h5\n"
      "       hsdp-ckpt import --format hf DIR --output step_0.h5\n\n"
      "Makes a step-0 checkpoint from another program's model: the weights, zero Adam state, and a\n"
      "deck ([model] section) with the model's shape, so hsdp-train can resume from it with a\n"
      "deck of the same model shape. `latest` is not written: name the file when resuming, or\n"
      "import into a run directory and write its name into <dir>/latest yourself.\n"
      "  llmc  llm.c's model file; its padded vocabulary rows are not kept (a warning says if they\n"
      "        were not zero).\n"
      "  hf    DIR/config.json and DIR/model.safetensors of a Llama (model_type llama: SiLU, no biases,\n"
      "        no rope_scaling; the deck gets its model.arch=llama keys) or of a GPT-2 (hsdp-ckpt\n"
      "        export --format hf, or\n"
      "        transformers' save_pretrained: names with or without 'transformer.', F32). The model\n"
      "        must be one hsdp runs: gelu_new, layer_norm_epsilon 1e-05, n_inner 4 * n_embd, a\n"
      "        tied head (lm_head.weight, if present, must equal wte); exit 2 naming the key if not.\n"
      "        Conv1D weights are transposed back and wte is padded with zero rows: an hsdp\n"
      "        checkpoint exported to hf and imported holds the same weights bit for bit.\n"
      "        A SentencePiece DIR/tokenizer.model is recorded as the checkpoint's tokenizer (and\n"
      "        named in its deck's data.tokenizer): fine-tune with data.tokenizer = that file.\n");
  if (!vm) return kExitOk;
  const std::string format = (*vm)["format"].as<std::string>();
  if (format != "llmc" && format != "hf") {
    throw Error(ErrorKind::config, "--format must be llmc or hf, got '" + format + "'");
  }
  if (format == "llmc" && !(*vm)["padded-vocab-size"].defaulted()) {
    throw Error(ErrorKind::config, "--padded-vocab-size is for --format hf only");
  }
  const std::string input = (*vm)["input"].as<std::string>();
  const std::string output = (*vm)["output"].as<std::string>();
  require_output(output);
  std::vector<NamedPath> paths;  // the output replaces none of the files it is made from
  if (format == "llmc") {
    require_regular_input(input, "import");
    paths.push_back({"--input", input});
  } else {
    for (const char* name : {ckpt::kHfConfigFile, ckpt::kHfWeightsFile}) {
      require_regular_input(input + "/" + name, "import");
      paths.push_back({"--input", input + "/" + name});
    }
  }
  paths.push_back({"--output", output, true});
  require_distinct_files(paths);
  ckpt::FullCheckpoint full;
  std::string source;
  std::string tokenizer;  // the SentencePiece model the import recorded, if any
  if (format == "llmc") {
    ckpt::LlmcModel imported = ckpt::read_llmc(input);
    if (imported.nonzero_padding > 0) {
      std::cerr << "hsdp-ckpt import: warning: " << imported.nonzero_padding
                << " values in the padded vocabulary rows of '" << input << "' are not zero and are dropped\n";
    }
    full = ckpt::empty_checkpoint(imported.config);
    full.params = std::move(imported.unit_params);
    source = "llm.c model file, version " + std::to_string(ckpt::kLlmcVersion);
  } else {
    const int padded = (*vm)["padded-vocab-size"].as<int>();
    if (padded < 0) throw Error(ErrorKind::config, "--padded-vocab-size must be >= 0, got " + std::to_string(padded));
    ckpt::HfModel imported = ckpt::read_hf(input, padded);
    full = ckpt::empty_checkpoint(imported.config);
    full.params = std::move(imported.unit_params);
    source = std::string("Hugging Face ") + (imported.config.llama() ? "Llama" : "GPT-2") + " directory";
    // Its SentencePiece tokenizer (what `export --format hf` writes, and a Llama 2's), recorded as the run's: a
    // fine-tune with data.tokenizer = that file resumes, hsdp-sample finds it in the deck.
    const std::string model_file = input + "/" + ckpt::kHfTokenizerFile;
    std::error_code ec;
    if (std::filesystem::exists(model_file, ec)) {
      require_regular_input(model_file, "import");
      try {
        full.state.tokenizer = data::Tokenizer::load(model_file).identity();
        tokenizer = model_file;
      } catch (const Error& e) {  // another format (Llama 3's tiktoken file): the ids are the user's to match
        std::cerr << "hsdp-ckpt import: warning: " << e.what() << "; the checkpoint records no tokenizer\n";
      }
    }
  }
  const model::GptConfig& c = full.config;
  std::ostringstream deck;
  deck << "# Imported from '" << input << "' (" << source << ") by hsdp-ckpt import.\n"
       << "[model]\n"
       << "arch = " << model::arch_name(c.arch) << "\n"
       << "n_layer = " << c.n_layer << "\nn_head = " << c.n_head << "\nn_embd = " << c.n_embd
       << "\nblock_size = " << c.block_size << "\nvocab_size = " << c.vocab_size
       << "\npadded_vocab_size = " << c.padded_vocab_size << "\n";
  if (c.llama()) {
    deck.precision(17);
    deck << "n_kv_head = " << c.kv_heads() << "\nffn_dim = " << c.ffn() << "\nrope_theta = " << c.rope_theta
         << "\nnorm_eps = " << c.norm_eps << "\ntie_embeddings = " << (c.tie_embeddings ? "true" : "false") << "\n";
  }
  if (!tokenizer.empty()) deck << "[data]\ntokenizer = " << tokenizer << "\n";
  full.state.deck_text = deck.str();
  full.state.strategy = "imported";
  full.state.world_size = 1;
  full.state.nodes = 1;
  full.state.mesh = "1x1";
  write_one_rank(output, full);
  std::cout << "wrote " << output << ": step 0, " << describe_model(c) << ", zero Adam state"
            << (tokenizer.empty() ? std::string() : ", tokenizer " + full.state.tokenizer + " (" + tokenizer + ")")
            << "\n";
  return kExitOk;
}

}  // namespace hsdp::ckpt_tool
