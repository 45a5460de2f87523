#include "hsdp/ckpt/export.hpp"

#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "hsdp/core/error.hpp"
#include "model_file.hpp"
#include "safetensors.hpp"

namespace hsdp::ckpt {
namespace {

using model_file::fail;
using model_file::FilePtr;
using model_file::open_file;
using model_file::write_atomically;
using model_file::write_bytes;

static_assert(std::endian::native == std::endian::little, "model files are little-endian; so is this host");

constexpr std::size_t kLlmcHeaderInts = 256;
constexpr const char* kBlockTensors[] = {
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
    "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};

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

}  // namespace

void write_safetensors(const std::string& path, const model::ModelLayout& layout,
                       const std::vector<Buffer<float>>& unit_params, const SafetensorsOptions& options) {
  std::vector<safetensors::TensorView> tensors;
  for (const model::ParamInfo& p : layout.params()) {
    tensors.push_back({p.name, p.logical_shape, param_data(unit_params, p)});
  }
  if (options.tied_lm_head) {
    const model::ParamInfo& wte =
        layout.param(layout.config().llama() ? "model.embed_tokens.weight" : "transformer.wte.weight");
    tensors.push_back({"lm_head.weight", wte.logical_shape, param_data(unit_params, wte)});
  }
  safetensors::write_file(path, tensors, options.metadata);
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
