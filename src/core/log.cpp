#include "hsdp/core/log.hpp"

#include <unistd.h>

#include <array>

namespace hsdp {

Logger::Logger(int rank, std::string host, std::ostream& out, std::ostream& err)
    : rank_(rank), host_(std::move(host)), out_(out), err_(err) {}

void Logger::write(std::ostream& stream, const std::string& lead, const std::string& text) {
  // One write per line so lines from concurrent ranks do not interleave mid-line.
  std::string line = lead + text;
  if (line.empty() || line.back() != '\n') line += '\n';
  stream << line << std::flush;
}

std::string host_name() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "unknown-host";
  return std::string(name.data());
}

}  // namespace hsdp
