#include "mutator.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace hsdp::fuzz {
namespace {

// A position, biased towards the front where headers live (token-file header, HDF5 superblock and metadata).
std::size_t position(std::size_t size, Rng& rng) {
  switch (rng.below(3)) {
    case 0: return rng.below(std::min<std::size_t>(size, 64));
    case 1: return rng.below(std::min<std::size_t>(size, 8192));
    default: return rng.below(size);
  }
}

Bytes to_bytes(const std::string& text) {
  return {text.begin(), text.end()};
}

const std::string& pick_token(const Dictionary& dictionary, Rng& rng) {
  const auto& numbers = interesting_numbers();
  if (dictionary.tokens.empty() || rng.one_in(3)) return numbers[rng.below(numbers.size())];
  return dictionary.tokens[rng.below(dictionary.tokens.size())];
}

// The positions just after each '=' (deck lines and command-line words).
std::vector<std::size_t> value_starts(const Bytes& b) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (b[i] == '=') out.push_back(i + 1);
  }
  return out;
}

// Runs of decimal digits: [begin, end).
std::vector<std::pair<std::size_t, std::size_t>> digit_runs(const Bytes& b) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t i = 0; i < b.size();) {
    if (b[i] >= '0' && b[i] <= '9') {
      std::size_t j = i;
      while (j < b.size() && b[j] >= '0' && b[j] <= '9') ++j;
      out.emplace_back(i, j);
      i = j;
    } else {
      ++i;
    }
  }
  return out;
}

constexpr std::array<std::uint8_t, 14> kBytes = {0x00, 0x01, 0x7f, 0x80, 0xff, '\n', '\r', '=', '[', ']',
                                                  '#',  ' ',  '-',  ';'};
constexpr std::array<std::int64_t, 14> kIntegers = {0,          1,           -1,          2,
                                                     16,         64,          0x7f,        0xffff,
                                                     0x7fffffff, -0x7fffffff - 1,         0xffffffff,
                                                     INT64_MAX,  INT64_MIN,   20240520};

// Applies one mutation; returns its name.
std::string mutate_once(Bytes& b, const std::vector<Bytes>& others, const Dictionary& dictionary, Rng& rng) {
  const auto at = [&](const char* name, std::size_t where) { return std::string(name) + "@" + std::to_string(where); };
  if (b.empty()) {
    const Bytes token = to_bytes(pick_token(dictionary, rng));
    b.insert(b.end(), token.begin(), token.end());
    return "insert_token@0";
  }
  switch (rng.below(12)) {
    case 0: {
      const std::size_t p = position(b.size(), rng);
      b[p] ^= static_cast<std::uint8_t>(1u << rng.below(8));
      return at("flip_bit", p);
    }
    case 1: {
      const std::size_t p = position(b.size(), rng);
      b[p] = kBytes[rng.below(kBytes.size())];
      return at("set_byte", p);
    }
    case 2: {
      const std::size_t n = rng.below(b.size());
      b.resize(n);
      return at("truncate", n);
    }
    case 3: {
      const std::size_t p = position(b.size(), rng);
      const std::size_t n = 1 + rng.below(std::min<std::size_t>(64, b.size() - p));
      b.erase(b.begin() + static_cast<std::ptrdiff_t>(p), b.begin() + static_cast<std::ptrdiff_t>(p + n));
      return at("delete", p);
    }
    case 4: {
      const std::size_t p = position(b.size() + 1, rng);
      const std::uint64_t noise = rng.next();
      const std::size_t n = 1 + rng.below(8);
      const auto* first = reinterpret_cast<const std::uint8_t*>(&noise);
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(p), first, first + n);
      return at("insert_random", p);
    }
    case 5: {
      const std::size_t from = rng.below(b.size());
      const std::size_t n = 1 + rng.below(std::min<std::size_t>(256, b.size() - from));
      const Bytes piece(b.begin() + static_cast<std::ptrdiff_t>(from), b.begin() + static_cast<std::ptrdiff_t>(from + n));
      const std::size_t p = position(b.size() + 1, rng);
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(p), piece.begin(), piece.end());
      return at("duplicate", p);
    }
    case 6: {
      const Bytes& other = others[rng.below(others.size())];
      const std::size_t cut = rng.below(b.size() + 1);
      const std::size_t from = rng.below(other.size() + 1);
      b.resize(cut);
      b.insert(b.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
      return at("splice", cut);
    }
    case 7:
    case 8: {
      const Bytes token = to_bytes(pick_token(dictionary, rng));
      const std::size_t p = position(b.size() + 1, rng);
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(p), token.begin(), token.end());
      return at("insert_token", p);
    }
    case 9: {
      const auto starts = value_starts(b);
      if (starts.empty()) return mutate_once(b, others, dictionary, rng);
      const std::size_t p = starts[rng.below(starts.size())];
      std::size_t end = p;
      while (end < b.size() && b[end] != '\n' && b[end] != '\0') ++end;
      const Bytes token = to_bytes(pick_token(dictionary, rng));
      b.erase(b.begin() + static_cast<std::ptrdiff_t>(p), b.begin() + static_cast<std::ptrdiff_t>(end));
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(p), token.begin(), token.end());
      return at("replace_value", p);
    }
    case 10: {
      const auto runs = digit_runs(b);
      if (runs.empty()) return mutate_once(b, others, dictionary, rng);
      const auto [begin, end] = runs[rng.below(runs.size())];
      const Bytes number = to_bytes(interesting_numbers()[rng.below(interesting_numbers().size())]);
      b.erase(b.begin() + static_cast<std::ptrdiff_t>(begin), b.begin() + static_cast<std::ptrdiff_t>(end));
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(begin), number.begin(), number.end());
      return at("replace_number", begin);
    }
    default: {
      const std::size_t width = rng.one_in(2) ? 4 : 8;
      if (b.size() < width) return mutate_once(b, others, dictionary, rng);
      const std::size_t p = position(b.size() - width + 1, rng) / width * width;
      const std::int64_t value = kIntegers[rng.below(kIntegers.size())];
      std::memcpy(b.data() + p, &value, width);  // little-endian: the low bytes
      return at(width == 4 ? "overwrite_int32" : "overwrite_int64", p);
    }
  }
}

std::string unescape(const std::string& text, const std::string& where) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (++i == text.size()) throw std::runtime_error(where + ": a backslash ends the token");
    switch (text[i]) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'x':
        if (i + 2 >= text.size() || !std::isxdigit(static_cast<unsigned char>(text[i + 1])) ||
            !std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
          throw std::runtime_error(where + ": \\x needs two hex digits");
        }
        out += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
        i += 2;
        break;
      default: out += text[i];
    }
  }
  return out;
}

}  // namespace

std::uint64_t Rng::next() {
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::size_t Rng::below(std::size_t n) {
  return n == 0 ? 0 : static_cast<std::size_t>(next() % n);
}

const std::vector<std::string>& interesting_numbers() {
  static const std::vector<std::string> numbers = {
      "-1", "0", "1", "2", "3", "-0", "+1", "1.5", "0.5", "1e-320", "1e308", "-1e308", "1e309", "nan", "NaN", "inf",
      "-inf", "0x10", "1e3", "1e18", "1048576", "1048577", "65536", "65537", "1024", "1025", "2147483647",
      "2147483648", "4294967296", "9223372036854775807", "9223372036854775808", "-9223372036854775809",
      "99999999999999999999999999", "", " ", "1 2", "one"};
  return numbers;
}

Dictionary Dictionary::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read dictionary '" + path + "'");
  Dictionary d;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::size_t open = line.find('"');
    if (line.empty() || line[0] == '#' || open == std::string::npos) continue;
    const std::size_t close = line.rfind('"');
    if (close == open) throw std::runtime_error(path + ":" + std::to_string(number) + ": unterminated token");
    d.tokens.push_back(unescape(line.substr(open + 1, close - open - 1), path + ":" + std::to_string(number)));
  }
  return d;
}

Mutant mutate(const Bytes& seed, const std::vector<Bytes>& others, const Dictionary& dictionary, std::size_t max_size,
              Rng& rng) {
  Mutant m{seed, ""};
  const std::size_t count = 1 + rng.below(4);
  for (std::size_t i = 0; i < count; ++i) {
    if (!m.recipe.empty()) m.recipe += ' ';
    m.recipe += mutate_once(m.bytes, others, dictionary, rng);
  }
  if (m.bytes.size() > max_size) m.bytes.resize(max_size);
  return m;
}

}  // namespace hsdp::fuzz
