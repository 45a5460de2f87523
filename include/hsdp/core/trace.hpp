#pragma once
// A timeline in Chrome's trace event format (a JSON array of events; open it in https://ui.perfetto.dev or
// chrome://tracing): one process per rank, one track per queue.
//
//   TraceFile trace("runs/x/trace_rank3.json", 3);
//   trace.span("compute", "backward block 2", begin_s, end_s);   // monotonic seconds
//   trace.instant("step 7", monotonic_seconds());
//
// Thread-safe; the file is a valid JSON array once the object is destroyed (a viewer also reads a cut-off one).
#include <fstream>
#include <map>
#include <mutex>
#include <string>

namespace hsdp {

class TraceFile {
 public:
  // Throws a config error naming the path when it cannot be written.
  TraceFile(const std::string& path, int pid);
  ~TraceFile();
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  void span(const std::string& track, const std::string& name, double begin_s, double end_s);
  void instant(const std::string& name, double at_s);
  void flush();

 private:
  int track_id(const std::string& track);  // under mutex_; names the track on first use
  void event(const std::string& json);     // under mutex_
  std::mutex mutex_;
  std::ofstream out_;
  int pid_;
  bool first_ = true;
  std::map<std::string, int> tracks_;
};

}  // namespace hsdp
