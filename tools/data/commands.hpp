#pragma once
// The subcommands of hsdp-data. Each parses its own options (Boost.Program_options) and returns an exit
// code; errors travel as hsdp::Error or boost::program_options::error to main.
#include <string>
#include <vector>

namespace hsdp::data_tool {

int run_encode(const std::vector<std::string>& args);
int run_synth(const std::vector<std::string>& args);
int run_info(const std::vector<std::string>& args);
int run_tokenizer(const std::vector<std::string>& args);

}  // namespace hsdp::data_tool
