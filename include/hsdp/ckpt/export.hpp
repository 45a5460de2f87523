#pragma once
// Model files other programs read, from (and to) hsdp's unit buffers (ModelLayout storage: wte padded to
// padded_vocab_size rows).
//
// safetensors (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N, N bytes of
// JSON {name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}} padded with
// spaces to a multiple of 8, then the tensor bytes back to back. Names and shapes are nanoGPT's state_dict
// (transformer.wte.weight is [vocab_size, C]). nanoGPT ties lm_head.weight to wte, and its state_dict lists both;
// we write lm_head.weight as a copy of wte (unless `tied_lm_head` is false) so that
//     model.load_state_dict(safetensors.torch.load_file(path))
// works with strict loading on PyTorch >= 2.0, where nanoGPT's attention uses flash attention and registers no
// `attn.bias` buffer. With older PyTorch (or without the copy) pass strict=False: the missing keys are then the
// `attn.bias` causal masks (buffers nanoGPT rebuilds itself) and, without the copy, lm_head.weight (tied to wte).
// nanoGPT must be built with vocab_size = the checkpoint's vocab_size (e.g. 50257, not the padded 50304).
//
// llm.c (karpathy/llm.c, train_gpt2.c): a header of 256 int32 {20240326, 3, maxT, V, L, NH, C, Vp, 0, ...}, then
// every parameter as fp32 in llm.c's order: wte [Vp, C] (rows >= V zero), wpe [maxT, C], then for each kind every
// layer's tensor (ln1w [L, C], ln1b [L, C], qkvw [L, 3C, C], qkvb [L, 3C], attprojw [L, C, C], attprojb [L, C],
// ln2w [L, C], ln2b [L, C], fcw [L, 4C, C], fcb [L, 4C], fcprojw [L, C, 4C], fcprojb [L, C]), lnfw [C], lnfb [C].
// Linear weights are [out, in] in both, so no tensor is transposed.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hsdp/core/buffer.hpp"
#include "hsdp/model/layout.hpp"

namespace hsdp::ckpt {

inline constexpr std::int32_t kLlmcMagic = 20240326;
inline constexpr std::int32_t kLlmcVersion = 3;  // fp32 with padded vocabulary

struct SafetensorsOptions {
  bool tied_lm_head = true;                                   // also write lm_head.weight (a copy of wte)
  std::vector<std::pair<std::string, std::string>> metadata;  // "__metadata__" (string values)
};

// Each writes `path` through `path.tmp` and a rename; a checkpoint Error names the file on failure.
void write_safetensors(const std::string& path, const model::ModelLayout& layout,
                       const std::vector<Buffer<float>>& unit_params, const SafetensorsOptions& options = {});
void write_llmc(const std::string& path, const model::ModelLayout& layout,
                const std::vector<Buffer<float>>& unit_params);

struct LlmcModel {
  model::GptConfig config;
  std::vector<Buffer<float>> unit_params;  // one per unit of ModelLayout(config)
  std::size_t nonzero_padding = 0;         // values in wte rows >= V that were not zero (dropped by hsdp)
};
// Reads an llm.c fp32 model file; a checkpoint Error names the file and what is wrong (magic, version, size).
LlmcModel read_llmc(const std::string& path);

}  // namespace hsdp::ckpt
