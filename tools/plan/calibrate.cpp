#include "plan/calibrate.hpp"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "hsdp/core/error.hpp"

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
  c.how = group + " (" + fmt(samples.front().ranks) + " ranks): bandwidth " + fmt(c.gbps) +
          " GB/s = mean busbw at the largest size (" + how_bw + "); latency " + fmt(c.latency_us) +
          " us = mean time per message at the smallest size (" + how_alpha + ")";
  return c;
}

}  // namespace

Calibration parse_commbench(const std::string& text, const std::string& origin) {
  std::map<std::string, std::vector<Sample>> by_group;
  std::istringstream in(text);
  int line_number = 0;
  int comm_lines = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto object = FlatObject::parse(line);
    if (!object) {
      throw_config(origin + ":" + std::to_string(line_number) +
                   ": not a JSON object line (expected the output of hsdp-commbench --json)");
    }
    const std::string* bench = object->get("bench");
    if (bench == nullptr || *bench != "comm") continue;
    ++comm_lines;
    const std::string* busbw_text = object->get("busbw_gbps");
    if (busbw_text != nullptr && *busbw_text == "null") continue;  // a time of 0 (JsonLine writes inf as null)
    const std::string* group = object->get("group");
    const std::string* collective = object->get("collective");
    const auto ranks = object->number("ranks"), bytes = object->number("bytes"), time = object->number("time_us"),
               busbw = object->number("busbw_gbps");
    if (group == nullptr || collective == nullptr || !ranks || !bytes || !time || !busbw) {
      throw_config(origin + ":" + std::to_string(line_number) +
                   ": a bench=comm line needs group, collective, ranks, bytes, time_us and busbw_gbps");
    }
    if (*collective != "all_reduce" && *collective != "reduce_scatter" && *collective != "all_gather") continue;
    by_group[*group].push_back({*collective, *ranks, *bytes, *time, *busbw});
  }
  if (comm_lines == 0) throw_config(origin + ": no bench=comm lines (expected the output of hsdp-commbench --json)");
  Calibration c;
  c.source = origin;
  c.intra = derive(by_group["intra-node"], "intra-node");
  c.inter = derive(by_group["inter-node"], "inter-node");
  if (!c.intra && !c.inter) {
    throw_config(origin +
                 ": no intra-node or inter-node ring collective lines (run hsdp-commbench on at least two "
                 "nodes, or with --topology.ranks_per_node)");
  }
  return c;
}

Calibration read_commbench(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw_config("--calibrate: cannot open '" + path + "' (no such file or not readable)");
  std::stringstream text;
  text << file.rdbuf();
  return parse_commbench(text.str(), path);
}

}  // namespace hsdp::plan
