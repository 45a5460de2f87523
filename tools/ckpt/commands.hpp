#pragma once
// The subcommands of hsdp-ckpt. Each parses its own options (Boost.Program_options) and returns an exit code;
// errors travel as hsdp::Error or boost::program_options::error to main. MPI is initialized by main (one process).
#include <string>
#include <vector>

namespace hsdp::ckpt_tool {

int run_inspect(const std::vector<std::string>& args);
int run_verify(const std::vector<std::string>& args);
int run_consolidate(const std::vector<std::string>& args);
int run_export(const std::vector<std::string>& args);
int run_import(const std::vector<std::string>& args);

}  // namespace hsdp::ckpt_tool
