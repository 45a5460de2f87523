#pragma once
// The FLOPs of a training step, as hsdp counts them for MFU (hsdp-bench-train-gpu --help, hsdp-train): per token
// 6 P_matmul + 6 L T C, P_matmul = the parameters the GEMMs read per token (GPT-2: 12 L C^2 + V C with the tied head;
// a Llama: L (2 C^2 + 2 C K + 3 C F) + V C, K its key/value width and F its MLP width), and 6 L T C for attention's
// two T-long products forward and backward: PaLM's (and nanoGPT's) 12 L T C halved, the half of the scores causal
// masking leaves out (so an MFU here reads about 7% below theirs for GPT-2 124M at T = 1024); recomputation under
// activation checkpointing is not counted. hsdp-plan's compute rate keeps PaLM's 12 L T C, in its calibration and its
// predictions alike (tools/plan/cost.cpp).
#include <cstdint>
#include <string_view>

#include "hsdp/model/config.hpp"

namespace hsdp::model {

double matmul_params(const GptConfig& config);
double train_flops(const GptConfig& config, std::int64_t tokens, int seq_len);

// A GPU's dense bf16 tensor-core peak in TFLOP/s by its name (NVIDIA's data sheets, without sparsity: H100 SXM and
// H200 989, H100 PCIe 756, A100 312); 0 when the name is not in the table.
double dense_bf16_peak_tflops(std::string_view device_name);

}  // namespace hsdp::model
