#include "hsdp/ckpt/export.hpp"

#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "hsdp/core/error.hpp"
#include "hsdp/core/json.hpp"

namespace hsdp::ckpt {
namespace {

static_assert(std::endian::native == std::endian::little, "model files are little-endian; so is this host");

constexpr std::size_t kLlmcHeaderInts = 256;
constexpr const char* kBlockTensors[] = {
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
    "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::checkpoint, "'" + path + "': " + what);
}

using FilePtr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

FilePtr open_file(const std::string& path, const char* mode) {
  FilePtr f(std::fopen(path.c_str(), mode), std::fclose);
  if (!f) fail(path, std::string("cannot open: ") + std::strerror(errno));
  return f;
}

void write_bytes(std::FILE* f, const void* data, std::size_t bytes, const std::string& path) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, f) != bytes)
    fail(path, std::string("write failed: ") + std::strerror(errno));
}

// Writes through `path.tmp`, renamed over `path` once complete.
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

const float* param_data(const std::vector<Buffer<float>>& units, const model::ParamInfo& p) {
  return units[static_cast<std::size_t>(p.unit)].data() + p.offset;
}

// The parameters in llm.c's file order, each written with its stored size (wte: Vp rows).
std::vector<const model::ParamInfo*> llmc_order(const model::ModelLayout& layout) {
  std::vector<const model::ParamInfo*> order = {&layout.param("transformer.wte.weight"),
                                                &layout.param("transformer.wpe.weight")};
  for (const char* suffix : kBlockTensors) {
    for (int l = 0; l < layout.config().n_layer; ++l) {
      order.push_back(&layout.param("transformer.h." + std::to_string(l) + "." + suffix));
    }
  }
  order.push_back(&layout.param("transformer.ln_f.weight"));
  order.push_back(&layout.param("transformer.ln_f.bias"));
  return order;
}

std::string shape_json(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace

void write_safetensors(const std::string& path, const model::ModelLayout& layout,
                       const std::vector<Buffer<float>>& unit_params, const SafetensorsOptions& options) {
  struct Entry {
    std::string name;
    const model::ParamInfo* param;
  };
  std::vector<Entry> entries;
  for (const model::ParamInfo& p : layout.params()) entries.push_back({p.name, &p});
  if (options.tied_lm_head) entries.push_back({"lm_head.weight", &layout.param("transformer.wte.weight")});

  JsonLine header;
  if (!options.metadata.empty()) {
    JsonLine meta;
    for (const auto& [key, value] : options.metadata) meta.add(key, value);
    header.add_raw("__metadata__", meta.str());
  }
  std::uint64_t offset = 0;
  for (const Entry& e : entries) {
    const std::uint64_t bytes = e.param->logical_numel() * sizeof(float);
    JsonLine tensor;
    tensor.add("dtype", "F32");
    tensor.add_raw("shape", shape_json(e.param->logical_shape));
    tensor.add_raw("data_offsets", "[" + std::to_string(offset) + "," + std::to_string(offset + bytes) + "]");
    header.add_raw(e.name, tensor.str());
    offset += bytes;
  }
  std::string text = header.str();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // the tensor data start 8-byte aligned

  write_atomically(path, [&](std::FILE* f, const std::string& tmp) {
    const std::uint64_t length = text.size();
    write_bytes(f, &length, sizeof length, tmp);
    write_bytes(f, text.data(), text.size(), tmp);
    for (const Entry& e : entries) {
      write_bytes(f, param_data(unit_params, *e.param), e.param->logical_numel() * sizeof(float), tmp);
    }
  });
}

void write_llmc(const std::string& path, const model::ModelLayout& layout,
                const std::vector<Buffer<float>>& unit_params) {
  const model::GptConfig& c = layout.config();
  std::array<std::int32_t, kLlmcHeaderInts> header{};
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersion;
  header[2] = c.block_size;
  header[3] = c.vocab_size;
  header[4] = c.n_layer;
  header[5] = c.n_head;
  header[6] = c.n_embd;
  header[7] = c.padded_vocab_size;
  write_atomically(path, [&](std::FILE* f, const std::string& tmp) {
    write_bytes(f, header.data(), sizeof header, tmp);
    for (const model::ParamInfo* p : llmc_order(layout)) {
      write_bytes(f, param_data(unit_params, *p), p->numel * sizeof(float), tmp);
    }
  });
}

LlmcModel read_llmc(const std::string& path) {
  FilePtr f = open_file(path, "rb");
  std::array<std::int32_t, kLlmcHeaderInts> header{};
  if (std::fread(header.data(), sizeof(std::int32_t), header.size(), f.get()) != header.size()) {
    fail(path, "shorter than llm.c's 1024-byte header");
  }
  if (header[0] != kLlmcMagic) {
    fail(path, "not an llm.c model file (magic " + std::to_string(header[0]) + ", expected " +
                   std::to_string(kLlmcMagic) + ")");
  }
  if (header[1] != kLlmcVersion) {
    fail(path, "llm.c model file version " + std::to_string(header[1]) + " is not supported (only version " +
                   std::to_string(kLlmcVersion) + ", fp32 weights" +
                   (header[1] == 5 ? "; version 5 holds bf16 weights" : "") + ")");
  }
  LlmcModel m;
  m.config.block_size = header[2];
  m.config.vocab_size = header[3];
  m.config.n_layer = header[4];
  m.config.n_head = header[5];
  m.config.n_embd = header[6];
  m.config.padded_vocab_size = header[7];
  try {
    m.config.validate();
  } catch (const Error& e) {
    fail(path, std::string("the header describes an impossible model: ") + e.what());
  }
  const model::ModelLayout layout(m.config);
  const std::uint64_t expected = sizeof header + layout.total_numel() * sizeof(float);
  std::error_code ec;
  const std::uint64_t actual = std::filesystem::file_size(path, ec);
  if (ec || actual != expected) {
    fail(path, "holds " + std::to_string(actual) + " bytes but its header describes " + std::to_string(expected) +
                   " (" + std::to_string(layout.total_numel()) + " parameters)");
  }
  for (const model::UnitInfo& u : layout.units()) m.unit_params.emplace_back(u.numel);
  for (const model::ParamInfo* p : llmc_order(layout)) {
    float* data = m.unit_params[static_cast<std::size_t>(p->unit)].data() + p->offset;
    if (std::fread(data, sizeof(float), p->numel, f.get()) != p->numel) fail(path, "read failed at " + p->name);
  }
  const model::ParamInfo& wte = layout.param("transformer.wte.weight");
  const float* padding = param_data(m.unit_params, wte) + wte.logical_numel();
  for (std::size_t i = 0; i < wte.numel - wte.logical_numel(); ++i) m.nonzero_padding += padding[i] != 0.0f;
  return m;
}

}  // namespace hsdp::ckpt
