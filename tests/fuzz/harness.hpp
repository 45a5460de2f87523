#pragma once
// What every fuzz harness shares. A harness is `extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t)` (and
// `LLVMFuzzerInitialize`) around one reader of user input; it runs the reader through `run_classified`, which sorts
// the result into accepted, rejected as bad input (an hsdp::Error of kind config, data or checkpoint: exit 2 in the
// programs) or a failure (anything else: another exception type, an internal or comm Error, a broken property, a
// message of several lines), and hands it to `finish`.
//
// The same harness links into two mains: the deterministic driver (driver.cpp, g++, CI), which reads the outcome back
// with `last_outcome` and counts it, and libFuzzer (HSDP_LIBFUZZER, clang), where `finish` aborts on a failure so that
// libFuzzer saves the input.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>

namespace hsdp::fuzz {

enum class Verdict { accepted, rejected, failure };

struct Outcome {
  Verdict verdict = Verdict::accepted;
  std::string category;  // rejected: the Error kind (config, data, checkpoint); failure: what went wrong
  std::string detail;    // the message
};

// A harness's own check of what an accepted input must satisfy (e.g. --print-config reads back as the same deck).
class PropertyViolation : public std::logic_error {
 public:
  PropertyViolation(std::string property, const std::string& message)
      : std::logic_error(message), property_(std::move(property)) {}
  const std::string& property() const { return property_; }

 private:
  std::string property_;
};

// Runs `target` and sorts what it did (see the top of this file).
Outcome run_classified(const std::function<void()>& target);
// The worse of two outcomes (failure > rejected > accepted), for a harness that runs several readers on one input.
Outcome worse(const Outcome& a, const Outcome& b);

// Records `outcome` as this input's result (libFuzzer build: prints it and aborts on a failure) and returns what
// LLVMFuzzerTestOneInput returns: -1 for a rejected input (libFuzzer keeps it out of the corpus), else 0.
int finish(const Outcome& outcome);
const Outcome& last_outcome();

// A private directory for the harness's temporary files, removed at exit.
const std::string& scratch_dir();
// Writes `bytes` to `path` (replacing it).
void write_file(const std::string& path, std::span<const std::uint8_t> bytes);

}  // namespace hsdp::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv);
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
