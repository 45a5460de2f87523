// hsdp-data: prepares token files for hsdp-train (llm.c .bin format).
#include "../common/subcommands.hpp"
#include "commands.hpp"

namespace {

constexpr const char* kUsage = R"(usage: hsdp-data <command> [options]

Prepares token files for hsdp-train: llm.c's .bin format (a 256 x int32 header with magic 20240520,
the version and the token count, then the tokens: uint16 for version 1, uint32 for version 2).

commands:
  tokenizer train   a SentencePiece tokenizer (BPE or unigram) learnt from your text
  encode   a text file into token files: bytes (vocab 256: each byte is one token) or a SentencePiece
           model's ids; the validation part as the tail or as whole documents
  synth    a synthetic dataset from a seeded sparse Markov source whose exact entropy rate
           (the loss a perfect model reaches) is written to source.json
  info     checks a token file and prints its token count and largest token id

`hsdp-data <command> --help` explains every option of a command.

examples:
  hsdp-data synth --out-dir data/markov
  hsdp-data encode --input corpus.txt --output data/corpus_train.bin \
                   --val-output data/corpus_val.bin --val-fraction 0.05
  hsdp-data tokenizer train --input corpus.txt --out data/spm --vocab-size 4000
  hsdp-data encode --input corpus.txt --tokenizer data/spm.model --output data/spm_train.bin \
                   --val-output data/spm_val.bin --val-split documents
  hsdp-data info --input data/markov/train.bin --vocab 64

exit codes: 0 ok, 1 internal error, 2 bad options or bad data.
)";

}  // namespace

int main(int argc, char** argv) {
  using namespace hsdp::data_tool;
  return hsdp::tool::run_subcommand_tool(
      "hsdp-data", kUsage, {{"encode", run_encode}, {"synth", run_synth}, {"info", run_info}, {"tokenizer", run_tokenizer}}, argc, argv);
}
