#include "harness.hpp"

#include <cxxabi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <typeinfo>

#include "hsdp/core/error.hpp"

namespace hsdp::fuzz {
namespace {

std::string type_name(const std::type_info& type) {
  int status = 0;
  const std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status),
                                                     std::free);
  return status == 0 && name ? name.get() : type.name();
}

int rank_of(Verdict v) {
  return v == Verdict::failure ? 2 : v == Verdict::rejected ? 1 : 0;
}

Outcome& recorded() {
  static Outcome outcome;
  return outcome;
}

}  // namespace

Outcome run_classified(const std::function<void()>& target) {
  try {
    target();
    return {Verdict::accepted, "", ""};
  } catch (const Error& e) {
    const std::string kind(to_string(e.kind()));
    if (e.exit_code() != kExitBadInput) return {Verdict::failure, kind + "_error", e.what()};
    // The programs print the message as their one line on stderr.
    const std::string message = e.what();
    if (message.empty()) return {Verdict::failure, "empty_message", kind + " error without a message"};
    if (message.find('\n') != std::string::npos) return {Verdict::failure, "multiline_message", message};
    return {Verdict::rejected, kind, message};
  } catch (const PropertyViolation& e) {
    return {Verdict::failure, "property:" + e.property(), e.what()};
  } catch (const std::bad_alloc& e) {
    return {Verdict::failure, "bad_alloc", e.what()};
  } catch (const std::exception& e) {
    return {Verdict::failure, "exception:" + type_name(typeid(e)), e.what()};
  } catch (...) {
    return {Verdict::failure, "unknown_exception", "an exception that is not a std::exception"};
  }
}

Outcome worse(const Outcome& a, const Outcome& b) {
  return rank_of(b.verdict) > rank_of(a.verdict) ? b : a;
}

int finish(const Outcome& outcome) {
  recorded() = outcome;
#ifdef HSDP_FUZZ_ABORT_ON_FAILURE
  if (outcome.verdict == Verdict::failure) {
    std::fprintf(stderr, "hsdp fuzz failure: %s: %s\n", outcome.category.c_str(), outcome.detail.c_str());
    std::abort();
  }
#endif
  return outcome.verdict == Verdict::rejected ? -1 : 0;
}

const Outcome& last_outcome() {
  return recorded();
}

const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/hsdp_fuzz.XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::perror("hsdp fuzz: mkdtemp");
      std::exit(1);
    }
    static const std::string made = pattern;
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(made, ignored);
    });
    return pattern;
  }();
  return dir;
}

void write_file(const std::string& path, std::span<const std::uint8_t> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::perror(("hsdp fuzz: writing " + path).c_str());
    std::exit(1);
  }
}

}  // namespace hsdp::fuzz
