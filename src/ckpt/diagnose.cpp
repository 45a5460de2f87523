#include "diagnose.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <hdf5_hl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>

#include "h5.hpp"

namespace hsdp::ckpt {
namespace {

constexpr std::array<unsigned char, 8> kSignature = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

std::uint64_t little_endian(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// The end-of-file address the superblock records (superblock at offset 0, versions 0 to 3).
std::optional<std::uint64_t> stored_end_of_file(int fd) {
  std::array<unsigned char, 96> sb{};
  if (::pread(fd, sb.data(), sb.size(), 0) < 64) return std::nullopt;
  if (std::memcmp(sb.data(), kSignature.data(), kSignature.size()) != 0) return std::nullopt;
  const int version = sb[8];
  if (version >= 2) {
    const int offsets = sb[9];
    if (offsets != 8 && offsets != 4) return std::nullopt;
    // signature 8, version, size of offsets, size of lengths, flags; base, extension, end-of-file addresses.
    const unsigned char* base = sb.data() + 12;
    return little_endian(base, offsets) + little_endian(base + 2 * offsets, offsets);
  }
  const int offsets = sb[13];
  if (offsets != 8 && offsets != 4) return std::nullopt;
  // v0: 24 bytes of fixed fields, v1: 28; then base, free-space, end-of-file addresses.
  const unsigned char* base = sb.data() + (version == 0 ? 24 : 28);
  return little_endian(base, offsets) + little_endian(base + 2 * offsets, offsets);
}

// An mmap'ed image of the file, zero-extended to `size` bytes (pages beyond the file are anonymous zeros).
class ExtendedImage {
 public:
  ExtendedImage(int fd, std::uint64_t file_size, std::uint64_t size) {
    const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    length_ = (size + page - 1) / page * page;
    void* base = ::mmap(nullptr, length_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) return;
    base_ = base;
    const std::uint64_t mapped = (file_size + page - 1) / page * page;
    if (mapped > 0 && ::mmap(base_, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0) == MAP_FAILED) {
      ::munmap(base_, length_);
      base_ = nullptr;
    }
  }
  ~ExtendedImage() {
    if (base_ != nullptr) ::munmap(base_, length_);
  }
  ExtendedImage(const ExtendedImage&) = delete;
  ExtendedImage& operator=(const ExtendedImage&) = delete;
  void* data() const { return base_; }

 private:
  void* base_ = nullptr;
  std::uint64_t length_ = 0;
};

// The datasets of `datasets` whose data (or header) is not within the first `file_size` bytes, the one cut first
// (lowest offset) first; those whose header cannot be read come last. Empty when no dataset header is readable.
std::vector<std::string> cut_datasets(hid_t image, const std::vector<std::string>& datasets, std::uint64_t file_size) {
  std::vector<std::pair<std::uint64_t, std::string>> cut;
  constexpr std::uint64_t kUnknown = UINT64_MAX;
  for (const std::string& path : datasets) {
    const hid_t d = h5::link_exists(image, path) ? H5Dopen2(image, path.c_str(), H5P_DEFAULT) : H5I_INVALID_HID;
    if (d < 0) {
      cut.emplace_back(kUnknown, path);
      continue;
    }
    const haddr_t offset = H5Dget_offset(d);
    const hsize_t bytes = H5Dget_storage_size(d);
    H5Dclose(d);
    if (offset == HADDR_UNDEF) {
      cut.emplace_back(kUnknown, path);
    } else if (offset + bytes > file_size) {
      cut.emplace_back(offset, path);
    }
  }
  std::stable_sort(cut.begin(), cut.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // Only a dataset whose header survived is known to be cut off (rather than unreadable for other reasons).
  if (cut.empty() || cut.front().first == kUnknown) return {};
  std::vector<std::string> names;
  for (auto& [offset, name] : cut) names.push_back(std::move(name));
  return names;
}

}  // namespace

std::string describe_open_failure(const std::string& path, const std::vector<std::string>& datasets,
                                  const std::string& hdf5_message) {
  const std::string quoted = "checkpoint '" + path + "'";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return quoted + " cannot be opened: " + std::strerror(errno);
  struct stat st {};
  ::fstat(fd, &st);
  const std::uint64_t file_size = static_cast<std::uint64_t>(st.st_size);
  std::array<unsigned char, 8> head{};
  if (::pread(fd, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size()) || head != kSignature) {
    ::close(fd);
    return quoted + " is not an HDF5 file (" + std::to_string(file_size) + " bytes, no HDF5 signature)";
  }
  const std::optional<std::uint64_t> end = stored_end_of_file(fd);
  if (!end || *end <= file_size) {
    ::close(fd);
    return "cannot open " + quoted + (hdf5_message.empty() ? "" : ": " + hdf5_message);
  }
  std::string message =
      quoted + " is truncated: " + std::to_string(file_size) + " of its " + std::to_string(*end) + " bytes are on disk";
  std::vector<std::string> cut;
  {
    ExtendedImage image(fd, file_size, *end);
    if (image.data() != nullptr) {
      const hid_t f = H5LTopen_file_image(image.data(), *end, H5LT_FILE_IMAGE_DONT_COPY | H5LT_FILE_IMAGE_DONT_RELEASE);
      if (f >= 0) {
        // Only the names the model expects are looked up: walking the links of a damaged file (H5Lvisit) can
        // corrupt HDF5's heap (seen with HDF5 1.10.8 in tests/fuzz).
        cut = cut_datasets(f, datasets, file_size);
        H5Fclose(f);
      }
      H5Eclear2(H5E_DEFAULT);
    }
  }
  if (!cut.empty()) {
    message += "; dataset " + cut.front() + (cut.size() > 1 ? " and " + std::to_string(cut.size() - 1) + " more" : "") +
               " lie beyond the end of the file";
  } else {
    message += "; its metadata is cut off too, so the missing datasets cannot be named";
  }
  ::close(fd);
  return message + " (the file is incomplete: written or copied only in part; use an earlier checkpoint)";
}

}  // namespace hsdp::ckpt
