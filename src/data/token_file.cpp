#include "hsdp/data/token_file.hpp"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <utility>

#include "hsdp/core/error.hpp"
#include "hsdp/core/files.hpp"

namespace hsdp::data {

static_assert(std::endian::native == std::endian::little, "token files are little-endian");

namespace {

std::string quoted(const std::filesystem::path& path) {
  return "'" + path.string() + "'";
}

// Closes a POSIX descriptor on scope exit; the mapping outlives it.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// A token file cut shorter under a running job (cp over it truncates it in place) makes every read of the mapping
// beyond the new end a SIGBUS. Reads go through TokenFile::copy_tokens, whose guard turns that SIGBUS into a data
// Error naming the file; a SIGBUS anywhere else goes to the handler installed before ours (Open MPI's backtrace, or
// the default action).
// volatile: the compiler must not drop the store before the copy as dead (memcpy does not read it; the handler does).
thread_local sigjmp_buf* volatile t_copy_guard = nullptr;
struct sigaction g_previous_sigbus {};

void on_sigbus(int sig, siginfo_t* info, void* context) {
  if (t_copy_guard != nullptr) siglongjmp(*t_copy_guard, 1);
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) != 0 && g_previous_sigbus.sa_sigaction != nullptr) {
    g_previous_sigbus.sa_sigaction(sig, info, context);
    return;
  }
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) == 0 && g_previous_sigbus.sa_handler != SIG_DFL &&
      g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(sig);
    return;
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// At every opening, not once: a library initialised after an earlier opening (MPI_Init installs Open MPI's handler)
// may have replaced ours since.
void install_sigbus_guard() {
  static std::mutex mutex;
  const std::lock_guard lock(mutex);
  struct sigaction current {};
  ::sigaction(SIGBUS, nullptr, &current);
  if ((current.sa_flags & SA_SIGINFO) != 0 && current.sa_sigaction == on_sigbus) return;
  struct sigaction action {};
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, &g_previous_sigbus);
}

}  // namespace

TokenFile::TokenFile(const std::filesystem::path& path, std::string what) : path_(path), what_(std::move(what)) {
  const std::string where = what_ + ": " + quoted(path_);
  // O_NONBLOCK: a FIFO opens at once (and is refused below) instead of blocking until a writer comes.
  const FileDescriptor fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) throw_data(what_ + ": cannot open " + quoted(path_) + ": " + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) throw_data(where + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) throw_data(where + " is not a regular file");
  const auto file_bytes = static_cast<std::size_t>(info.st_size);
  if (file_bytes < kTokenFileHeaderBytes) {
    throw_data(where + " is " + std::to_string(file_bytes) + " bytes, smaller than the " +
               std::to_string(kTokenFileHeaderBytes) + "-byte header of a token file (llm.c .bin format)");
  }

  void* mapping = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (mapping == MAP_FAILED) throw_data(where + ": cannot map: " + std::strerror(errno));
  mapping_ = mapping;
  mapping_bytes_ = file_bytes;
  install_sigbus_guard();

  std::array<std::int32_t, kTokenFileHeaderInts> header{};
  std::memcpy(header.data(), mapping_, kTokenFileHeaderBytes);
  try {
    if (header[0] != kTokenFileMagic) {
      throw_data(where + " is not a token file: header magic is " + std::to_string(header[0]) + ", expected " +
                 std::to_string(kTokenFileMagic) + " (llm.c .bin format)");
    }
    if (header[1] != kTokenFileVersion && header[1] != kTokenFileVersionWide) {
      throw_data(where + " has token file version " + std::to_string(header[1]) + ", expected " +
                 std::to_string(kTokenFileVersion) + " (uint16 tokens) or " + std::to_string(kTokenFileVersionWide) +
                 " (uint32 tokens)");
    }
    token_bytes_ = header[1] == kTokenFileVersion ? sizeof(std::uint16_t) : sizeof(std::uint32_t);
    if (header[2] < 0)
      throw_data(where + " has a negative token count " + std::to_string(header[2]) + " in its header");
    const auto count = static_cast<std::size_t>(header[2]);
    const std::size_t expected = kTokenFileHeaderBytes + count * token_bytes_;
    if (file_bytes < expected) {
      throw_data(where + " is truncated: its header says " + std::to_string(count) + " tokens, so " +
                 std::to_string(expected) + " bytes are expected, found " + std::to_string(file_bytes));
    }
    if (file_bytes > expected) {
      throw_data(where + " has " + std::to_string(file_bytes - expected) + " bytes after its " + std::to_string(count) +
                 " tokens: expected " + std::to_string(expected) + " bytes, found " + std::to_string(file_bytes));
    }
    token_count_ = count;
    tokens_ = static_cast<const std::byte*>(mapping_) + kTokenFileHeaderBytes;
  } catch (...) {
    unmap();
    throw;
  }
}

void TokenFile::copy_tokens(std::size_t first, std::size_t count, std::uint32_t* out) const {
  if (first > token_count_ || count > token_count_ - first) {
    throw_internal(what_ + ": tokens [" + std::to_string(first) + ", " + std::to_string(first + count) +
                   ") are beyond the " + std::to_string(token_count_) + " of '" + path_.string() + "'");
  }
  sigjmp_buf guard;
  if (sigsetjmp(guard, 1) != 0) {  // a SIGBUS inside the copy below
    t_copy_guard = nullptr;
    throw_data(what_ + ": '" + path_.string() + "' was cut shorter while this job was reading it (a data file must " +
               "not change under a running job: write a new file and rename it over the old one, as hsdp-data " +
               "does; cp over it truncates it in place)");
  }
  t_copy_guard = &guard;
  if (token_bytes_ == sizeof(std::uint32_t)) {
    std::memcpy(out, tokens_ + first * token_bytes_, count * token_bytes_);
  } else {
    const std::byte* from = tokens_ + first * token_bytes_;
    for (std::size_t i = 0; i < count; ++i) {
      std::uint16_t t;
      std::memcpy(&t, from + i * sizeof t, sizeof t);
      out[i] = t;
    }
  }
  t_copy_guard = nullptr;
}

std::vector<std::uint32_t> TokenFile::read(std::size_t first, std::size_t count) const {
  std::vector<std::uint32_t> out(count);
  copy_tokens(first, count, out.data());
  return out;
}

std::span<const std::byte> TokenFile::bytes(std::size_t first, std::size_t count) const {
  if (first > token_count_ || count > token_count_ - first) {
    throw_internal(what_ + ": token bytes [" + std::to_string(first) + ", " + std::to_string(first + count) +
                   ") are beyond the " + std::to_string(token_count_) + " of '" + path_.string() + "'");
  }
  return {tokens_ + first * token_bytes_, count * token_bytes_};
}

// Every token, in chunks through copy_tokens (a file cut under the reader is a data Error, not a SIGBUS).
template <typename Visit>
void for_each_token(const TokenFile& file, Visit&& visit) {
  constexpr std::size_t kChunk = std::size_t{1} << 16;
  std::vector<std::uint32_t> chunk;
  for (std::size_t first = 0; first < file.size(); first += kChunk) {
    const std::size_t n = std::min(kChunk, file.size() - first);
    chunk.resize(n);
    file.copy_tokens(first, n, chunk.data());
    for (std::size_t i = 0; i < n; ++i) visit(first + i, chunk[i]);
  }
}

std::uint32_t TokenFile::largest_token() const {
  std::uint32_t largest = 0;
  for_each_token(*this, [&](std::size_t, std::uint32_t t) { largest = std::max(largest, t); });
  return largest;
}

TokenFile::~TokenFile() {
  unmap();
}

TokenFile::TokenFile(TokenFile&& other) noexcept
    : path_(std::move(other.path_)),
      what_(std::move(other.what_)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_bytes_(std::exchange(other.mapping_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, nullptr)),
      token_count_(std::exchange(other.token_count_, 0)),
      token_bytes_(other.token_bytes_) {}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    what_ = std::move(other.what_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    token_count_ = std::exchange(other.token_count_, 0);
    token_bytes_ = other.token_bytes_;
  }
  return *this;
}

void TokenFile::unmap() noexcept {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
  mapping_bytes_ = 0;
  tokens_ = nullptr;
  token_count_ = 0;
}

void TokenFile::validate_vocab(int vocab_size) const {
  if (vocab_size <= 0) throw_config("validate_vocab: vocab size must be positive, got " + std::to_string(vocab_size));
  const auto limit = static_cast<std::uint32_t>(vocab_size);
  for_each_token(*this, [&](std::size_t i, std::uint32_t t) {
    if (t >= limit) {
      throw_data(what_ + ": " + quoted(path_) + ": token " + std::to_string(t) + " at position " + std::to_string(i) +
                 " is >= vocab size " + std::to_string(vocab_size));
    }
  });
}

namespace {

template <typename T>
void write_tokens(const std::filesystem::path& path, std::span<const T> tokens) {
  if (tokens.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw_data("cannot write " + quoted(path) + ": " + std::to_string(tokens.size()) +
               " tokens do not fit the int32 token count of the llm.c header; split the data");
  }
  std::array<std::int32_t, kTokenFileHeaderInts> header{};
  header[0] = kTokenFileMagic;
  header[1] = sizeof(T) == sizeof(std::uint16_t) ? kTokenFileVersion : kTokenFileVersionWide;
  header[2] = static_cast<std::int32_t>(tokens.size());

  // The output's directory is made if missing, as `synth --out-dir` does.
  if (const auto dir = path.parent_path(); !dir.empty()) {
    std::error_code made;
    std::filesystem::create_directories(dir, made);
    if (made) throw_data("cannot create the directory of " + quoted(path) + ": " + made.message());
  }
  // Through path.tmp, renamed when whole: a full disk leaves nothing behind and an earlier file as it was.
  const std::string_view pieces[] = {{reinterpret_cast<const char*>(header.data()), kTokenFileHeaderBytes},
                                     {reinterpret_cast<const char*>(tokens.data()), tokens.size_bytes()}};
  write_file_atomically(path, pieces);
}

}  // namespace

void write_token_file(const std::filesystem::path& path, std::span<const std::uint16_t> tokens) {
  write_tokens(path, tokens);
}

void write_token_file(const std::filesystem::path& path, std::span<const std::uint32_t> tokens) {
  write_tokens(path, tokens);
}

}  // namespace hsdp::data
