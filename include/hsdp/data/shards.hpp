#pragma once
// TokenShards: the token files one data key names (data.train, data.val), in a fixed order:
//   one path                         data/train.bin
//   a glob                           fineweb10B/fineweb_train_*.bin (llm.c's shards): its matches, sorted by name
//                                    (a file named as the pattern, "run[1].bin", is that file)
//   a comma-separated list of these  a.bin,b.bin,more_*.bin: in the order given, each glob sorted
// Every shard is a TokenFile validated on opening (version 1 and 2 may mix: ids are read as uint32). A window of
// seq_len + 1 tokens never crosses a shard's end: shard i holds (T_i - 1) / seq_len windows (as one file would) and
// the data's windows are the shards' in order, so the window index space, and with it the sampler's state, depends
// only on the list and seq_len: any world size reads the same windows and a resume continues exactly. Token counts
// are 64-bit: the data may hold more than 2^31 tokens (each shard at most 2^31 - 1, the llm.c header's int32).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "hsdp/data/token_file.hpp"

namespace hsdp::data {

class TokenShards {
 public:
  // One file, not owned (it must outlive every copy of this).
  TokenShards(const TokenFile& file);  // NOLINT(google-explicit-constructor): a file is a list of one
  // Opens every file `spec` names (above); `what` names the key in messages. A data Error names a glob that matches
  // nothing, an empty list item, and (through TokenFile) each bad file.
  static TokenShards open(const std::string& spec, const std::string& what);
  // The paths `spec` names, in order, without opening them.
  static std::vector<std::filesystem::path> expand(const std::string& spec, const std::string& what);

  std::size_t count() const { return files_.size(); }
  const TokenFile& shard(std::size_t i) const { return *files_[i]; }
  std::uint64_t tokens() const;
  const std::string& what() const { return files_.front()->what(); }
  // "'path'" for one file, else "N files 'first' ... 'last'": for messages.
  std::string describe() const;
  void validate_vocab(int vocab_size) const;

  // Where each shard's windows start in the data's window order, for windows of seq_len + 1 tokens: count() + 1
  // entries, the last being the number of windows.
  std::vector<std::uint64_t> window_starts(std::size_t seq_len) const;
  // Window w's seq_len + 1 tokens into `out`, given window_starts(seq_len).
  void copy_window(const std::vector<std::uint64_t>& starts, std::uint64_t w, std::size_t seq_len,
                   std::uint32_t* out) const;

 private:
  TokenShards() = default;
  std::shared_ptr<const std::vector<TokenFile>> owned_;  // shared by copies: a sampler keeps its own
  std::vector<const TokenFile*> files_;
};

}  // namespace hsdp::data
