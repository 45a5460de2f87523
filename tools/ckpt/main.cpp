// hsdp-ckpt: inspects, verifies, consolidates, exports and imports hsdp checkpoints.

#include <string>
#include <vector>

#include "../common/mpi_singleton.hpp"
#include "../common/subcommands.hpp"
#include "commands.hpp"

namespace {

constexpr const char* kUsage = R"(usage: hsdp-ckpt <command> [options]

Works on hsdp checkpoints: parallel HDF5 files (<run>/step_<N>.h5) holding the model, the Adam state,
the data and loss-scaler state and the config deck, with a checksum per tensor. FILE is a step_<N>.h5 file or
a checkpoint directory (a run's checkpoint.dir), whose `latest` names the file.

commands:
  inspect FILE                       what a checkpoint holds: step, tokens, world size, nodes, mesh and
                                     strategy at save, model shape, every dataset with shape and checksum
  verify FILE                        completeness (every tensor of the model in /meta, with its shape) and
                                     every checksum; exit 0 if intact, 2 naming the damaged dataset
  consolidate FILE --output OUT      the same checkpoint written as by one rank (world_size 1)
  export FILE --format safetensors --output model.safetensors
                                     the weights, F32: a GPT-2's with nanoGPT names (plus lm_head.weight =
                                     wte), a Llama's with LlamaForCausalLM's
  export FILE --format llmc --output gpt2.bin
                                     llm.c's fp32 GPT-2 model file (version 3; GPT-2 only)
  export FILE --format hf --output DIR
                                     a Hugging Face GPT-2 or Llama directory: config.json and
                                     model.safetensors (GPT2LMHeadModel or LlamaForCausalLM .from_pretrained(DIR)
                                     loads it)
  import --format llmc gpt2.bin --output step_0.h5
                                     a step-0 checkpoint from llm.c's model file (zero Adam state)
  import --format hf DIR --output step_0.h5
                                     a step-0 checkpoint from a Hugging Face GPT-2 or Llama directory

`hsdp-ckpt <command> --help` explains every option of a command.

examples:
  hsdp-ckpt inspect runs/gpt2/step_2000.h5 --summary
  hsdp-ckpt verify runs/gpt2/step_2000.h5
  hsdp-ckpt export runs/gpt2/step_2000.h5 --format safetensors --output gpt2.safetensors
  hsdp-ckpt export runs/gpt2/step_2000.h5 --format hf --output gpt2-hf
  hsdp-ckpt import --format llmc gpt2_124M.bin --output runs/ft/step_0.h5
  hsdp-ckpt import --format hf gpt2-hf --output runs/ft/step_0.h5

exit codes: 0 ok, 1 internal error, 2 bad options or a bad checkpoint or model file (one line says which).
)";

// The checkpoint reader and writer run on MPI_COMM_SELF of a singleton MPI process, started for the commands that
// use it (inspect and --help need no MPI, and skip its start-up time).
template <int (*kRun)(const std::vector<std::string>&)>
int with_mpi(const hsdp::tool::Args& args) {
  const hsdp::tool::MpiSingleton mpi(!hsdp::tool::wants_help(args));
  if (!mpi.alone("hsdp-ckpt")) return hsdp::kExitBadInput;
  return kRun(args);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hsdp::ckpt_tool;
  return hsdp::tool::run_subcommand_tool("hsdp-ckpt", kUsage,
                                         {{"inspect", run_inspect},
                                          {"verify", with_mpi<run_verify>},
                                          {"consolidate", with_mpi<run_consolidate>},
                                          {"export", with_mpi<run_export>},
                                          {"import", with_mpi<run_import>}},
                                         argc, argv);
}
