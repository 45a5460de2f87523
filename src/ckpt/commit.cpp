#include "hsdp/ckpt/commit.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "hsdp/core/error.hpp"
#include "hsdp/core/files.hpp"

namespace hsdp::ckpt {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void fail_errno(const std::string& what, const std::string& path) {
  throw Error(ErrorKind::checkpoint, what + " '" + path + "': " + std::strerror(errno));
}

// Closes a file descriptor on scope exit.
class Descriptor {
 public:
  Descriptor(const std::string& path, int flags) : fd_(::open(path.c_str(), flags | O_CLOEXEC, 0644)) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::optional<std::int64_t> parse_step(const std::string& name, const std::string& suffix) {
  constexpr std::string_view kPrefix = "step_";
  if (!name.starts_with(kPrefix) || !name.ends_with(suffix)) return std::nullopt;
  const std::string_view digits(name.data() + kPrefix.size(), name.size() - kPrefix.size() - suffix.size());
  if (digits.empty()) return std::nullopt;
  std::int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size() || step < 0) return std::nullopt;
  return step;
}

std::string parent_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace

void fsync_file(const std::string& path) {
  Descriptor fd(path, O_RDONLY);
  if (fd.get() < 0) fail_errno("cannot open", path);
  if (::fsync(fd.get()) != 0) fail_errno("cannot fsync", path);
}

void fsync_directory(const std::string& dir) {
  if (std::string reason; !try_fsync_directory(dir, &reason)) throw Error(ErrorKind::checkpoint, reason);
}

void durable_rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) fail_errno("cannot rename '" + from + "' to", to);
  fsync_directory(parent_of(to));
}

void write_latest(const std::string& dir, const std::string& file_name) {
  if (std::string reason; !try_write_file_atomically(fs::path(dir) / "latest", file_name + "\n", &reason)) {
    throw Error(ErrorKind::checkpoint, reason);
  }
}

std::optional<std::string> read_latest(const std::string& dir) {
  const fs::path path = fs::path(dir) / "latest";
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  std::ifstream in(path);
  std::string name;
  if (!in || !std::getline(in, name)) {
    throw Error(ErrorKind::checkpoint, "cannot read '" + path.string() + "' (it should name a checkpoint file)");
  }
  while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.pop_back();
  if (name.empty()) throw Error(ErrorKind::checkpoint, "'" + path.string() + "' is empty");
  return name;
}

std::optional<std::int64_t> step_of_file_name(const std::string& file_name) {
  return parse_step(file_name, ".h5");
}

std::vector<std::int64_t> list_checkpoint_steps(const std::string& dir) {
  std::vector<std::int64_t> steps;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    if (const auto step = step_of_file_name(entry.path().filename().string())) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<std::int64_t> steps_to_delete(const std::vector<std::int64_t>& steps, std::int64_t latest_step, int keep,
                                          int keep_every) {
  std::vector<std::int64_t> sorted;
  for (const std::int64_t s : steps) {
    if (s <= latest_step) sorted.push_back(s);  // a higher step is another run's: not ours to delete or count
  }
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  if (keep <= 0) return {};
  std::set<std::int64_t> kept(sorted.end() - std::min<std::ptrdiff_t>(keep, std::ssize(sorted)), sorted.end());
  kept.insert(latest_step);
  std::vector<std::int64_t> drop;
  for (const std::int64_t s : sorted) {
    const bool milestone = keep_every > 0 && s % keep_every == 0;
    if (!milestone && !kept.contains(s)) drop.push_back(s);
  }
  return drop;
}

std::vector<std::string> apply_retention(const std::string& dir, std::int64_t latest_step, int keep, int keep_every) {
  std::vector<std::string> deleted;
  for (const std::int64_t step : steps_to_delete(list_checkpoint_steps(dir), latest_step, keep, keep_every)) {
    const fs::path path = fs::path(dir) / ("step_" + std::to_string(step) + ".h5");
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) fail_errno("cannot delete old checkpoint", path.string());
    deleted.push_back(path.string());
  }
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (parse_step(name, ".h5.tmp")) {
      if (::unlink(entry.path().c_str()) == 0) deleted.push_back(entry.path().string());
    }
  }
  if (!deleted.empty()) fsync_directory(dir);
  return deleted;
}

std::vector<std::string> remove_checkpoints(const std::string& dir) {
  std::vector<std::string> deleted;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "latest" || name == "latest.tmp" || parse_step(name, ".h5") || parse_step(name, ".h5.tmp")) {
      if (::unlink(entry.path().c_str()) != 0 && errno != ENOENT) fail_errno("cannot delete", entry.path().string());
      deleted.push_back(entry.path().string());
    }
  }
  if (!deleted.empty()) fsync_directory(dir);
  return deleted;
}

}  // namespace hsdp::ckpt
