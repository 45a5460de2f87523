#include "hsdp/data/shards.hpp"

#include <glob.h>

#include <algorithm>
#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp::data {

namespace {

bool has_wildcard(const std::string& s) {
  return s.find_first_of("*?[") != std::string::npos;
}

std::string trimmed(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

}  // namespace

TokenShards::TokenShards(const TokenFile& file) : files_{&file} {}

std::vector<std::filesystem::path> TokenShards::expand(const std::string& spec, const std::string& what) {
  std::vector<std::filesystem::path> paths;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t comma = spec.find(',', begin);
    const std::string item = trimmed(spec.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
    if (item.empty()) {
      throw_data(what + " = '" + spec + "': an empty item in the list (write paths or globs separated by commas)");
    }
    std::error_code ec;
    if (!has_wildcard(item) || std::filesystem::exists(item, ec)) {  // a file named "run[1].bin" is that file
      paths.emplace_back(item);
    } else {
      glob_t found{};
      const int status = ::glob(item.c_str(), GLOB_ERR, nullptr, &found);
      std::vector<std::string> matches(found.gl_pathv, found.gl_pathv + found.gl_pathc);
      ::globfree(&found);
      if (status == GLOB_NOMATCH || matches.empty()) {
        throw_data(what + ": the glob '" + item + "' matches no file");
      }
      if (status != 0) throw_data(what + ": cannot read the directories of the glob '" + item + "'");
      std::sort(matches.begin(), matches.end());
      paths.insert(paths.end(), matches.begin(), matches.end());
    }
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return paths;
}

TokenShards TokenShards::open(const std::string& spec, const std::string& what) {
  auto files = std::make_shared<std::vector<TokenFile>>();
  for (const std::filesystem::path& p : expand(spec, what)) files->emplace_back(p, what);
  TokenShards shards;
  for (const TokenFile& f : *files) shards.files_.push_back(&f);
  shards.owned_ = std::move(files);
  return shards;
}

std::uint64_t TokenShards::tokens() const {
  std::uint64_t total = 0;
  for (const TokenFile* f : files_) total += f->size();
  return total;
}

std::string TokenShards::describe() const {
  const auto quoted = [](const TokenFile* f) { return "'" + f->path().string() + "'"; };
  if (files_.size() == 1) return quoted(files_.front());
  return std::to_string(files_.size()) + " files " + quoted(files_.front()) + " ... " + quoted(files_.back());
}

void TokenShards::validate_vocab(int vocab_size) const {
  for (const TokenFile* f : files_) f->validate_vocab(vocab_size);
}

std::vector<std::uint64_t> TokenShards::window_starts(std::size_t seq_len) const {
  std::vector<std::uint64_t> starts{0};
  for (const TokenFile* f : files_) starts.push_back(starts.back() + (f->size() == 0 ? 0 : (f->size() - 1) / seq_len));
  return starts;
}

void TokenShards::copy_window(const std::vector<std::uint64_t>& starts, std::uint64_t w, std::size_t seq_len,
                              std::uint32_t* out) const {
  // The shard whose windows hold w: the last start <= w among shards with windows.
  const auto after = std::upper_bound(starts.begin(), starts.end(), w);
  if (after == starts.begin() || after == starts.end()) {
    throw_internal(what() + ": window " + std::to_string(w) + " is beyond the " + std::to_string(starts.back()) +
                   " windows of " + describe());
  }
  const auto shard = static_cast<std::size_t>(after - starts.begin() - 1);
  files_[shard]->copy_tokens((w - starts[shard]) * seq_len, seq_len + 1, out);  // a file cut under the job: an Error
}

}  // namespace hsdp::data
