// The deterministic fuzz driver (CI): runs a harness's LLVMFuzzerTestOneInput on its seed inputs, then on N mutants
// of them generated from a fixed seed, and prints the counts by category as one JSON line.
//
//   fuzz_<harness> [--runs N] [--seed S] [--time-limit-s T] [--max-size BYTES] [--dict FILE]... [--artifacts DIR]
//                  [--only I[,J...]] [--replay] [--print-failures N (10)] [--verbose] [--save-inputs] SEED_FILE_OR_DIR...
//
// Exit 0 when every seed is accepted unmutated, no input is a failure (see harness.hpp), none takes longer than the
// time limit, and the seed files are byte-identical afterwards. A failure prints its input number, its mutations and
// the input itself (C-escaped up to 2 KiB; always saved as DIR/<harness>-failure-<I>); `--only I` runs input I alone (I,J,...: those in order)
// (the same bytes: input I depends only on the seed, I and the seed files), `--replay` runs the files given as they
// are. A crash or a hang (SIGALRM after the time limit) saves the input, says so on stderr and ends the process (by
// the signal, or exit 124 for a hang).
#include <fcntl.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "harness.hpp"
#include "mutator.hpp"

namespace fs = std::filesystem;
using hsdp::fuzz::Bytes;
using hsdp::fuzz::Verdict;

namespace {

struct Options {
  std::string harness = "fuzz";
  std::size_t runs = 300;
  std::uint64_t seed = 1;
  double time_limit_s = 10;
  std::size_t max_size = 1 << 22;
  std::vector<std::string> dictionaries;
  std::string artifacts = ".";
  std::vector<std::size_t> only;  // input numbers to run (all when empty)
  bool replay = false;
  std::size_t print_failures = 10;
  bool verbose = false;  // one line per input: its verdict and message
  bool save_inputs = false;  // every input to DIR/<harness>-input-<I> (to replay a sequence)
  std::vector<std::string> inputs;
};

// What the crash and hang handlers need to save the input being run: signal handlers can reach only this.
struct InFlight {
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
  char artifact[4096] = {};
  char what[512] = {};
};
InFlight g_in_flight;  // NOLINT: the one namespace-scope mutable, for the signal handlers

void write_all(int fd, const char* text, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, text, n);
    if (w <= 0) return;
    text += w;
    n -= static_cast<std::size_t>(w);
  }
}
void write_text(int fd, const char* text) { write_all(fd, text, std::strlen(text)); }

void save_in_flight() {
  const int fd = ::open(g_in_flight.artifact, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    write_all(fd, reinterpret_cast<const char*>(g_in_flight.data), g_in_flight.size);
    ::close(fd);
  }
}

void on_crash(int signal) {
  save_in_flight();
  write_text(2, "hsdp fuzz: CRASH (");
  write_text(2, ::strsignal(signal));
  write_text(2, ") on ");
  write_text(2, g_in_flight.what);
  write_text(2, "; input saved as ");
  write_text(2, g_in_flight.artifact);
  write_text(2, "\n");
  ::raise(signal);  // SA_RESETHAND: the default action now, so the process ends by this signal
}

void on_hang(int) {
  save_in_flight();
  write_text(2, "hsdp fuzz: HANG (over the time limit) on ");
  write_text(2, g_in_flight.what);
  write_text(2, "; input saved as ");
  write_text(2, g_in_flight.artifact);
  write_text(2, "\n");
  ::_exit(124);
}

void install_handlers() {
  static std::vector<char> stack(1 << 16);
  stack_t alt{};
  alt.ss_sp = stack.data();
  alt.ss_size = stack.size();
  ::sigaltstack(&alt, nullptr);
  struct sigaction crash {};
  crash.sa_handler = on_crash;
  crash.sa_flags = SA_RESETHAND | SA_ONSTACK;
  for (const int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::sigaction(s, &crash, nullptr);
  struct sigaction hang {};
  hang.sa_handler = on_hang;
  ::sigaction(SIGALRM, &hang, nullptr);
}

void arm_timer(double seconds) {
  itimerval t{};
  t.it_value.tv_sec = static_cast<time_t>(seconds);
  t.it_value.tv_usec = static_cast<suseconds_t>((seconds - static_cast<double>(t.it_value.tv_sec)) * 1e6);
  ::setitimer(ITIMER_REAL, &t, nullptr);
}

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + path + "'");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The input files: files as given, directories by their files in name order.
std::vector<std::string> list_inputs(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& p : paths) {
    if (!fs::is_directory(p)) {
      files.push_back(p);
      continue;
    }
    std::vector<std::string> in_dir;
    for (const auto& entry : fs::directory_iterator(p)) {
      if (entry.is_regular_file()) in_dir.push_back(entry.path().string());
    }
    std::sort(in_dir.begin(), in_dir.end());
    files.insert(files.end(), in_dir.begin(), in_dir.end());
  }
  if (files.empty()) throw std::runtime_error("no seed inputs given");
  return files;
}

std::string escaped(const Bytes& b) {
  std::string out;
  for (const std::uint8_t c : b) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

std::string json_counts(const std::map<std::string, std::size_t>& counts) {
  std::string out = "{";
  for (const auto& [name, n] : counts) out += (out.size() > 1 ? "," : "") + json_string(name) + ":" + std::to_string(n);
  return out + "}";
}

Options parse_options(int argc, char** argv) {
  Options o;
  o.harness = fs::path(argv[0]).filename().string();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--runs") o.runs = std::stoul(value());
    else if (a == "--seed") o.seed = std::stoull(value());
    else if (a == "--time-limit-s") o.time_limit_s = std::stod(value());
    else if (a == "--max-size") o.max_size = std::stoul(value());
    else if (a == "--dict") o.dictionaries.push_back(value());
    else if (a == "--artifacts") o.artifacts = value();
    else if (a == "--only") {
      std::stringstream list(value());
      for (std::string n; std::getline(list, n, ',');) o.only.push_back(std::stoul(n));
    }
    else if (a == "--replay") o.replay = true;
    else if (a == "--verbose") o.verbose = true;
    else if (a == "--save-inputs") o.save_inputs = true;
    else if (a == "--print-failures") o.print_failures = std::stoul(value());
    else if (a.rfind("--", 0) == 0) throw std::runtime_error("unknown option " + a);
    else o.inputs.push_back(a);
  }
  return o;
}

struct Tally {
  std::size_t inputs = 0;
  std::size_t accepted = 0;
  std::size_t rejected = 0;
  std::size_t failures = 0;
  std::map<std::string, std::size_t> rejected_by_kind;
  std::map<std::string, std::size_t> failures_by_category;
  double slowest_ms = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string> files;
  std::vector<Bytes> seeds;
  hsdp::fuzz::Dictionary dictionary;
  try {
    o = parse_options(argc, argv);
    files = list_inputs(o.inputs);
    for (const auto& f : files) seeds.push_back(read_bytes(f));
    for (const auto& d : o.dictionaries) {
      const auto loaded = hsdp::fuzz::Dictionary::load(d);
      dictionary.tokens.insert(dictionary.tokens.end(), loaded.tokens.begin(), loaded.tokens.end());
    }
  } catch (const std::exception& e) {
    std::cerr << "fuzz driver: " << e.what() << "\n";
    return 2;
  }
  LLVMFuzzerInitialize(&argc, &argv);
  install_handlers();
  fs::create_directories(o.artifacts);

  Tally tally;
  std::size_t printed = 0;
  const auto started = std::chrono::steady_clock::now();
  // Runs one input; `name` says which (for messages), `expect_accepted` for the unmutated seeds.
  const auto run = [&](const Bytes& input, const std::string& name, const std::string& artifact, bool expect_accepted) {
    g_in_flight.data = input.data();
    g_in_flight.size = input.size();
    std::snprintf(g_in_flight.artifact, sizeof g_in_flight.artifact, "%s", artifact.c_str());
    std::snprintf(g_in_flight.what, sizeof g_in_flight.what, "%s", name.c_str());
    const auto t0 = std::chrono::steady_clock::now();
    arm_timer(o.time_limit_s);
    LLVMFuzzerTestOneInput(input.data(), input.size());
    arm_timer(0);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    tally.slowest_ms = std::max(tally.slowest_ms, ms);
    hsdp::fuzz::Outcome outcome = hsdp::fuzz::last_outcome();
    if (ms > o.time_limit_s * 1000) outcome = {Verdict::failure, "slow", std::to_string(ms) + " ms"};
    if (expect_accepted && outcome.verdict != Verdict::accepted) {
      outcome = {Verdict::failure, "seed_not_accepted", outcome.category + ": " + outcome.detail};
    }
    ++tally.inputs;
    if (o.verbose) {
      static constexpr const char* kVerdicts[] = {"accepted", "rejected", "failure"};
      std::cerr << kVerdicts[static_cast<int>(outcome.verdict)] << " " << name << ": " << outcome.category << ": "
                << escaped({outcome.detail.begin(), outcome.detail.end()}) << "\n";
    }
    if (outcome.verdict == Verdict::accepted) ++tally.accepted;
    if (outcome.verdict == Verdict::rejected) {
      ++tally.rejected;
      ++tally.rejected_by_kind[outcome.category];
    }
    if (outcome.verdict != Verdict::failure) return;
    ++tally.failures;
    ++tally.failures_by_category[outcome.category];
    std::ofstream(artifact, std::ios::binary).write(reinterpret_cast<const char*>(input.data()),
                                                    static_cast<std::streamsize>(input.size()));
    if (printed++ >= o.print_failures) return;
    std::cerr << "FAILURE " << name << ": " << outcome.category << ": " << outcome.detail << "\n  input ("
              << input.size() << " bytes, saved as " << artifact << ")";
    if (input.size() <= 2048) std::cerr << ": \"" << escaped(input) << "\"";
    std::cerr << "\n";
  };

  const std::string prefix = o.artifacts + "/" + o.harness + "-failure-";
  if (o.replay) {
    for (std::size_t s = 0; s < seeds.size(); ++s) run(seeds[s], "file " + files[s], prefix + "replay", false);
  } else {
    if (o.only.empty()) {
      for (std::size_t s = 0; s < seeds.size(); ++s) run(seeds[s], "seed " + files[s], prefix + "seed", true);
    }
    for (std::size_t i = 0; i < o.runs; ++i) {
      if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), i) == o.only.end()) continue;
      hsdp::fuzz::Rng rng(o.seed * 0x9e3779b97f4a7c15ULL + i);
      const std::size_t s = i % seeds.size();
      const hsdp::fuzz::Mutant m = hsdp::fuzz::mutate(seeds[s], seeds, dictionary, o.max_size, rng);
      if (o.save_inputs) {
        std::ofstream(o.artifacts + "/" + o.harness + "-input-" + std::to_string(i), std::ios::binary)
            .write(reinterpret_cast<const char*>(m.bytes.data()), static_cast<std::streamsize>(m.bytes.size()));
      }
      run(m.bytes, "input " + std::to_string(i) + " (seed " + fs::path(files[s]).filename().string() + "; " + m.recipe +
                       "; reproduce: --seed " + std::to_string(o.seed) + " --only " + std::to_string(i) + ")",
          prefix + std::to_string(i), false);
    }
  }
  // The seeds are only ever read: a harness that wrote to them would damage the user's files too.
  for (std::size_t s = 0; s < seeds.size(); ++s) {
    if (read_bytes(files[s]) != seeds[s]) {
      ++tally.failures;
      ++tally.failures_by_category["seed_file_changed"];
      std::cerr << "FAILURE: the seed file " << files[s] << " changed during the run\n";
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::ostringstream json;
  json << "{\"harness\":" << json_string(o.harness) << ",\"seed\":" << o.seed << ",\"seeds\":" << seeds.size()
       << ",\"inputs\":" << tally.inputs << ",\"accepted\":" << tally.accepted << ",\"rejected\":" << tally.rejected
       << ",\"rejected_by_kind\":" << json_counts(tally.rejected_by_kind) << ",\"failures\":" << tally.failures
       << ",\"failures_by_category\":" << json_counts(tally.failures_by_category) << ",\"crashes\":0,\"hangs\":0"
       << ",\"slowest_ms\":" << static_cast<long long>(tally.slowest_ms) << ",\"seconds\":" << seconds << "}";
  std::cout << json.str() << std::endl;
  return tally.failures == 0 ? 0 : 1;
}
