#include "hsdp/train/metrics.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>
#include <vector>

#include "hsdp/core/error.hpp"
#include "hsdp/core/files.hpp"
#include "hsdp/core/json.hpp"

namespace hsdp::train {

std::string utc_timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[96];  // room for any int the compiler cannot rule out
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(millis));
  return text;
}

std::string memory_json(const MemoryAccountant& memory) {
  JsonLine j;
  for (const MemCategory c : kAllMemCategories) j.add(to_string(c), memory.current(c));
  j.add("total", memory.current_total());
  j.add("peak_total", memory.peak_total());
  return j.str();
}

std::string to_json(const StepMetrics& m, const MemoryAccountant& memory) {
  JsonLine j;
  j.add("step", m.step).add("time", utc_timestamp()).add("loss", m.loss).add("lr", m.lr).add("grad_norm", m.grad_norm).add("tokens", m.tokens);
  char data[17];
  std::snprintf(data, sizeof data, "%016llx", static_cast<unsigned long long>(m.data));
  j.add("data", std::string(data)).add("world_size", m.world_size).add("strategy", m.strategy);
  j.add("tokens_per_s", m.tokens_per_s).add("step_ms", m.step_ms).add("comm_ms", m.comm_ms);
  j.add("exposed_comm_ms", m.exposed_comm_ms);
  if (m.mfu >= 0) j.add("mfu", m.mfu);
  if (m.skipped) j.add("skipped", true);
  j.add("bytes_intra", m.bytes.intra).add("bytes_inter", m.bytes.inter);
  j.add("bytes_intra_max_rank", m.bytes_max_rank.intra).add("bytes_inter_max_rank", m.bytes_max_rank.inter);
  if (m.val_loss >= 0) j.add("val_loss", m.val_loss);
  if (!m.island_losses.empty()) {
    std::string losses;
    for (const double l : m.island_losses) losses += (losses.empty() ? "" : ",") + JsonLine::number(l);
    j.add_raw("island_losses", "[" + losses + "]");
    j.add("outer_fragment", m.outer_fragment).add("outer_applied", m.outer_applied).add("outer_bytes", m.outer_bytes);
    j.add("outer_exposed_ms", m.outer_exposed_ms);
  }
  j.add_raw("memory", memory_json(memory));
  return j.str();
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0)) return "?";
  const auto total = static_cast<long long>(seconds + 0.5);
  char text[32];
  if (total >= 3600) {
    std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", total / 3600, total / 60 % 60, total % 60);
  } else {
    std::snprintf(text, sizeof text, "%lld:%02lld", total / 60, total % 60);
  }
  return text;
}

namespace {
std::string mib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return text;
}
}  // namespace

std::string progress_line(const StepMetrics& m, std::int64_t total_steps, const MemoryAccountant& memory,
                          double eta_s) {
  char text[352];
  char mfu[24] = "";
  if (m.mfu >= 0) std::snprintf(mfu, sizeof mfu, " (MFU %.3f)", m.mfu);
  std::snprintf(text, sizeof text,
                "step %lld/%lld | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s%s | %.1f ms (comm %.1f, exposed %.1f) | mem %s | "
                "all ranks intra %s inter %s | ETA %s",
                static_cast<long long>(m.step), static_cast<long long>(total_steps), m.loss, m.lr, m.grad_norm,
                m.tokens_per_s, mfu, m.step_ms, m.comm_ms, m.exposed_comm_ms, mib(static_cast<double>(memory.current_total())).c_str(),
                mib(static_cast<double>(m.bytes.intra)).c_str(), mib(static_cast<double>(m.bytes.inter)).c_str(),
                format_duration(eta_s).c_str());
  return text;
}

MetricsLog::MetricsLog(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_config("log.dir: cannot create '" + dir + "': " + ec.message());
}

void MetricsLog::keep_through_step(std::int64_t step) {
  const std::string path = dir_ + "/metrics.jsonl";
  std::vector<std::string> kept;
  std::error_code ec;
  if (step > 0 && std::filesystem::exists(path, ec)) {
    // A record that exists but cannot be read whole is not cut (that would write the unread part away).
    require_regular_input(path, "log.dir", ErrorKind::config);
    std::ifstream old(path);
    const std::string key = "{\"step\":";
    for (std::string line; old && std::getline(old, line);) {
      if (line.rfind(key, 0) == 0 && std::strtoll(line.c_str() + key.size(), nullptr, 10) <= step) kept.push_back(line);
    }
    if (!old.is_open() || old.bad()) {
      throw_config("log.dir: cannot read '" + path + "' to cut it back to step " + std::to_string(step) +
                   ": it is left as it was");
    }
  }
  // The kept lines go to a new file renamed over the old one: a job killed or a disk full in between leaves the
  // earlier record whole (it was truncated, then rewritten in place).
  std::string bytes;
  for (const auto& line : kept) bytes += line + '\n';
  if (std::string reason; !try_write_file_atomically(path, bytes, &reason)) {
    throw_config("log.dir: cannot cut '" + path + "' back to step " + std::to_string(step) + " (" + reason + ")");
  }
  file_.open(path, std::ios::app);
  if (!file_) throw_config("log.dir: cannot write '" + path + "'");
}

bool MetricsLog::write(const std::string& json_line) {
  if (!failure_.empty()) return false;
  errno = 0;
  file_ << json_line << '\n' << std::flush;
  if (file_) return false;
  failure_ = "log.dir: cannot write '" + dir_ + "/metrics.jsonl'" +
             (errno != 0 ? std::string(": ") + std::strerror(errno) : std::string());
  return true;
}

}  // namespace hsdp::train
