#pragma once
// Private: the safetensors container (https://github.com/huggingface/safetensors) for F32 tensors. An 8-byte
// little-endian header length N, N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]},
// "__metadata__": {string: string}} padded with spaces to a multiple of 8, then the tensor bytes back to back
// (offsets relative to the end of the header).
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hsdp::ckpt::safetensors {

struct TensorView {
  std::string name;
  std::vector<std::int64_t> shape;
  const float* data;  // product(shape) values
};

// Writes the tensors in the given order (header and data) through `path.tmp` and a rename.
void write_file(const std::string& path, const std::vector<TensorView>& tensors,
                const std::vector<std::pair<std::string, std::string>>& metadata);

struct TensorEntry {
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte range in the data section
  std::uint64_t end = 0;
};

// A whole safetensors file in memory, its header validated: JSON of the shape above, no name twice, every tensor's
// byte range of the size its dtype and shape imply, the ranges tiling the data section exactly (no overlap, no
// byte outside every tensor: a header length a few bytes off would shift every tensor). Only F32 tensors can be
// read (floats() refuses others). A checkpoint Error names the file and what is wrong.
class File {
 public:
  explicit File(const std::string& path);
  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::map<std::string, TensorEntry>& tensors() const { return tensors_; }
  // A copy of an F32 tensor's values (a checkpoint Error for another dtype or a missing name).
  std::vector<float> floats(const std::string& name) const;

 private:
  void check_layout() const;

  std::string path_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, TensorEntry> tensors_;
  std::vector<char> data_;
};

}  // namespace hsdp::ckpt::safetensors
