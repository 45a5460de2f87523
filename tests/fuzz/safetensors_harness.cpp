// Fuzz harness of the safetensors reader (hsdp-ckpt import --format hf reads model.safetensors through it): the input
// is the file. It must be refused with a checkpoint Error or read; a file that is read must have the layout the
// format defines (every tensor's range inside the data section, the ranges tiling it: no overlap, no stray byte),
// and every F32 tensor must read back with as many values as its shape has elements.
#include <cstdint>
#include <string>

#include "harness.hpp"
#include "safetensors.hpp"

namespace {

void read_safetensors(const std::uint8_t* data, std::size_t size) {
  static const std::string path = hsdp::fuzz::scratch_dir() + "/model.safetensors";
  hsdp::fuzz::write_file(path, {data, size});
  const hsdp::ckpt::safetensors::File file(path);
  std::uint64_t covered = 0;
  for (const auto& [name, entry] : file.tensors()) {
    covered += entry.end - entry.begin;
    if (entry.dtype != "F32") continue;
    std::uint64_t elements = 1;
    for (const std::int64_t d : entry.shape) elements *= static_cast<std::uint64_t>(d);
    if (file.floats(name).size() != elements) {
      throw hsdp::fuzz::PropertyViolation("f32_values", "tensor '" + name + "' read back another element count");
    }
  }
  std::uint64_t header = 0;
  for (int i = 0; i < 8 && static_cast<std::size_t>(i) < size; ++i) header |= std::uint64_t{data[i]} << (8 * i);
  if (covered != size - 8 - header) {
    throw hsdp::fuzz::PropertyViolation("ranges_tile_data", "the tensors cover " + std::to_string(covered) +
                                                                " bytes of a data section of " +
                                                                std::to_string(size - 8 - header));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return hsdp::fuzz::finish(hsdp::fuzz::run_classified([&] { read_safetensors(data, size); }));
}
