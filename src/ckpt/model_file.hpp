#pragma once
// Private helpers of the model-file exporters (export.cpp, safetensors.cpp, hf.cpp): stdio files that close
// themselves, writes that fail with a checkpoint Error naming the file, and the write-to-.tmp-then-rename commit.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "hsdp/core/error.hpp"

namespace hsdp::ckpt::model_file {

[[noreturn]] inline void fail(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::checkpoint, "'" + path + "': " + what);
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

// Writes through `path.tmp` (body(file, tmp_path)), renamed over `path` once complete.
template <typename Body>
void write_atomically(const std::string& path, Body&& body) {
  const std::string tmp = path + ".tmp";
  {
    FilePtr f = open_file(tmp, "wb");
    body(f.get(), tmp);
    if (std::fflush(f.get()) != 0) fail(tmp, std::string("write failed: ") + std::strerror(errno));
    std::FILE* raw = f.release();
    if (std::fclose(raw) != 0) fail(tmp, std::string("close failed: ") + std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail(path, "cannot rename from " + tmp + ": " + ec.message());
}

}  // namespace hsdp::ckpt::model_file
