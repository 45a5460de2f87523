#include "hsdp/core/trace.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>

#include "hsdp/core/error.hpp"
#include "hsdp/core/json.hpp"

namespace hsdp {

namespace {
std::int64_t microseconds(double seconds) { return std::llround(seconds * 1e6); }
}  // namespace

TraceFile::TraceFile(const std::string& path, int pid) : path_(path), pid_(pid) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  // Writable, checked without changing what is there: the file is written from start() on, once the run is under way
  // (a run refused at start-up, e.g. for another run's log.dir, leaves that folder as it was).
  const bool existed = std::filesystem::exists(path, ec);
  if (!std::ofstream(path, std::ios::app)) throw_config("log.trace: cannot write " + path);
  if (!existed) std::filesystem::remove(path, ec);
}

TraceFile::~TraceFile() {
  const std::lock_guard lock(mutex_);
  if (started_) out_ << "\n]\n";  // never started: nothing written
}

void TraceFile::start() {
  const std::lock_guard lock(mutex_);
  if (!started_) begin();
}

// Like every later write, a failure here is not raised (the constructor checked the path): the trace is a diagnosis.
void TraceFile::begin() {
  out_.open(path_, std::ios::trunc);
  out_ << "[";
  started_ = true;
  for (const std::string& json : pending_) write(json);
  pending_.clear();
}

int TraceFile::track_id(const std::string& track) {
  const auto found = tracks_.find(track);
  if (found != tracks_.end()) return found->second;
  const int id = static_cast<int>(tracks_.size()) + 1;
  tracks_.emplace(track, id);
  event(JsonLine()
            .add("name", "thread_name")
            .add("ph", "M")
            .add("pid", pid_)
            .add("tid", id)
            .add_raw("args", JsonLine().add("name", track).str())
            .str());
  return id;
}

void TraceFile::event(const std::string& json) {
  if (started_) {
    write(json);
  } else {
    pending_.push_back(json);
  }
}

void TraceFile::write(const std::string& json) {
  out_ << (first_ ? "\n" : ",\n") << json;
  first_ = false;
}

void TraceFile::span(const std::string& track, const std::string& name, double begin_s, double end_s) {
  const std::lock_guard lock(mutex_);
  const int tid = track_id(track);
  const std::int64_t ts = microseconds(begin_s);
  event(JsonLine()
            .add("name", name)
            .add("ph", "X")
            .add("pid", pid_)
            .add("tid", tid)
            .add("ts", ts)
            .add("dur", std::max<std::int64_t>(0, microseconds(end_s) - ts))
            .str());
}

void TraceFile::instant(const std::string& name, double at_s) {
  const std::lock_guard lock(mutex_);
  event(JsonLine()
            .add("name", name)
            .add("ph", "i")
            .add("s", "p")
            .add("pid", pid_)
            .add("tid", 0)
            .add("ts", microseconds(at_s))
            .str());
}

void TraceFile::flush() {
  const std::lock_guard lock(mutex_);
  if (started_) out_.flush();
}

}  // namespace hsdp
