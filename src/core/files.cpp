#include "hsdp/core/files.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "hsdp/core/error.hpp"

namespace hsdp {
namespace {

// What a non-regular file is, for the message; "" for a regular file or a path that does not exist.
std::string kind_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a plain file";
}

}  // namespace

void require_regular_input(const std::string& path, std::string_view what, ErrorKind kind) {
  const std::string found = kind_of(path);
  if (!found.empty()) throw Error(kind, std::string(what) + ": '" + path + "' is " + found + ", not a regular file");
}

void require_regular_output(const std::string& path, std::string_view what) {
  const std::string kind = kind_of(path);
  if (!kind.empty()) {
    throw_config(std::string(what) + ": '" + path + "' is " + kind +
                 "; the output must be a new path or a regular file (it is written to a temporary file and renamed "
                 "over the path, which would replace it)");
  }
}

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  std::filesystem::path temporary = path;
  temporary += ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw_data("cannot write '" + temporary.string() + "': " + std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      out.close();
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      throw_data("cannot write '" + temporary.string() + "': write failed (disk full?)");
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw_data("cannot rename '" + temporary.string() + "' to '" + path.string() + "': " + error.message());
  }
}

std::uint64_t fingerprint(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

}  // namespace hsdp
