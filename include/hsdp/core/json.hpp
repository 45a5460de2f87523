#pragma once
// A one-line JSON object writer for metrics.jsonl, summary.json and benchmark lines.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

namespace hsdp {

class JsonLine {
 public:
  JsonLine& add(std::string_view key, std::string_view value);
  JsonLine& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  JsonLine& add(std::string_view key, const std::string& value) { return add(key, std::string_view(value)); }
  JsonLine& add(std::string_view key, double value);
  JsonLine& add(std::string_view key, std::int64_t value);
  JsonLine& add(std::string_view key, std::uint64_t value);
  JsonLine& add(std::string_view key, int value) { return add(key, static_cast<std::int64_t>(value)); }
  JsonLine& add(std::string_view key, bool value);
  // `json` is inserted verbatim (a nested object or array built by another JsonLine).
  JsonLine& add_raw(std::string_view key, std::string_view json);
  std::string str() const { return "{" + body_ + "}"; }

  static std::string quote(std::string_view text);
  static std::string number(double value);

 private:
  void key(std::string_view k);
  std::string body_;
};

}  // namespace hsdp
