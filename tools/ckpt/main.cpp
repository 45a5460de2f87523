// hsdp-ckpt: inspects, verifies, consolidates, exports and imports hsdp checkpoints.
#include <mpi.h>

#include <algorithm>
#include <boost/program_options/errors.hpp>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "hsdp/core/error.hpp"

namespace {

constexpr const char* kUsage = R"(usage: hsdp-ckpt <command> [options]

Works on hsdp checkpoints: parallel HDF5 files (<run>/step_<N>.h5) holding the model, the Adam state,
the data and loss-scaler state and the config deck, with a checksum per tensor.

commands:
  inspect FILE                       what a checkpoint holds: step, tokens, world size, nodes, mesh and
                                     strategy at save, model shape, every dataset with shape and checksum
  verify FILE                        completeness (every tensor of the model in /meta, with its shape) and
                                     every checksum; exit 0 if intact, 2 naming the damaged dataset
  consolidate FILE --output OUT      the same checkpoint written as by one rank (world_size 1)
  export FILE --format safetensors --output model.safetensors
                                     the weights with nanoGPT names (plus lm_head.weight = wte), F32
  export FILE --format llmc --output gpt2.bin
                                     llm.c's fp32 GPT-2 model file (version 3)
  import --format llmc gpt2.bin --output step_0.h5
                                     a step-0 checkpoint from llm.c's model file (zero Adam state)

`hsdp-ckpt <command> --help` explains every option of a command.

examples:
  hsdp-ckpt inspect runs/gpt2/step_2000.h5 --summary
  hsdp-ckpt verify runs/gpt2/step_2000.h5
  hsdp-ckpt export runs/gpt2/step_2000.h5 --format safetensors --output gpt2.safetensors
  hsdp-ckpt import --format llmc gpt2_124M.bin --output runs/ft/step_0.h5

exit codes: 0 ok, 1 internal error, 2 bad options or a bad checkpoint or model file (one line says which).
)";

int dispatch(const std::string& command, const std::vector<std::string>& args) {
  using namespace hsdp::ckpt_tool;
  if (command == "inspect") return run_inspect(args);
  if (command == "verify") return run_verify(args);
  if (command == "consolidate") return run_consolidate(args);
  if (command == "export") return run_export(args);
  if (command == "import") return run_import(args);
  std::cerr << "hsdp-ckpt: unknown command '" << command
            << "' (commands: inspect, verify, consolidate, export, import; see hsdp-ckpt --help)\n";
  return hsdp::kExitBadInput;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> all(argv + 1, argv + argc);
  if (all.empty()) {
    std::cerr << "hsdp-ckpt: missing command (inspect, verify, consolidate, export, import); see hsdp-ckpt --help\n";
    return hsdp::kExitBadInput;
  }
  const std::string command = all.front();
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << kUsage;
    return hsdp::kExitOk;
  }
  if (command == "--version") {
    std::cout << "hsdp-ckpt " << HSDP_VERSION << '\n';
    return hsdp::kExitOk;
  }
  const std::vector<std::string> args(all.begin() + 1, all.end());
  // The checkpoint reader and writer run on MPI_COMM_SELF of a singleton MPI process; inspect and --help need no
  // MPI (and skip its start-up time).
  const bool wants_help = std::find_if(args.begin(), args.end(),
                                       [](const std::string& a) { return a == "--help" || a == "-h"; }) != args.end();
  const bool needs_mpi = command != "inspect" && !wants_help;
  if (needs_mpi) MPI_Init(&argc, &argv);
  int code = hsdp::kExitOk;
  try {
    code = dispatch(command, args);
  } catch (const boost::program_options::error& e) {
    std::cerr << "hsdp-ckpt " << command << ": " << e.what() << " (see hsdp-ckpt " << command << " --help)\n";
    code = hsdp::kExitBadInput;
  } catch (const hsdp::Error& e) {
    std::cerr << "hsdp-ckpt: error: " << e.what() << '\n';
    code = e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "hsdp-ckpt " << command << ": internal error: " << e.what() << '\n';
    code = hsdp::kExitInternal;
  }
  if (needs_mpi) MPI_Finalize();
  return code;
}
