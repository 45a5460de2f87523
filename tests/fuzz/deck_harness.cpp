// Fuzz harness of the deck parser: hsdp-train's ConfigDeck::parse over an INI deck and a command line.
//
// Input: the deck text, then optionally a NUL byte and command-line words separated by NUL bytes, e.g.
// "[model]\nn_layer = 2\n\0--train.steps=3\0--print-config". The deck goes to a file named by --config (no
// --config when the deck text is empty); the words follow it, as `hsdp-train --config deck.ini WORDS...` would get
// them. An accepted deck must print back (--print-config, and the deck saved in every checkpoint) as a deck that
// parses to the same values.
#include <string>
#include <vector>

#include "harness.hpp"
#include "hsdp/app/deck.hpp"
#include "hsdp/core/error.hpp"

namespace {

using hsdp::app::CommandLine;
using hsdp::app::ConfigDeck;

void parse_deck(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::size_t end_of_deck = input.find('\0');
  const std::string deck_text = input.substr(0, end_of_deck);
  std::vector<std::string> words = {"hsdp-train"};
  if (!deck_text.empty()) {
    static const std::string deck_path = hsdp::fuzz::scratch_dir() + "/deck.ini";
    hsdp::fuzz::write_file(deck_path, {data, deck_text.size()});
    words.insert(words.end(), {"--config", deck_path});
  }
  for (std::size_t at = end_of_deck; at != std::string::npos && at < input.size();) {
    const std::size_t next = input.find('\0', at + 1);
    words.push_back(input.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1));
    at = next;
  }
  std::vector<const char*> argv;
  for (const auto& w : words) argv.push_back(w.c_str());

  CommandLine cli;
  const ConfigDeck deck = ConfigDeck::parse(static_cast<int>(argv.size()), argv.data(), cli);

  const std::string printed = deck.to_ini();
  ConfigDeck reread;
  try {
    reread = ConfigDeck::from_text(printed, "--print-config");
  } catch (const hsdp::Error& e) {
    throw hsdp::fuzz::PropertyViolation("print_config_parses", std::string("the printed deck does not parse: ") +
                                                                   e.what());
  }
  for (const auto& spec : hsdp::app::option_table()) {
    if (reread.get(spec.key) != deck.get(spec.key)) {
      throw hsdp::fuzz::PropertyViolation("print_config_roundtrip", spec.key + " is '" + deck.get(spec.key) +
                                                                        "' but the printed deck reads back '" +
                                                                        reread.get(spec.key) + "'");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return hsdp::fuzz::finish(hsdp::fuzz::run_classified([&] { parse_deck(data, size); }));
}
