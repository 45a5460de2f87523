#include "hsdp/core/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

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

void require_not_checkpoint(const std::string& path, std::string_view what, std::string_view tool) {
  std::ifstream in(path, std::ios::binary);
  std::array<char, 8> head{};
  constexpr std::array<char, 8> kHdf5{'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};  // HDF5's signature at byte 0
  if (in && in.read(head.data(), head.size()) && head == kHdf5) {
    throw_config(std::string(what) + ": '" + path + "' is an HDF5 file (a checkpoint?), which " + std::string(tool) +
                 " never writes over: give another path, or remove it first");
  }
}

void require_distinct_files(std::span<const NamedPath> given) {
  struct Entry {
    const NamedPath* named;
    std::filesystem::path path;
    bool temporary;  // "<written path>.tmp"
    std::string name() const { return named->option + (temporary ? "'s temporary file" : ""); }
  };
  std::vector<Entry> entries;
  for (const NamedPath& p : given) entries.push_back({&p, p.path, false});
  for (const NamedPath& p : given) {
    if (!p.written) continue;
    std::filesystem::path temporary = p.path;
    temporary += ".tmp";
    entries.push_back({&p, temporary, true});
  }
  std::vector<std::filesystem::path> canonical;  // empty where it cannot be resolved: compared with none
  for (const Entry& e : entries) {
    std::error_code ec;
    const std::filesystem::path resolved = std::filesystem::weakly_canonical(e.path, ec);
    canonical.push_back(ec ? std::filesystem::path() : resolved);
  }
  for (std::size_t i = 0; i < entries.size(); ++i) {
    for (std::size_t j = i + 1; j < entries.size(); ++j) {
      if (!canonical[i].empty() && canonical[i] == canonical[j]) {
        throw_config(entries[j].name() + " '" + entries[j].path.string() + "' is the file " + entries[i].name() +
                     " names: give " + entries[j].named->option + " a path of its own");
      }
    }
  }
}

bool try_write_file_atomically(const std::filesystem::path& path, std::span<const std::string_view> pieces,
                               std::string* reason) {
  std::filesystem::path temporary = path;
  temporary += ".tmp";
  const auto failed = [&](const std::string& what, const std::filesystem::path& on) {
    if (reason != nullptr) *reason = what + " '" + on.string() + "': " + std::strerror(errno);
    return false;
  };
  const auto failed_removing = [&](const std::string& what, int fd) {  // a full disk: leave no temporary file
    const int error = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(temporary.c_str());
    errno = error;
    return failed(what, temporary);
  };
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return failed("cannot write", temporary);
  for (const std::string_view bytes : pieces) {
    for (std::size_t done = 0; done < bytes.size();) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (n == 0) errno = ENOSPC;
        return failed_removing("cannot write", fd);
      }
      done += static_cast<std::size_t>(n);
    }
  }
  if (::fsync(fd) != 0) return failed_removing("cannot fsync", fd);
  if (::close(fd) != 0) return failed_removing("cannot write", -1);
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    errno = error;
    return failed("cannot rename '" + temporary.string() + "' to", path);
  }
  const std::filesystem::path dir = path.parent_path();
  return try_fsync_directory(dir.empty() ? std::filesystem::path(".") : dir, reason);
}

bool try_fsync_directory(const std::filesystem::path& dir, std::string* reason) {
  const auto failed = [&](const std::string& what) {
    if (reason != nullptr) *reason = what + " '" + dir.string() + "': " + std::strerror(errno);
    return false;
  };
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return failed("cannot open directory");
  const bool synced = ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  errno = error;
  return synced || failed("cannot fsync directory");
}

bool try_write_file_atomically(const std::filesystem::path& path, std::string_view bytes, std::string* reason) {
  return try_write_file_atomically(path, std::span<const std::string_view>(&bytes, 1), reason);
}

void write_file_atomically(const std::filesystem::path& path, std::span<const std::string_view> pieces) {
  std::string reason;
  if (!try_write_file_atomically(path, pieces, &reason)) throw_data(reason);
}

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  write_file_atomically(path, std::span<const std::string_view>(&bytes, 1));
}

std::uint64_t fingerprint(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

}  // namespace hsdp
