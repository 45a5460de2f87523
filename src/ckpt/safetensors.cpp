#include "safetensors.hpp"

#include <algorithm>
#include <bit>
#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "hsdp/core/json.hpp"
#include "model_file.hpp"

namespace hsdp::ckpt::safetensors {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors files are little-endian; so is this host");

using model_file::fail;

// The largest header we accept: the format's own readers refuse more than 100 MB.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

std::string shape_json(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

// Bytes per element of the format's dtypes (0: not a safetensors dtype).
std::uint64_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, std::uint64_t> kSizes{
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I64", 8}, {"U64", 8},
      {"I32", 4}, {"U32", 4}, {"I16", 2}, {"U16", 2},  {"I8", 1},      {"U8", 1},      {"BOOL", 1}};
  const auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

std::uint64_t element_count(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = 1;
  for (const std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

std::vector<std::int64_t> integer_list(const boost::property_tree::ptree& node, const std::string& path,
                                       const std::string& what) {
  std::vector<std::int64_t> values;
  for (const auto& [key, item] : node) {
    if (!key.empty()) fail(path, what + " is not a JSON array");
    const auto value = item.get_value_optional<std::int64_t>();
    if (!value || *value < 0) fail(path, what + " holds '" + item.get_value<std::string>() + "', not a count");
    values.push_back(*value);
  }
  return values;
}

}  // namespace

void write_file(const std::string& path, const std::vector<TensorView>& tensors,
                const std::vector<std::pair<std::string, std::string>>& metadata) {
  JsonLine header;
  if (!metadata.empty()) {
    JsonLine meta;
    for (const auto& [key, value] : metadata) meta.add(key, value);
    header.add_raw("__metadata__", meta.str());
  }
  std::uint64_t offset = 0;
  for (const TensorView& t : tensors) {
    const std::uint64_t bytes = element_count(t.shape) * sizeof(float);
    JsonLine entry;
    entry.add("dtype", "F32");
    entry.add_raw("shape", shape_json(t.shape));
    entry.add_raw("data_offsets", "[" + std::to_string(offset) + "," + std::to_string(offset + bytes) + "]");
    header.add_raw(t.name, entry.str());
    offset += bytes;
  }
  std::string text = header.str();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // the tensor data start 8-byte aligned

  model_file::write_atomically(path, [&](std::FILE* f, const std::string& tmp) {
    const std::uint64_t length = text.size();
    model_file::write_bytes(f, &length, sizeof length, tmp);
    model_file::write_bytes(f, text.data(), text.size(), tmp);
    for (const TensorView& t : tensors) {
      model_file::write_bytes(f, t.data, element_count(t.shape) * sizeof(float), tmp);
    }
  });
}

File::File(const std::string& path) : path_(path) {
  std::error_code ec;
  const std::uint64_t file_bytes = std::filesystem::file_size(path, ec);
  if (ec) fail(path, "cannot read: " + ec.message());
  model_file::FilePtr f = model_file::open_file(path, "rb");
  std::uint64_t header_bytes = 0;
  if (file_bytes < sizeof header_bytes || std::fread(&header_bytes, sizeof header_bytes, 1, f.get()) != 1) {
    fail(path, "shorter than the 8-byte header length of a safetensors file");
  }
  if (header_bytes > kMaxHeaderBytes || header_bytes > file_bytes - sizeof header_bytes) {
    fail(path, "not a safetensors file: its header length " + std::to_string(header_bytes) +
                   " does not fit the file's " + std::to_string(file_bytes) + " bytes");
  }
  std::string text(header_bytes, '\0');
  if (std::fread(text.data(), 1, text.size(), f.get()) != text.size()) fail(path, "read failed in the header");
  data_.resize(file_bytes - sizeof header_bytes - header_bytes);
  if (std::fread(data_.data(), 1, data_.size(), f.get()) != data_.size()) fail(path, "read failed in the data");

  if (text.empty() || text.front() != '{') fail(path, "not a safetensors file: its header does not start with '{'");
  model_file::check_json_nesting(text, path);
  boost::property_tree::ptree root;
  try {
    std::istringstream in(text);
    boost::property_tree::read_json(in, root);
  } catch (const boost::property_tree::json_parser_error& e) {
    fail(path, "the safetensors header is not valid JSON: " + e.message());
  }
  // Child keys hold tensor names verbatim (dots included); only path lookups would split them.
  for (const auto& [name, node] : root) {
    if (name == "__metadata__") {
      for (const auto& [key, value] : node) metadata_[key] = value.get_value<std::string>();
      continue;
    }
    const std::string what = "tensor '" + name + "'";
    if (tensors_.count(name) > 0) fail(path, what + " appears twice in the header");
    TensorEntry entry;
    const auto dtype = node.get_child_optional("dtype");
    const auto shape = node.get_child_optional("shape");
    const auto offsets = node.get_child_optional("data_offsets");
    if (!dtype || !shape || !offsets) fail(path, what + " lacks dtype, shape or data_offsets");
    entry.dtype = dtype->get_value<std::string>();
    entry.shape = integer_list(*shape, path, what + "'s shape");
    const std::vector<std::int64_t> range = integer_list(*offsets, path, what + "'s data_offsets");
    if (range.size() != 2 || range[0] > range[1] || static_cast<std::uint64_t>(range[1]) > data_.size()) {
      fail(path, what + "'s data_offsets lie outside the " + std::to_string(data_.size()) + "-byte data section");
    }
    entry.begin = static_cast<std::uint64_t>(range[0]);
    entry.end = static_cast<std::uint64_t>(range[1]);
    const std::uint64_t element_bytes = dtype_bytes(entry.dtype);
    if (element_bytes == 0) fail(path, what + " has dtype '" + entry.dtype + "', not a safetensors dtype");
    if (entry.end - entry.begin != element_count(entry.shape) * element_bytes) {
      fail(path, what + " holds " + std::to_string(entry.end - entry.begin) + " bytes, its shape " +
                     shape_json(entry.shape) + " of " + entry.dtype + " needs " +
                     std::to_string(element_count(entry.shape) * element_bytes));
    }
    tensors_[name] = std::move(entry);
  }
  check_layout();
}

// As the format defines it: the tensors' byte ranges tile the data section, with no overlap and no byte that
// belongs to no tensor. A header length off by a few bytes (the tensors' data shifted) or trailing bytes end here.
void File::check_layout() const {
  std::vector<std::pair<const std::string*, const TensorEntry*>> order;
  for (const auto& [name, entry] : tensors_) order.emplace_back(&name, &entry);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  std::uint64_t covered = 0;
  const std::string* previous = nullptr;
  for (const auto& [name, entry] : order) {
    if (entry->begin < covered) {
      fail(path_, "tensor '" + *name + "'s data_offsets [" + std::to_string(entry->begin) + ", " +
                      std::to_string(entry->end) + ") overlap tensor '" + *previous + "'s");
    }
    if (entry->begin > covered) {
      fail(path_, "bytes [" + std::to_string(covered) + ", " + std::to_string(entry->begin) +
                      ") of the data section belong to no tensor (a wrong header length, or a damaged file)");
    }
    covered = entry->end;
    previous = name;
  }
  if (covered != data_.size()) {
    fail(path_, "bytes [" + std::to_string(covered) + ", " + std::to_string(data_.size()) +
                    ") of the data section belong to no tensor (a wrong header length, or trailing bytes)");
  }
}

std::vector<float> File::floats(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(path_, "has no tensor '" + name + "'");
  if (it->second.dtype != "F32") {
    fail(path_, "tensor '" + name + "' is " + it->second.dtype + "; only F32 (float32) weights are read");
  }
  std::vector<float> values((it->second.end - it->second.begin) / sizeof(float));
  std::memcpy(values.data(), data_.data() + it->second.begin, values.size() * sizeof(float));
  return values;
}

}  // namespace hsdp::ckpt::safetensors
