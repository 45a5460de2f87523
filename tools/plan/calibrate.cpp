#include "plan/calibrate.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "hsdp/core/error.hpp"
#include "plan/cost.hpp"

namespace hsdp::plan {
namespace {

// One flat JSON object ({"key": "text" | number | true | false, ...}), as hsdp's JsonLine writes them. Values are
// kept as their text; nested objects and arrays are not part of commbench's lines and are refused.
class FlatObject {
 public:
  static std::optional<FlatObject> parse(const std::string& line) {
    FlatObject o;
    std::size_t i = 0;
    const auto skip = [&] {
      while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    };
    const auto string_at = [&](std::string& out) {
      if (i >= line.size() || line[i] != '"') return false;
      for (++i; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\' && i + 1 < line.size()) ++i;
        out += line[i];
      }
      if (i >= line.size()) return false;
      ++i;
      return true;
    };
    skip();
    if (i >= line.size() || line[i] != '{') return std::nullopt;
    ++i;
    skip();
    if (i < line.size() && line[i] == '}') return o;
    while (true) {
      skip();
      std::string key, value;
      if (!string_at(key)) return std::nullopt;
      skip();
      if (i >= line.size() || line[i] != ':') return std::nullopt;
      ++i;
      skip();
      if (i < line.size() && line[i] == '"') {
        if (!string_at(value)) return std::nullopt;
      } else {
        while (i < line.size() && line[i] != ',' && line[i] != '}' &&
               !std::isspace(static_cast<unsigned char>(line[i]))) {
          value += line[i++];
        }
        if (value.empty() || value.front() == '{' || value.front() == '[') return std::nullopt;
      }
      o.values_[key] = value;
      skip();
      if (i < line.size() && line[i] == ',') {
        ++i;
        continue;
      }
      if (i < line.size() && line[i] == '}') return o;
      return std::nullopt;
    }
  }
  const std::string* get(const std::string& key) const {
    const auto it = values_.find(key);
    return it == values_.end() ? nullptr : &it->second;
  }
  std::optional<double> number(const std::string& key) const {
    const std::string* text = get(key);
    if (text == nullptr) return std::nullopt;
    char* end = nullptr;
    const double x = std::strtod(text->c_str(), &end);
    if (end == text->c_str() || *end != '\0') return std::nullopt;
    return x;
  }

 private:
  std::map<std::string, std::string> values_;
};

struct Sample {
  std::string collective;
  double ranks, bytes, time_us, busbw;
};

double ring_messages(const std::string& collective, double n) {
  return collective == "all_reduce" ? 2 * (n - 1) : n - 1;
}

std::string fmt(double x) {
  std::ostringstream s;
  s.precision(4);
  s << x;
  return s.str();
}

std::string size_text(double bytes) {
  return std::to_string(static_cast<unsigned long long>(bytes)) + " B";
}

// Per collective: its sample at its own largest and its own smallest size (sizes that do not split over the group
// are rounded down by commbench, so collectives may differ); then the mean over collectives.
std::optional<LinkCalibration> derive(const std::vector<Sample>& samples, const std::string& group) {
  std::map<std::string, std::pair<const Sample*, const Sample*>> extremes;  // collective -> (smallest, largest)
  for (const Sample& s : samples) {
    auto [it, inserted] = extremes.try_emplace(s.collective, &s, &s);
    if (s.bytes < it->second.first->bytes) it->second.first = &s;
    if (s.bytes > it->second.second->bytes) it->second.second = &s;
  }
  if (extremes.empty()) return std::nullopt;
  double bw = 0, alpha = 0;
  std::string how_bw, how_alpha;
  for (const auto& [collective, ends] : extremes) {
    const Sample& small = *ends.first;
    const Sample& large = *ends.second;
    bw += large.busbw;
    how_bw += (how_bw.empty() ? "" : ", ") + collective + " " + fmt(large.busbw) + " at " + size_text(large.bytes);
    const double messages = ring_messages(collective, small.ranks);
    alpha += messages > 0 ? small.time_us / messages : 0;
    how_alpha += (how_alpha.empty() ? "" : ", ") + collective + " " + fmt(small.time_us) + " us / " + fmt(messages) +
                 " at " + size_text(small.bytes);
  }
  const auto count = static_cast<double>(extremes.size());
  LinkCalibration c;
  c.gbps = bw / count;
  c.latency_us = alpha / count;
  // The bandwidth by size: each sample's busbw with its messages' latency taken out (busbw t / (t - alpha m)),
  // where that latency is under half its time, and not at the smallest size (the latency's own measurement); the
  // mean over the collectives measured at the size.
  std::map<double, std::pair<double, int>> sized;  // bytes -> (sum, samples)
  for (const Sample& s : samples) {
    const double latency = c.latency_us * ring_messages(s.collective, s.ranks);
    if (&s == extremes[s.collective].first || s.time_us <= 2 * latency) continue;
    auto& [sum, n] = sized[s.bytes];
    sum += s.busbw * s.time_us / (s.time_us - latency);
    n += 1;
  }
  std::string how_sized;
  for (const auto& [bytes, mean] : sized) {
    c.by_size.push_back({bytes, mean.first / mean.second});
    how_sized += (how_sized.empty() ? "" : ", ") + fmt(c.by_size.back().gbps) + " at " + size_text(bytes);
  }
  c.how = group + " (" + fmt(samples.front().ranks) + " ranks): bandwidth " + fmt(c.gbps) +
          " GB/s = mean busbw at the largest size (" + how_bw + "); latency " + fmt(c.latency_us) +
          " us = mean time per message at the smallest size (" + how_alpha + "); by size, the latency taken out, " +
          "GB/s (what a collective of that size gets; interpolated in log size between them): " + how_sized;
  return c;
}

}  // namespace

namespace {

// One bench=train_cpu|train_gpu line: hsdp-plan's FLOPs of its step over its mean step time.
double train_line_tflops(const FlatObject& o, const std::string& where, std::string& how) {
  const auto params = o.number("params"), layers = o.number("n_layer"), width = o.number("n_embd"),
             batch = o.number("batch"), seq = o.number("seq_len"), step_ms = o.number("step_ms");
  if (!params || !layers || !width || !batch || !seq || !step_ms || !(*step_ms > 0)) {
    throw_config(where + ": a bench=" + *o.get("bench") +
                 " line needs params, n_layer, n_embd, batch, seq_len and a positive step_ms");
  }
  // train_cpu writes "checkpointing", train_gpu "activation_checkpointing".
  const std::string* ckpt =
      o.get("checkpointing") != nullptr ? o.get("checkpointing") : o.get("activation_checkpointing");
  const bool checkpointing = ckpt != nullptr && *ckpt == "true";
  const double flops = flops_per_token(*params, *layers, *width, *seq, checkpointing) * *batch * *seq;
  const double tflops = flops / (*step_ms * 1e-3) / 1e12;
  const auto whole = [](double x) { return std::to_string(static_cast<long long>(x)); };
  how += std::string(how.empty() ? "" : "; ") + *o.get("bench") + " P " + whole(*params) + ", L " + whole(*layers) +
         ", C " + whole(*width) + ", " + whole(*batch) + " x " + whole(*seq) + " tokens" +
         (checkpointing ? ", checkpointing" : "") + ": " + fmt(flops / 1e9) + " GFLOP in " + fmt(*step_ms) +
         " ms = " + fmt(tflops) + " TFLOP/s";
  const auto own = o.number("achieved_gflops");
  const auto own_t = o.number("tflops");
  if (own) how += " (the bench's own count: " + fmt(*own) + " GFLOP/s)";
  if (own_t) how += " (the bench's own count: " + fmt(*own_t) + " TFLOP/s)";
  return tflops;
}

}  // namespace

Calibration parse_calibration(const std::vector<CalibrationSource>& sources) {
  std::map<std::string, std::vector<Sample>> by_group;
  double tflops_sum = 0;
  int train_lines = 0;
  int cpu_lines = 0;  // of which bench=train_cpu
  std::string compute_how;
  Calibration c;
  for (const CalibrationSource& source : sources) {
    const std::string& origin = source.origin;
    c.source += (c.source.empty() ? "" : ", ") + origin;
    std::istringstream in(source.text);
    int line_number = 0;
    int bench_lines = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = origin + ":" + std::to_string(line_number);
      const auto object = FlatObject::parse(line);
      if (!object) {
        throw_config(where +
                     ": not a JSON object line (expected the output of hsdp-commbench --json or "
                     "hsdp-bench-train-cpu/-gpu --json)");
      }
      const std::string* bench = object->get("bench");
      if (bench != nullptr && (*bench == "train_cpu" || *bench == "train_gpu")) {
        ++bench_lines;
        ++train_lines;
        cpu_lines += *bench == "train_cpu" ? 1 : 0;
        tflops_sum += train_line_tflops(*object, where, compute_how);
        continue;
      }
      if (bench == nullptr || *bench != "comm") continue;
      ++bench_lines;
      const std::string* busbw_text = object->get("busbw_gbps");
      if (busbw_text != nullptr && *busbw_text == "null") continue;  // a time of 0 (JsonLine writes inf as null)
      const std::string* group = object->get("group");
      const std::string* collective = object->get("collective");
      const auto ranks = object->number("ranks"), bytes = object->number("bytes"), time = object->number("time_us"),
                 busbw = object->number("busbw_gbps");
      if (group == nullptr || collective == nullptr || !ranks || !bytes || !time || !busbw) {
        throw_config(where + ": a bench=comm line needs group, collective, ranks, bytes, time_us and busbw_gbps");
      }
      if (*collective != "all_reduce" && *collective != "reduce_scatter" && *collective != "all_gather") continue;
      by_group[*group].push_back({*collective, *ranks, *bytes, *time, *busbw});
    }
    if (bench_lines == 0) {
      throw_config(origin +
                   ": no bench=comm, bench=train_cpu or bench=train_gpu lines (expected the output of "
                   "hsdp-commbench --json or hsdp-bench-train-cpu/-gpu --json)");
    }
  }
  c.intra = derive(by_group["intra-node"], "intra-node");
  c.inter = derive(by_group["inter-node"], "inter-node");
  // The world's ring, where it spans nodes (inter-node lines: one rank per node) of several ranks each.
  const std::vector<Sample>& world = by_group["world"];
  const std::vector<Sample>& across = by_group["inter-node"];
  if (!world.empty() && !across.empty() && world.front().ranks > across.front().ranks) {
    const double members = world.front().ranks / across.front().ranks;
    if (members == std::floor(members)) {
      c.node_ring = derive(world, "world (a node-major ring, " + fmt(members) + " ranks per node)");
      c.node_ring_members = static_cast<int>(members);
    }
  }
  if (train_lines > 0) {
    ComputeCalibration compute;
    compute.tflops = tflops_sum / train_lines;
    compute.cpu = cpu_lines == train_lines;
    compute.how = "compute " + fmt(compute.tflops) +
                  " TFLOP/s per rank = the mean over the bench=train lines of hsdp-plan's FLOPs of the measured "
                  "step (6P + 12 L C T per token) / its mean step_ms (" +
                  compute_how + ")";
    c.compute = compute;
  }
  if (!c.intra && !c.inter && !c.compute) {
    throw_config(c.source +
                 ": no intra-node or inter-node ring collective lines and no bench=train lines (run hsdp-commbench "
                 "on at least two nodes, or with --topology.ranks_per_node)");
  }
  return c;
}

Calibration read_calibration(const std::vector<std::string>& paths) {
  std::vector<CalibrationSource> sources;
  for (const std::string& path : paths) {
    std::ifstream file(path);
    if (!file) throw_config("--calibrate: cannot open '" + path + "' (no such file or not readable)");
    std::stringstream text;
    text << file.rdbuf();
    sources.push_back({text.str(), path});
  }
  return parse_calibration(sources);
}

}  // namespace hsdp::plan
