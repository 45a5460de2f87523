#include "hsdp/core/fault.hpp"

#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>

#include "hsdp/core/error.hpp"

namespace hsdp {

namespace {

// The action of one HSDP_FAULT entry, if it names this point and rank ("" if none does).
std::string action_for(std::string_view spec, std::string_view point, int world_rank) {
  while (!spec.empty()) {
    const std::size_t comma = spec.find(',');
    const std::string_view entry = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    const std::size_t colon = entry.find(':');
    const std::size_t at = entry.rfind('@');
    if (colon == std::string_view::npos || at == std::string_view::npos || at < colon) continue;
    const std::string_view rank = entry.substr(at + 1);
    if (entry.substr(colon + 1, at - colon - 1) != point) continue;
    if (rank != "all" && rank != std::to_string(world_rank)) continue;
    return std::string(entry.substr(0, colon));
  }
  return "";
}

}  // namespace

std::string fault_action(std::string_view point, int world_rank) {
  const char* spec = std::getenv("HSDP_FAULT");
  if (spec == nullptr || *spec == '\0') return "";
  return action_for(spec, point, world_rank);
}

void fault_point(std::string_view point, int world_rank) {
  const char* spec = std::getenv("HSDP_FAULT");
  if (spec == nullptr || *spec == '\0') return;
  const std::string action = action_for(spec, point, world_rank);
  if (action.empty()) return;
  if (action == "fail") {
    throw Error(ErrorKind::data, "injected fault at '" + std::string(point) + "' on rank " +
                                     std::to_string(world_rank) + " (HSDP_FAULT)");
  }
  if (action == "stop") {
    std::raise(SIGSTOP);
    return;
  }
  if (action.rfind("sleep=", 0) == 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(std::strtod(action.c_str() + 6, nullptr)));
    return;
  }
  throw_internal("HSDP_FAULT: unknown action '" + action + "' (fail, stop, sleep=<seconds>)");
}

}  // namespace hsdp
