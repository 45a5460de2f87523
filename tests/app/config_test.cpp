#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "hsdp/app/deck.hpp"
#include "hsdp/core/error.hpp"

namespace hsdp::app {
namespace {

ConfigDeck parse(std::vector<std::string> args, CommandLine& cli) {
  std::vector<const char*> argv = {"hsdp-train"};
  for (const auto& a : args) argv.push_back(a.c_str());
  return ConfigDeck::parse(static_cast<int>(argv.size()), argv.data(), cli);
}

std::string error_of(std::vector<std::string> args) {
  CommandLine cli;
  try {
    parse(std::move(args), cli);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  return "";
}

std::string write_deck(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ConfigDeck, DefaultsComeFromTheOptionTable) {
  CommandLine cli;
  const ConfigDeck deck = parse({}, cli);
  EXPECT_EQ(deck.get("parallel.sharding"), "no_shard");
  EXPECT_EQ(deck.get_int("model.n_layer"), 12);
  EXPECT_FALSE(cli.help);
}

TEST(ConfigDeck, CommandLineOverridesTheDeck) {
  const std::string path = write_deck("a.ini", "[train]\nmicro_batch = 8\nseq_len = 32\n");
  CommandLine cli;
  const ConfigDeck deck = parse({"--config", path, "--train.micro_batch=2"}, cli);
  EXPECT_EQ(deck.get_int("train.micro_batch"), 2);
  EXPECT_EQ(deck.get_int("train.seq_len"), 32);
  EXPECT_EQ(cli.config_path.value(), path);
}

// Job scripts put keys on the command line that a user may give again after them: the last value wins.
TEST(ConfigDeck, AKeyGivenTwice_TakesTheLastValue_OnTheCommandLineAndInADeck) {
  CommandLine cli;
  EXPECT_EQ(parse({"--train.steps=10", "--train.steps=20"}, cli).get_int("train.steps"), 20);
  EXPECT_EQ(parse({"--train.steps", "10", "--train.steps", "30"}, cli).get_int("train.steps"), 30);
  const std::string path = write_deck("twice.ini", "[train]\nsteps = 5\nsteps = 7\n");
  EXPECT_EQ(parse({"--config", path}, cli).get_int("train.steps"), 7);
  EXPECT_EQ(parse({"--config", path, "--train.steps=9"}, cli).get_int("train.steps"), 9);
}

TEST(ConfigDeck, AWordWithoutDashes_IsAnErrorSayingHowToWriteIt) {
  EXPECT_EQ(error_of({"train.steps=10"}),
            "unexpected word 'train.steps=10' on the command line; deck keys take two dashes: --train.steps=10");
  EXPECT_EQ(error_of({"--train.steps=10", "bogus"}),
            "unexpected word 'bogus' on the command line; options start with -- (hsdp-train --help)");
}

TEST(ConfigDeck, AKnownKeyWithOneDash_SaysItTakesTwo) {
  const std::string message = error_of({"-train.steps=3"});
  EXPECT_NE(message.find("deck keys take two dashes, as in --train.steps=VALUE"), std::string::npos) << message;
  EXPECT_EQ(message.find("did you mean"), std::string::npos) << message;
}

TEST(ConfigDeck, UnknownKeyInTheDeckIsNamedWithASuggestion) {
  const std::string path = write_deck("b.ini", "[parallel]\nshardng = full_shard\n");
  const std::string message = error_of({"--config", path});
  EXPECT_NE(message.find("unknown option 'parallel.shardng'"), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean 'parallel.sharding'"), std::string::npos) << message;
  EXPECT_NE(message.find(path), std::string::npos) << message;
}

TEST(ConfigDeck, BadChoiceNamesTheKeyAndTheAllowedValues) {
  const std::string message = error_of({"--parallel.sharding=bogus"});
  EXPECT_EQ(message,
            "parallel.sharding: unknown value 'bogus' (allowed: "
            "no_shard|zero1|shard_grad_op|full_shard|hybrid_shard|hybrid_shard_zero2)");
}

TEST(ConfigDeck, OutOfRangeAndNonNumericValuesAreRejected) {
  EXPECT_NE(error_of({"--train.micro_batch=0"}).find("train.micro_batch: 0 is out of range (allowed: between 1"),
            std::string::npos);
  EXPECT_NE(error_of({"--train.lr=fast"}).find("train.lr: 'fast' is not a number"), std::string::npos);
  EXPECT_NE(error_of({"--train.steps=3.5"}).find("train.steps: '3.5' is not an integer"), std::string::npos);
  EXPECT_NE(error_of({"--train.activation_checkpointing=maybe"}).find("is not a boolean"), std::string::npos);
  // Beyond 32 bits (an int in TrainOptions): refused, not wrapped around (2^32 + 1 kept 1 checkpoint, deleting others).
  EXPECT_NE(error_of({"--checkpoint.keep=4294967297"}).find("checkpoint.keep: 4294967297 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of({"--checkpoint.keep_every=2147483648"}).find("checkpoint.keep_every: 2147483648 is out of range"),
            std::string::npos);
}

TEST(ConfigDeck, MissingDeckFileIsNamed) {
  EXPECT_EQ(error_of({"--config", "input/does-not-exist.ini"}),
            "--config: cannot open deck 'input/does-not-exist.ini' (no such file or not readable)");
}

TEST(ConfigDeck, KeyWithEqualsAndNothingAfterIt_SetsTheEmptyValue) {
  const std::string path = write_deck("c.ini", "[checkpoint]\ndir = runs/x\n");
  CommandLine cli;
  const ConfigDeck deck = parse({"--config", path, "--checkpoint.dir="}, cli);
  EXPECT_EQ(deck.get("checkpoint.dir"), "");
}

TEST(ConfigDeck, AbbreviatedKeysAreNotGuessed) {
  EXPECT_NE(error_of({"--train.micro=4"}).find("unknown option"), std::string::npos);
}

TEST(ConfigDeck, PrintedDeckParsesBackToTheSameValues) {
  CommandLine cli;
  const ConfigDeck deck = parse({"--parallel.sharding=full_shard", "--train.lr=0.001", "--log.dir=/tmp/x y"}, cli);
  const ConfigDeck again = ConfigDeck::from_text(deck.to_ini(), "printed deck");
  for (const auto& spec : option_table()) EXPECT_EQ(again.get(spec.key), deck.get(spec.key)) << spec.key;
}

// Found by the fuzz suite (tests/fuzz): hsdp-train prints a config error as one line.
TEST(ConfigDeck, ErrorsStayOneLine_WhenACommandLineWordHoldsANewline) {
  for (const std::string& word : {std::string("--train.steps=3\n4"), std::string("--train.stps\n=3"),
                                  std::string("train.steps=3\n"), std::string("--parallel.sharding=a\x01b")}) {
    const std::string message = error_of({word});
    EXPECT_FALSE(message.empty()) << word;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.find('\x01'), std::string::npos) << message;
  }
  EXPECT_NE(error_of({"--train.steps=3\n4"}).find("'3\\n4'"), std::string::npos);
}

// Found by the fuzz suite: a value the printed deck cannot hold would come back as another value (or other keys).
TEST(ConfigDeck, ValuesADeckCannotHold_AreRefused_AndSpacesAroundAValueAreDropped) {
  EXPECT_NE(error_of({"--log.dir=runs/a#1"}).find("log.dir: 'runs/a#1' cannot be written in a deck"),
            std::string::npos);
  EXPECT_NE(error_of({"--checkpoint.resume=x\n[model]\nn_layer = 2"}).find("checkpoint.resume: "), std::string::npos);
  CommandLine cli;
  const ConfigDeck deck = parse({"--log.dir= runs/with inner space\t", "--train.steps= 3"}, cli);
  EXPECT_EQ(deck.get("log.dir"), "runs/with inner space");
  EXPECT_EQ(deck.get("train.steps"), "3");
  const ConfigDeck reread = ConfigDeck::from_text(deck.to_ini(), "printed");
  EXPECT_EQ(reread.get("log.dir"), "runs/with inner space");
}

TEST(ConfigDeck, EveryDefaultIsValidAndEveryKeyIsInASection) {
  for (const auto& spec : option_table()) {
    EXPECT_NO_THROW(validate_value(spec, spec.default_value)) << spec.key;
    const std::string section = spec.key.substr(0, spec.key.find('.'));
    EXPECT_NE(std::find(section_order().begin(), section_order().end(), section), section_order().end()) << spec.key;
    EXPECT_FALSE(spec.help.empty()) << spec.key;
  }
}

TEST(ConfigDeck, ShippedDecksParse) {
  for (const char* deck : {"input/quickstart.ini"}) {
    const std::string path = std::string(HSDP_SOURCE_DIR) + "/" + deck;
    std::ifstream file(path);
    if (!file) continue;  // decks arrive with the features that use them
    CommandLine cli;
    EXPECT_NO_THROW(parse({"--config", path}, cli)) << deck;
  }
}

TEST(HelpText, PrintsIntegerLimitsAsIntegers_AndEveryBooleanSpellingItAccepts) {
  const std::string help = help_text("hsdp-train");
  EXPECT_NE(help.find("allowed: between 1 and 1048576"), std::string::npos);
  EXPECT_EQ(help.find("e+0"), std::string::npos) << "a limit printed in scientific notation";
  EXPECT_NE(help.find("allowed: true|false (also yes|no, on|off, 1|0)"), std::string::npos);
  CommandLine cli;
  for (const char* word : {"yes", "on", "1", "TRUE"}) {
    EXPECT_TRUE(parse({std::string("--parallel.prefetch=") + word}, cli).get_bool("parallel.prefetch")) << word;
  }
  EXPECT_NE(error_of({"--parallel.prefetch=maybe"}).find("(allowed: true|false (also yes|no, on|off, 1|0))"),
            std::string::npos);
}

TEST(HelpText, ListsEveryKeyWithItsDefault) {
  const std::string help = help_text("hsdp-train");
  for (const auto& spec : option_table()) {
    EXPECT_NE(help.find("--" + spec.key + " [" + spec.default_value + "]"), std::string::npos) << spec.key;
  }
  EXPECT_NE(help.find("exit codes"), std::string::npos);
}

}  // namespace
}  // namespace hsdp::app
