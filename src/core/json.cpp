#include "hsdp/core/json.hpp"

#include <charconv>
#include <cstdio>

namespace hsdp {

std::string JsonLine::quote(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char esc[8];
          std::snprintf(esc, sizeof esc, "\\u%04x", c);
          out += esc;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string JsonLine::number(double value) {
  if (!std::isfinite(value)) return "null";  // JSON has no inf/nan
  // The shortest text that reads back as exactly this double: metrics compare bit for bit.
  char text[32];
  const auto result = std::to_chars(text, text + sizeof text, value);
  return std::string(text, result.ptr);
}

void JsonLine::key(std::string_view k) {
  if (!body_.empty()) body_ += ",";
  body_ += quote(k) + ":";
}

JsonLine& JsonLine::add(std::string_view k, std::string_view value) {
  key(k);
  body_ += quote(value);
  return *this;
}
JsonLine& JsonLine::add(std::string_view k, double value) {
  key(k);
  body_ += number(value);
  return *this;
}
JsonLine& JsonLine::add(std::string_view k, std::int64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}
JsonLine& JsonLine::add(std::string_view k, std::uint64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}
JsonLine& JsonLine::add(std::string_view k, bool value) {
  key(k);
  body_ += value ? "true" : "false";
  return *this;
}
JsonLine& JsonLine::add_raw(std::string_view k, std::string_view json) {
  key(k);
  body_ += json;
  return *this;
}

}  // namespace hsdp
