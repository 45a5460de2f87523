#pragma once
// The command-line frame of hsdp's `<tool> <command> [options]` tools (hsdp-data, hsdp-ckpt): the first word
// names the command; a missing or unknown command, --help and --version are handled here, each command parses
// its own options with parse_options, and errors end as one line and an exit code (2 bad options or input, 1
// internal).
#include <boost/program_options.hpp>
#include <cstdint>
#include <exception>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hsdp/core/error.hpp"

namespace hsdp::tool {

using Args = std::vector<std::string>;
using Command = std::pair<const char*, std::function<int(const Args&)>>;

// Parses a command's `args` against `options` (plus --help), with `positional` naming the options that may be given
// bare; nullopt when help was printed.
inline std::optional<boost::program_options::variables_map> parse_options(
    const Args& args, boost::program_options::options_description& options,
    const boost::program_options::positional_options_description& positional, const char* usage) {
  namespace po = boost::program_options;
  options.add_options()("help,h", "print this help and exit");
  const po::parsed_options parsed = po::command_line_parser(args).options(options).positional(positional).run();
  // Boost reads "-5" for an unsigned option as 2^64 - 5 (a seed): refused instead, naming it.
  for (const po::option& given : parsed.options) {
    const po::option_description* d = options.find_nothrow(given.string_key, false);
    if (d == nullptr || dynamic_cast<const po::typed_value<std::uint64_t>*>(d->semantic().get()) == nullptr) continue;
    for (const std::string& value : given.value) {
      if (const std::size_t first = value.find_first_not_of(" \t"); first != std::string::npos && value[first] == '-') {
        throw Error(ErrorKind::config, "--" + given.string_key + " must be >= 0, got " + value);
      }
    }
  }
  po::variables_map vm;
  po::store(parsed, vm);
  if (vm.count("help")) {
    std::cout << usage << "\n" << options;
    return std::nullopt;
  }
  po::notify(vm);
  return vm;
}
// Without positional options: a stray word is an error, not ignored.
inline std::optional<boost::program_options::variables_map> parse_options(
    const Args& args, boost::program_options::options_description& options, const char* usage) {
  return parse_options(args, options, boost::program_options::positional_options_description{}, usage);
}

// True when a command's arguments ask for its help.
inline bool wants_help(const Args& args) {
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

// Runs `<tool> <command> [options]` against `commands` (in the order --help and messages list them).
inline int run_subcommand_tool(const char* tool, const char* usage, const std::vector<Command>& commands, int argc,
                               char** argv) {
  std::string names;
  for (const auto& [name, run] : commands) names += (names.empty() ? "" : ", ") + std::string(name);
  const Args all(argv + 1, argv + argc);
  if (all.empty()) {
    std::cerr << tool << ": missing command (" << names << "); see " << tool << " --help\n";
    return kExitBadInput;
  }
  const std::string command = all.front();
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << usage;
    return kExitOk;
  }
  if (command == "--version") {
    std::cout << tool << ' ' << HSDP_VERSION << '\n';
    return kExitOk;
  }
  const Args args(all.begin() + 1, all.end());
  try {
    for (const auto& [name, run] : commands) {
      if (command == name) return run(args);
    }
    std::cerr << tool << ": unknown command '" << command << "' (commands: " << names << "; see " << tool
              << " --help)\n";
    return kExitBadInput;
  } catch (const boost::program_options::error& e) {
    std::cerr << tool << ' ' << command << ": " << e.what() << " (see " << tool << ' ' << command << " --help)\n";
    return kExitBadInput;
  } catch (const Error& e) {
    std::cerr << tool << ": error: " << e.what() << '\n';
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << tool << ' ' << command << ": internal error: " << e.what() << '\n';
    return kExitInternal;
  }
}

}  // namespace hsdp::tool
