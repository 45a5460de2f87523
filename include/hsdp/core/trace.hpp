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
#include <vector>

namespace hsdp {

class TraceFile {
 public:
  // Throws a config error naming the path when it cannot be written. The file is written from start() (the run's
  // first step) on, the events before it first: a TraceFile never started writes nothing and leaves a file there as
  // it was.
  TraceFile(const std::string& path, int pid);
  ~TraceFile();
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  void span(const std::string& track, const std::string& name, double begin_s, double end_s);
  void instant(const std::string& name, double at_s);
  void flush();
  // Replaces the file with the events so far; later events go straight to it. Idempotent.
  void start();

 private:
  int track_id(const std::string& track);  // under mutex_; names the track on first use
  void event(const std::string& json);     // under mutex_
  void begin();                            // under mutex_: the file replaced, the array begun, pending_ written
  void write(const std::string& json);     // under mutex_, started
  std::mutex mutex_;
  std::string path_;
  std::ofstream out_;  // opened by begin()
  bool started_ = false;
  std::vector<std::string> pending_;  // the events before start()
  int pid_;
  bool first_ = true;
  std::map<std::string, int> tracks_;
};

}  // namespace hsdp
