// hsdp-data: prepares token files for hsdp-train (llm.c .bin format).
#include <boost/program_options/errors.hpp>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "hsdp/core/error.hpp"

namespace {

constexpr const char* kUsage = R"(usage: hsdp-data <command> [options]

Prepares token files for hsdp-train: llm.c's .bin format (a 256 x int32 header with magic 20240520,
version 1 and the token count, then the tokens as uint16).

commands:
  encode   byte-level encoding of a text file (vocab 256: each byte is one token)
  synth    a synthetic dataset from a seeded sparse Markov source whose exact entropy rate
           (the loss a perfect model reaches) is written to source.json
  info     checks a token file and prints its token count and largest token id

`hsdp-data <command> --help` explains every option of a command.

examples:
  hsdp-data synth --out-dir data/markov
  hsdp-data encode --input corpus.txt --output data/corpus_train.bin \
                   --val-output data/corpus_val.bin --val-fraction 0.05
  hsdp-data info --input data/markov/train.bin --vocab 64

exit codes: 0 ok, 1 internal error, 2 bad options or bad data.
)";

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> all(argv + 1, argv + argc);
  if (all.empty()) {
    std::cerr << "hsdp-data: missing command (encode, synth or info); see hsdp-data --help\n";
    return hsdp::kExitBadInput;
  }
  const std::string command = all.front();
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << kUsage;
    return hsdp::kExitOk;
  }
  if (command == "--version") {
    std::cout << "hsdp-data " << HSDP_VERSION << '\n';
    return hsdp::kExitOk;
  }
  const std::vector<std::string> args(all.begin() + 1, all.end());
  try {
    if (command == "encode") return hsdp::data_tool::run_encode(args);
    if (command == "synth") return hsdp::data_tool::run_synth(args);
    if (command == "info") return hsdp::data_tool::run_info(args);
    std::cerr << "hsdp-data: unknown command '" << command
              << "' (commands: encode, synth, info; see hsdp-data --help)\n";
    return hsdp::kExitBadInput;
  } catch (const boost::program_options::error& e) {
    std::cerr << "hsdp-data " << command << ": " << e.what() << " (see hsdp-data " << command << " --help)\n";
    return hsdp::kExitBadInput;
  } catch (const hsdp::Error& e) {
    std::cerr << "hsdp-data: error: " << e.what() << '\n';
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "hsdp-data " << command << ": internal error: " << e.what() << '\n';
    return hsdp::kExitInternal;
  }
}
