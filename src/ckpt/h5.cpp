#include "h5.hpp"

#include <sys/statvfs.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "hsdp/core/error.hpp"

namespace hsdp::ckpt::h5 {
namespace {

constexpr hsize_t kMetaBlock = hsize_t{1} << 20;  // metadata aggregation block (keeps headers at the front)
constexpr hsize_t kAlignThreshold = hsize_t{1} << 20;
constexpr hsize_t kMaxAlignment = hsize_t{16} << 20;

herr_t innermost(unsigned n, const H5E_error2_t* error, void* out) {
  // The walk starts at the innermost frame (H5E_WALK_UPWARD); keep the first description.
  auto* text = static_cast<std::string*>(out);
  if (n == 0 && error->desc != nullptr) *text = error->desc;
  return 0;
}

[[noreturn]] void throw_checkpoint(const std::string& message) {
  throw Error(ErrorKind::checkpoint, message);
}

hsize_t file_system_block(const std::string& dir) {
  struct statvfs info {};
  if (::statvfs(dir.c_str(), &info) != 0 || info.f_bsize == 0) return 4096;
  return static_cast<hsize_t>(info.f_bsize);
}

}  // namespace

void Handle::close_checked(const std::string& what) {
  if (id_ < 0) return;
  const hid_t id = id_;
  id_ = H5I_INVALID_HID;
  if (close_ != nullptr && close_(id) < 0) fail(what);
}

void silence_errors() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

std::string last_error() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost, &text);
  return text;
}

void fail(const std::string& what) {
  const std::string detail = last_error();
  H5Eclear2(H5E_DEFAULT);
  throw_checkpoint(detail.empty() ? what : what + ": " + detail);
}

hid_t check(hid_t id, const std::string& what) {
  if (id < 0) fail(what);
  return id;
}

void check_status(herr_t status, const std::string& what) {
  if (status < 0) fail(what);
}

Handle file(hid_t id, const std::string& what) {
  return {check(id, what), H5Fclose};
}
Handle group(hid_t id, const std::string& what) {
  return {check(id, what), H5Gclose};
}
Handle dataset(hid_t id, const std::string& what) {
  return {check(id, what), H5Dclose};
}
Handle dataspace(hid_t id, const std::string& what) {
  return {check(id, what), H5Sclose};
}
Handle datatype(hid_t id, const std::string& what) {
  return {check(id, what), H5Tclose};
}
Handle plist(hid_t id, const std::string& what) {
  return {check(id, what), H5Pclose};
}
Handle attribute(hid_t id, const std::string& what) {
  return {check(id, what), H5Aclose};
}

Handle mpio_file_access(MPI_Comm comm, const std::string& dir_for_block_size) {
  Handle fapl = plist(H5Pcreate(H5P_FILE_ACCESS), "creating a file access property list");
  check_status(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL), "selecting the MPI-IO file driver");
  check_status(H5Pset_all_coll_metadata_ops(fapl.get(), true), "enabling collective metadata reads");
  check_status(H5Pset_coll_metadata_write(fapl.get(), true), "enabling collective metadata writes");
  // Objects of 1 MiB or more start on a file system block boundary (at least 1 MiB, for striped file systems),
  // so no two ranks' large writes share a block.
  const hsize_t alignment =
      std::clamp(std::bit_ceil(file_system_block(dir_for_block_size)), kAlignThreshold, kMaxAlignment);
  check_status(H5Pset_alignment(fapl.get(), kAlignThreshold, alignment), "setting the alignment");
  check_status(H5Pset_meta_block_size(fapl.get(), kMetaBlock), "setting the metadata block size");
  check_status(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST), "setting the format bounds");
  return fapl;
}

Handle collective_transfer() {
  Handle dxpl = plist(H5Pcreate(H5P_DATASET_XFER), "creating a transfer property list");
  check_status(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE), "selecting collective transfers");
  return dxpl;
}

bool link_exists(hid_t location, const std::string& path) {
  // H5Lexists needs every intermediate group to exist: walk the path.
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    const std::size_t next = path.find('/', pos + 1);
    const std::string prefix = path.substr(0, next);
    if (!prefix.empty() && prefix != "/") {
      if (H5Lexists(location, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    }
    pos = next;
  }
  return true;
}

std::string link_not_hard(hid_t location, const std::string& path) {
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    const std::size_t next = path.find('/', pos + 1);
    const std::string prefix = path.substr(0, next);
    pos = next;
    if (prefix.empty() || prefix == "/") continue;
    H5L_info_t info{};
    if (H5Lget_info(location, prefix.c_str(), &info, H5P_DEFAULT) < 0) return "unreadable";
    if (info.type == H5L_TYPE_HARD) continue;
    if (info.type == H5L_TYPE_SOFT) {
      std::string target(info.u.val_size, '\0');
      if (H5Lget_val(location, prefix.c_str(), target.data(), target.size(), H5P_DEFAULT) < 0) target.clear();
      target.resize(std::strlen(target.c_str()));
      return prefix + " is a soft link to " + (target.empty() ? "an unreadable target" : target);
    }
    return prefix + (info.type == H5L_TYPE_EXTERNAL ? " is an external link" : " is a user-defined link");
  }
  return "";
}

std::vector<std::int64_t> dataset_shape(hid_t dataset) {
  Handle space = dataspace(H5Dget_space(dataset), "reading a dataset's shape");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail("reading a dataset's rank");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) check_status(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "reading dims");
  return {dims.begin(), dims.end()};
}

namespace {

void write_scalar(hid_t object, const std::string& name, hid_t file_type, hid_t memory_type, const void* value) {
  Handle space = dataspace(H5Screate(H5S_SCALAR), "creating a scalar dataspace");
  if (H5Aexists(object, name.c_str()) > 0) check_status(H5Adelete(object, name.c_str()), "replacing " + name);
  Handle attr = attribute(H5Acreate2(object, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                          "creating attribute " + name);
  check_status(H5Awrite(attr.get(), memory_type, value), "writing attribute " + name);
}

Handle open_attribute(hid_t object, const std::string& name, const std::string& where, H5T_class_t want) {
  if (H5Aexists(object, name.c_str()) <= 0) throw_checkpoint(where + " has no attribute '" + name + "'");
  Handle attr = attribute(H5Aopen(object, name.c_str(), H5P_DEFAULT), where + ": opening attribute " + name);
  Handle type = datatype(H5Aget_type(attr.get()), where + ": attribute type of " + name);
  if (H5Tget_class(type.get()) != want) throw_checkpoint(where + ": attribute '" + name + "' has an unexpected type");
  return attr;
}

}  // namespace

void write_attribute(hid_t object, const std::string& name, std::int64_t value) {
  write_scalar(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}
void write_attribute(hid_t object, const std::string& name, std::uint64_t value) {
  write_scalar(object, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value);
}
void write_attribute(hid_t object, const std::string& name, double value) {
  write_scalar(object, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}
void write_attribute(hid_t object, const std::string& name, const std::string& value) {
  // A fixed-length, NUL-terminated string: h5dump, h5py and every HDF5 version read it without extra types.
  Handle type = datatype(H5Tcopy(H5T_C_S1), "creating a string type");
  check_status(H5Tset_size(type.get(), value.size() + 1), "sizing a string type");
  check_status(H5Tset_strpad(type.get(), H5T_STR_NULLTERM), "string padding");
  write_scalar(object, name, type.get(), type.get(), value.c_str());
}

bool has_attribute(hid_t object, const std::string& name) {
  return H5Aexists(object, name.c_str()) > 0;
}

std::int64_t read_int_attribute(hid_t object, const std::string& name, const std::string& where) {
  Handle attr = open_attribute(object, name, where, H5T_INTEGER);
  std::int64_t value = 0;
  check_status(H5Aread(attr.get(), H5T_NATIVE_INT64, &value), where + ": reading attribute " + name);
  return value;
}

std::uint64_t read_uint_attribute(hid_t object, const std::string& name, const std::string& where) {
  Handle attr = open_attribute(object, name, where, H5T_INTEGER);
  std::uint64_t value = 0;
  check_status(H5Aread(attr.get(), H5T_NATIVE_UINT64, &value), where + ": reading attribute " + name);
  return value;
}

double read_real_attribute(hid_t object, const std::string& name, const std::string& where) {
  Handle attr = open_attribute(object, name, where, H5T_FLOAT);
  double value = 0;
  check_status(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &value), where + ": reading attribute " + name);
  return value;
}

std::string read_string_attribute(hid_t object, const std::string& name, const std::string& where) {
  Handle attr = open_attribute(object, name, where, H5T_STRING);
  Handle type = datatype(H5Aget_type(attr.get()), where + ": attribute type of " + name);
  if (H5Tis_variable_str(type.get()) > 0) {
    char* text = nullptr;
    Handle memory = datatype(H5Tcopy(H5T_C_S1), "creating a string type");
    check_status(H5Tset_size(memory.get(), H5T_VARIABLE), "variable string type");
    check_status(H5Aread(attr.get(), memory.get(), &text), where + ": reading attribute " + name);
    std::string value = text != nullptr ? text : "";
    H5free_memory(text);
    return value;
  }
  const std::size_t size = H5Tget_size(type.get());
  std::vector<char> buffer(size + 1, '\0');
  check_status(H5Aread(attr.get(), type.get(), buffer.data()), where + ": reading attribute " + name);
  return std::string(buffer.data(), ::strnlen(buffer.data(), size));
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace hsdp::ckpt::h5
