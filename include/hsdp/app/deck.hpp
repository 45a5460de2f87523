#pragma once
// The configuration deck: every key hsdp-train understands, with its default, its help text and its check,
// in ONE table. Decks are INI files ([section] key = value); the command line overrides them with
// --section.key=value. A resolved deck prints back as a valid INI deck (--print-config).
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hsdp::train {
struct TrainOptions;
}

namespace hsdp::app {

enum class OptionKind { text, integer, real, boolean, choice, path };

class ConfigDeck;

// One key's value in a deck, as its table entry reads it into TrainOptions.
struct DeckValue {
  const ConfigDeck& deck;
  const std::string& key;
  const std::string& text() const;
  long long integer() const;
  int int32() const;  // a value beyond int is a config error naming the key (a key whose table has no bound)
  double real() const;
  bool boolean() const;
};
using ReadInto = std::function<void(const DeckValue&, train::TrainOptions&)>;

struct OptionSpec {
  std::string key;            // "section.name"
  std::string default_value;  // as written in a deck
  std::string help;
  OptionKind kind = OptionKind::text;
  std::string choices;  // "a|b|c" for OptionKind::choice
  double min = -1e300;  // inclusive bounds for integer and real
  double max = 1e300;
  ReadInto read;  // where hsdp-train keeps the value (train_options); none: a key only tools read
  OptionSpec into(ReadInto r) && {
    read = std::move(r);
    return std::move(*this);
  }
};

const std::vector<OptionSpec>& option_table();
const std::vector<std::string>& section_order();

// Flags of the program itself (not part of the deck).
struct CommandLine {
  bool help = false;
  bool print_config = false;
  bool check_config = false;  // print the deck only once the checks across keys passed (hsdp-sweep expand)
  bool print_mesh = false;
  bool version = false;
  std::optional<std::string> config_path;
};

class ConfigDeck {
 public:
  // Parses argv (and the --config deck if given); throws a config Error naming the key for an unknown key,
  // a bad value or a missing deck file. `cli` receives the program flags.
  static ConfigDeck parse(int argc, const char* const* argv, CommandLine& cli);
  // Parses deck text alone (no command line), e.g. the deck saved in a checkpoint.
  static ConfigDeck from_text(const std::string& ini_text, const std::string& origin);
  // Defaults only.
  static ConfigDeck defaults();

  const std::string& get(const std::string& key) const;
  long long get_int(const std::string& key) const;
  double get_real(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  // Validated like a deck value, and like one without the spaces and tabs around it.
  void set(const std::string& key, const std::string& value);

  // The resolved deck as INI text, every key, in table order, with its help as a comment.
  std::string to_ini(bool with_comments = true) const;

 private:
  std::map<std::string, std::string> values_;
};

// Every key's value where its table entry reads it, nothing derived and nothing checked across keys (hsdp-plan
// reads decks whose shapes hsdp-train would refuse, e.g. a Llama's sequence beyond the GPT block size).
train::TrainOptions deck_values(const ConfigDeck& deck);
// hsdp-train's typed options: deck_values, then the values derived from several keys and the checks across keys (a
// config Error names the keys).
train::TrainOptions train_options(const ConfigDeck& deck);

// `hsdp-train --help`: usage, program flags, exit codes, and every deck key with default and help.
std::string help_text(const std::string& program);

// Validates `value` for `spec`; throws a config Error naming the key and what is allowed. A value a deck line cannot
// hold ('#', control characters but tab) is refused for every key.
void validate_value(const OptionSpec& spec, const std::string& value);
const OptionSpec* find_option(const std::string& key);
// The known key closest to `key` (edit distance), for "did you mean" hints; empty if nothing is close.
std::string closest_key(const std::string& key);

}  // namespace hsdp::app
