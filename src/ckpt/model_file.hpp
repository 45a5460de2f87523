#pragma once
// Private helpers of the model-file exporters (export.cpp, safetensors.cpp, hf.cpp): stdio files that close
// themselves, writes that fail with a checkpoint Error naming the file, and the write-to-.tmp-then-rename commit.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "hsdp/ckpt/commit.hpp"
#include "hsdp/core/error.hpp"

namespace hsdp::ckpt::model_file {

[[noreturn]] inline void fail(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::checkpoint, "'" + path + "': " + what);
}

// JSON nested deeper than any file hsdp reads (a config.json, a safetensors header) is refused before it is parsed:
// Boost's JSON parser recurses once per level, and 100,000 '[' overflowed its stack.
inline constexpr int kMaxJsonNesting = 64;
inline void check_json_nesting(const std::string& text, const std::string& path) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character is part of the string
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonNesting) {
        fail(path, "JSON nested deeper than " + std::to_string(kMaxJsonNesting) + " levels (at byte " +
                       std::to_string(i) + "): not a file hsdp reads");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

using FilePtr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

inline FilePtr open_file(const std::string& path, const char* mode) {
  FilePtr f(std::fopen(path.c_str(), mode), std::fclose);
  if (!f) fail(path, std::string("cannot open: ") + std::strerror(errno));
  return f;
}

inline void write_bytes(std::FILE* f, const void* data, std::size_t bytes, const std::string& path) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, f) != bytes)
    fail(path, std::string("write failed: ") + std::strerror(errno));
}

// Writes through `path.tmp` (body(file, tmp_path)), fsynced and renamed over `path` once complete (commit.hpp's
// durable_rename: the directory fsynced too). A write that fails (a full disk, a quota) removes the temporary file:
// nothing is left behind, and `path` is as it was.
template <typename Body>
void write_atomically(const std::string& path, Body&& body) {
  const std::string tmp = path + ".tmp";
  try {
    {
      FilePtr f = open_file(tmp, "wb");
      body(f.get(), tmp);
      if (std::fflush(f.get()) != 0) fail(tmp, std::string("write failed: ") + std::strerror(errno));
      if (::fsync(::fileno(f.get())) != 0) fail(tmp, std::string("fsync failed: ") + std::strerror(errno));
      std::FILE* raw = f.release();
      if (std::fclose(raw) != 0) fail(tmp, std::string("close failed: ") + std::strerror(errno));
    }
    durable_rename(tmp, path);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
}

}  // namespace hsdp::ckpt::model_file
