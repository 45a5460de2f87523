#pragma once
// Internal to hsdp_ckpt: RAII for HDF5 handles, checked calls that turn HDF5 failures into checkpoint Errors
// (with HDF5's own innermost message), and typed attribute helpers.
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hsdp::ckpt::h5 {

// Owns one hid_t and closes it with the matching H5*close on destruction.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now; throws a checkpoint Error naming `what` if HDF5 reports a failure (e.g. a file close that flushes).
  void close_checked(const std::string& what);
  void reset() {
    if (id_ >= 0 && close_ != nullptr) close_(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// Turns off HDF5's printing of its error stack (we report errors ourselves). Call at every entry point.
void silence_errors();
// HDF5's innermost error message of the current stack ("" if none).
std::string last_error();
// Throws a checkpoint Error "<what>: <HDF5's message>".
[[noreturn]] void fail(const std::string& what);

hid_t check(hid_t id, const std::string& what);
void check_status(herr_t status, const std::string& what);

Handle file(hid_t id, const std::string& what);
Handle group(hid_t id, const std::string& what);
Handle dataset(hid_t id, const std::string& what);
Handle dataspace(hid_t id, const std::string& what);
Handle datatype(hid_t id, const std::string& what);
Handle plist(hid_t id, const std::string& what);
Handle attribute(hid_t id, const std::string& what);

// File access for checkpoints on `comm`: the MPI-IO driver, collective metadata reads and writes, alignment of
// large objects to the file system block, metadata aggregated into 1 MiB blocks, superblock >= v2 (checksummed
// metadata). `dir_for_block_size` is a directory on the target file system.
Handle mpio_file_access(MPI_Comm comm, const std::string& dir_for_block_size);
// Dataset transfer with collective MPI-IO.
Handle collective_transfer();

bool link_exists(hid_t location, const std::string& path);
// "" when every link on `path` (an existing one) is a hard link, as hsdp writes them; else what the first other one
// is ("a soft link to /model/x", "an external link"): readers refuse it rather than follow it.
std::string link_not_hard(hid_t location, const std::string& path);
std::vector<std::int64_t> dataset_shape(hid_t dataset);

void write_attribute(hid_t object, const std::string& name, std::int64_t value);
void write_attribute(hid_t object, const std::string& name, std::uint64_t value);
void write_attribute(hid_t object, const std::string& name, double value);
void write_attribute(hid_t object, const std::string& name, const std::string& value);
bool has_attribute(hid_t object, const std::string& name);
// Throw a checkpoint Error naming `where` and the attribute when it is missing or of another class.
std::int64_t read_int_attribute(hid_t object, const std::string& name, const std::string& where);
std::uint64_t read_uint_attribute(hid_t object, const std::string& name, const std::string& where);
double read_real_attribute(hid_t object, const std::string& name, const std::string& where);
std::string read_string_attribute(hid_t object, const std::string& name, const std::string& where);

// Shape as "[a, b]".
std::string shape_text(const std::vector<std::int64_t>& shape);

}  // namespace hsdp::ckpt::h5
