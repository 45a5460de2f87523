#include "hsdp/app/deck.hpp"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "hsdp/core/error.hpp"
#include "hsdp/model/layout.hpp"
#include "hsdp/optim/adamw.hpp"
#include "hsdp/optim/lr_schedule.hpp"
#include "hsdp/quant/blockwise.hpp"
#include "hsdp/train/metrics.hpp"
#include "hsdp/train/options.hpp"

namespace po = boost::program_options;

namespace hsdp::app {

namespace {

// "--train.lr=1" (as Boost reports an unknown command-line option) -> "train.lr".
std::string strip_dashes(std::string name) {
  while (!name.empty() && name.front() == '-') name.erase(name.begin());
  return name.substr(0, name.find('='));
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string unknown_key_message(const std::string& raw_name) {
  const std::string key = strip_dashes(raw_name);
  // "-train.steps=3": a known key with one dash (Boost reads it as the short option 't').
  if (find_option(key) != nullptr) {
    return "'" + raw_name + "': deck keys take two dashes, as in --" + key + "=VALUE";
  }
  std::string message = "unknown option '" + key + "'";
  const std::string hint = closest_key(key);
  if (!hint.empty()) message += "; did you mean '" + hint + "'?";
  return message + " (hsdp-train --help lists every key)";
}

constexpr const char* kBooleanWords = "true|false (also yes|no, on|off, 1|0)";

bool parse_bool(const std::string& value, bool& out) {
  std::string v = value;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "true" || v == "1" || v == "yes" || v == "on") {
    out = true;
    return true;
  }
  if (v == "false" || v == "0" || v == "no" || v == "off") {
    out = false;
    return true;
  }
  return false;
}

std::string format_bound(double x) {
  std::ostringstream s;
  if (x == std::trunc(x) && std::fabs(x) < 1e15) {
    s << static_cast<long long>(x);  // 1048576, not 1.04858e+06
  } else {
    s << x;
  }
  return s.str();
}

std::string range_text(const OptionSpec& spec) {
  const bool has_min = spec.min > -1e299;
  const bool has_max = spec.max < 1e17;
  if (has_min && has_max) return "between " + format_bound(spec.min) + " and " + format_bound(spec.max);
  if (has_min) return ">= " + format_bound(spec.min);
  if (has_max) return "<= " + format_bound(spec.max);
  return "any";
}

// Every occurrence of a key is kept (a key given twice takes the last value: a job script's header may set a key
// that the user's command line sets again); defaults come from the option table, not from here.
po::options_description deck_description() {
  po::options_description desc("deck");
  for (const auto& spec : option_table()) desc.add_options()(spec.key.c_str(), po::value<std::vector<std::string>>(), "");
  return desc;
}

// The last value given for each deck key in `vm`.
void set_last_values(const po::variables_map& vm, ConfigDeck& deck) {
  for (const auto& [key, value] : vm) {
    if (find_option(key) == nullptr) continue;
    const auto& values = value.as<std::vector<std::string>>();
    if (!values.empty()) deck.set(key, values.back());
  }
}

// Boost.Program_options throws its own exceptions; hsdp reports them as config Errors naming the key.
[[noreturn]] void rethrow_as_config(const po::error& e, const std::string& origin) {
  if (const auto* unknown = dynamic_cast<const po::unknown_option*>(&e)) {
    throw_config(origin + unknown_key_message(unknown->get_option_name()));
  }
  if (const auto* multiple = dynamic_cast<const po::multiple_occurrences*>(&e)) {
    throw_config(origin + "option '" + strip_dashes(multiple->get_option_name()) + "' is given more than once");
  }
  throw_config(origin + e.what());
}

// A message with its control characters escaped (\n, \x01): a newline in a command-line word that a message quotes
// must not break the one line hsdp-train prints for a bad deck.
std::string printable(const std::string& text) {
  std::string out;
  for (const unsigned char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      constexpr const char* kHex = "0123456789abcdef";
      out += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

[[noreturn]] void rethrow_one_line(const Error& e) {
  throw Error(e.kind(), printable(e.what()));
}

// Characters a deck line cannot hold in a value: Boost ends the value at '#' (a comment) and at the line's end, and
// trims spaces and tabs around it (so does ConfigDeck::set); a tab inside a value is kept.
bool deck_can_hold(const std::string& value) {
  return std::none_of(value.begin(), value.end(),
                      [](unsigned char c) { return c == '#' || (c < 0x20 && c != '\t') || c == 0x7f; });
}

std::string trimmed(const std::string& value) {
  const std::size_t first = value.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return value.substr(first, value.find_last_not_of(" \t") - first + 1);
}

}  // namespace

const OptionSpec* find_option(const std::string& key) {
  for (const auto& spec : option_table()) {
    if (spec.key == key) return &spec;
  }
  return nullptr;
}

std::string closest_key(const std::string& key) {
  std::string best;
  std::size_t best_distance = 4;  // farther than this is not a typo
  for (const auto& spec : option_table()) {
    const std::string& candidate = spec.key;
    // A bare name ("sharding") matches its section's key.
    const std::string name = candidate.substr(candidate.find('.') + 1);
    const std::size_t d = std::min(edit_distance(key, candidate), edit_distance(key, name));
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

void validate_value(const OptionSpec& spec, const std::string& value) {
  const std::string where = spec.key + ": ";
  if (!deck_can_hold(value)) {
    throw_config(where + "'" + value + "' cannot be written in a deck (--print-config, the deck saved in checkpoints): "
                 "no '#' or control characters");
  }
  switch (spec.kind) {
    case OptionKind::text:
    case OptionKind::path: return;
    case OptionKind::boolean: {
      bool ignored;
      if (!parse_bool(value, ignored)) throw_config(where + "'" + value + "' is not a boolean (allowed: " + kBooleanWords + ")");
      return;
    }
    case OptionKind::choice: {
      std::stringstream choices(spec.choices);
      for (std::string c; std::getline(choices, c, '|');) {
        if (c == value) return;
      }
      throw_config(where + "unknown value '" + value + "' (allowed: " + spec.choices + ")");
    }
    case OptionKind::integer:
    case OptionKind::real: {
      errno = 0;
      char* end = nullptr;
      const double x = spec.kind == OptionKind::integer ? static_cast<double>(std::strtoll(value.c_str(), &end, 10))
                                                        : std::strtod(value.c_str(), &end);
      if (value.empty() || end == nullptr || *end != '\0' || errno == ERANGE || !std::isfinite(x)) {
        throw_config(where + "'" + value + "' is not " +
                     (spec.kind == OptionKind::integer ? "an integer" : "a number") + " (allowed: " +
                     range_text(spec) + ")");
      }
      if (x < spec.min || x > spec.max) {
        throw_config(where + value + " is out of range (allowed: " + range_text(spec) + ")");
      }
      return;
    }
  }
}

ConfigDeck ConfigDeck::defaults() {
  ConfigDeck deck;
  for (const auto& spec : option_table()) deck.values_[spec.key] = spec.default_value;
  return deck;
}

// parse, from_text and set end with rethrow_one_line (function try blocks): every message stays one line.
ConfigDeck ConfigDeck::from_text(const std::string& ini_text, const std::string& origin) try {
  ConfigDeck deck = defaults();
  po::variables_map vm;
  try {
    std::istringstream in(ini_text);
    po::store(po::parse_config_file(in, deck_description(), false), vm);
  } catch (const po::error& e) {
    rethrow_as_config(e, origin + ": ");
  }
  set_last_values(vm, deck);
  return deck;
} catch (const Error& e) {
  rethrow_one_line(e);
}

ConfigDeck ConfigDeck::parse(int argc, const char* const* argv, CommandLine& cli) try {
  po::options_description flags("program");
  flags.add_options()("help,h", "")("version", "")("print-config", "")("check-config", "")("print-mesh", "")(
      "config,c", po::value<std::string>(), "");
  po::options_description all;
  all.add(flags).add(deck_description());

  // `--section.key=` means the empty value (e.g. checkpoint.dir, where empty means off); Boost rejects an empty
  // value after '=', but takes it as a separate argument.
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.size() > 3 && arg.rfind("--", 0) == 0 && arg.back() == '=') {
      args.push_back(arg.substr(0, arg.size() - 1));
      args.emplace_back();
    } else {
      args.push_back(arg);
    }
  }
  po::variables_map vm;
  try {
    const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    const po::parsed_options parsed = po::command_line_parser(args).options(all).style(style).run();
    // A word that is neither an option nor an option's value ("train.steps=10" without its dashes) would be
    // dropped silently: say what was meant instead.
    for (const auto& option : parsed.options) {
      if (option.position_key < 0) continue;
      const std::string word = option.value.empty() ? std::string() : option.value.front();
      const std::string key = word.substr(0, word.find('='));
      throw_config("unexpected word '" + word + "' on the command line" +
                   (find_option(key) != nullptr ? "; deck keys take two dashes: --" + word
                                                : std::string("; options start with -- (hsdp-train --help)")));
    }
    po::store(parsed, vm);
  } catch (const po::error& e) {
    rethrow_as_config(e, "");
  }
  cli.help = vm.count("help") > 0;
  cli.version = vm.count("version") > 0;
  cli.print_config = vm.count("print-config") > 0;
  cli.check_config = vm.count("check-config") > 0;
  cli.print_mesh = vm.count("print-mesh") > 0;
  if (vm.count("config")) cli.config_path = vm["config"].as<std::string>();

  ConfigDeck deck = defaults();
  if (cli.config_path) {
    std::error_code ec;
    // An ifstream opens a directory without complaint and reads nothing: it would be an empty deck.
    if (std::filesystem::is_directory(*cli.config_path, ec)) {
      throw_config("--config: deck '" + *cli.config_path + "' is a directory, not a deck file");
    }
    std::ifstream file(*cli.config_path);
    if (!file) throw_config("--config: cannot open deck '" + *cli.config_path + "' (no such file or not readable)");
    std::stringstream text;
    text << file.rdbuf();
    deck = from_text(text.str(), "deck '" + *cli.config_path + "'");
  }
  // Command-line values override the deck.
  set_last_values(vm, deck);
  return deck;
} catch (const Error& e) {
  rethrow_one_line(e);
}

const std::string& ConfigDeck::get(const std::string& key) const {
  const auto it = values_.find(key);
  if (it == values_.end()) throw_internal("config key '" + key + "' is not in the option table");
  return it->second;
}

long long ConfigDeck::get_int(const std::string& key) const { return std::strtoll(get(key).c_str(), nullptr, 10); }

double ConfigDeck::get_real(const std::string& key) const { return std::strtod(get(key).c_str(), nullptr); }

bool ConfigDeck::get_bool(const std::string& key) const {
  bool out = false;
  parse_bool(get(key), out);
  return out;
}

void ConfigDeck::set(const std::string& key, const std::string& raw_value) try {
  const OptionSpec* spec = find_option(key);
  if (spec == nullptr) throw_config(unknown_key_message(key));
  const std::string value = trimmed(raw_value);  // as a deck line's value is
  validate_value(*spec, value);
  values_[key] = value;
} catch (const Error& e) {
  rethrow_one_line(e);
}

std::string ConfigDeck::to_ini(bool with_comments) const {
  std::ostringstream out;
  for (const auto& section : section_order()) {
    out << "[" << section << "]\n";
    for (const auto& spec : option_table()) {
      if (spec.key.compare(0, section.size() + 1, section + ".") != 0) continue;
      if (with_comments) out << "# " << spec.help << "\n";
      out << spec.key.substr(section.size() + 1) << " = " << get(spec.key) << "\n";
    }
    out << "\n";
  }
  return out.str();
}

std::string help_text(const std::string& program) {
  std::ostringstream out;
  out << "usage: " << program << " [--config deck.ini] [--section.key=value ...] [flags]\n\n"
      << "Trains a GPT model on every rank of an MPI job (launch with `srun --mpi=pmix` or `mpirun`).\n"
      << "Settings come from the deck (an INI file with the sections below), overridden by --section.key=value.\n\n"
      << "flags:\n"
      << "  -c, --config FILE   read the deck from FILE\n"
      << "  --print-config      print the resolved deck (a valid deck) and exit\n"
      << "  --check-config      check the deck as a run would (every key, and the checks across keys: ZeRO++ with\n"
      << "                      the strategy, islands, the schedule), then print it; exit 2 naming a problem\n"
      << "  --print-mesh        build the process mesh for parallel.sharding, print its groups, and exit\n"
      << "  --version           print the version and exit\n"
      << "  -h, --help          this text\n\n"
      << "exit codes: 0 done; 1 internal error; 2 bad input (config, data or checkpoint: the message names it);\n"
      << "            3 checkpointed on SIGUSR1 or SIGTERM (Slurm's warning before the time limit): requeue me,\n"
      << "              the next run resumes with checkpoint.resume=auto;\n"
      << "            4 communication failure or a stall (the watchdog fired: a collective, start-up or checkpoint\n"
      << "              I/O did not finish within comm.timeout_s / comm.startup_timeout_s / checkpoint.timeout_s);\n"
      << "            5 training diverged (a non-finite loss or gradient norm; no checkpoint of that step is "
         "written);\n"
      << "            6 stopped on SIGUSR1 or SIGTERM with no checkpoint.dir: nothing to resume, do not requeue;\n"
      << "            7 replicas of the same state differ (check.replicas_every: a bit flip, a stale binary on a\n"
      << "              node, a faulty collective): no checkpoint of that state is written, `latest` stays the last\n"
      << "              good one; find the named host's fault, then resume\n\n"
      << train::kProgressLineLegend << "\n\n"
      << "deck keys (default in brackets):\n";
  for (const auto& section : section_order()) {
    out << "\n  [" << section << "]\n";
    for (const auto& spec : option_table()) {
      if (spec.key.compare(0, section.size() + 1, section + ".") != 0) continue;
      out << "  --" << spec.key << " [" << spec.default_value << "]\n      " << spec.help;
      if (spec.kind == OptionKind::choice) out << "\n      allowed: " << spec.choices;
      if (spec.kind == OptionKind::integer || spec.kind == OptionKind::real) {
        const std::string range = range_text(spec);
        if (range != "any") out << "\n      allowed: " << range;
      }
      if (spec.kind == OptionKind::boolean) out << "\n      allowed: " << kBooleanWords;
      out << "\n";
    }
  }
  return out.str();
}

const std::string& DeckValue::text() const {
  return deck.get(key);
}
long long DeckValue::integer() const {
  return deck.get_int(key);
}
int DeckValue::int32() const {
  const long long v = integer();
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    throw_config(key + ": " + std::to_string(v) + " is out of range (allowed: at most " +
                 std::to_string(std::numeric_limits<int>::max()) + ")");
  }
  return static_cast<int>(v);
}
double DeckValue::real() const {
  return deck.get_real(key);
}
bool DeckValue::boolean() const {
  return deck.get_bool(key);
}

train::TrainOptions deck_values(const ConfigDeck& deck) {
  train::TrainOptions o;
  for (const OptionSpec& spec : option_table()) {
    if (spec.read) spec.read(DeckValue{deck, spec.key}, o);
  }
  return o;
}

train::TrainOptions train_options(const ConfigDeck& deck) {
  train::TrainOptions o = deck_values(deck);
  // Values derived from several keys, and the checks across keys.
  if (o.model.padded_vocab_size == 0) o.model.padded_vocab_size = (o.model.vocab_size + 127) / 128 * 128;
  if (o.model.padded_vocab_size < o.model.vocab_size) {
    throw_config("model.padded_vocab_size (" + std::to_string(o.model.padded_vocab_size) +
                 ") must be 0 or >= model.vocab_size (" + std::to_string(o.model.vocab_size) + ")");
  }
  o.model.validate();
  if (o.seq_len > o.model.block_size) {
    throw_config("train.seq_len (" + std::to_string(o.seq_len) + ") exceeds model.block_size (" +
                 std::to_string(o.model.block_size) + ")");
  }
  o.engine.grad_accum = o.grad_accum;
  o.schedule.max_steps = o.steps;
  optim::validate(o.schedule);
  optim::validate(o.adamw, o.schedule.lr);
  shard::validate(o.engine.strategy, o.engine.zeropp);
  if (o.islands > 1) {
    shard::validate(o.outer, model::ModelLayout::block_unit(o.model.n_layer) + 1);
    if (o.data_parts > 1) {
      throw_config("data.part reproduces one island as a job of its own: it needs parallel.islands=1");
    }
  }
  if (o.resume == "auto" && o.checkpoint_dir.empty()) o.resume = "none";
  o.deck_text = deck.to_ini(false);
  return o;
}

}  // namespace hsdp::app
