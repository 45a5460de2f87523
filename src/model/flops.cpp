#include "hsdp/model/flops.hpp"

namespace hsdp::model {

double matmul_params(const GptConfig& c) {
  const double C = c.n_embd, L = c.n_layer, V = c.vocab_size;
  if (!c.llama()) return L * 12.0 * C * C + V * C;
  const double K = static_cast<double>(c.kv_heads()) * c.head_size(), F = c.ffn();
  return L * (2.0 * C * C + 2.0 * C * K + 3.0 * C * F) + V * C;
}

double train_flops(const GptConfig& c, std::int64_t tokens, int seq_len) {
  return static_cast<double>(tokens) *
         (6.0 * matmul_params(c) + 6.0 * static_cast<double>(c.n_layer) * seq_len * static_cast<double>(c.n_embd));
}

double dense_bf16_peak_tflops(std::string_view name) {
  const auto has = [&](std::string_view s) { return name.find(s) != std::string_view::npos; };
  if (has("H200")) return 989.0;
  if (has("H100") && has("PCIe")) return 756.0;
  if (has("H100") && !has("NVL")) return 989.0;
  if (has("A100")) return 312.0;
  return 0.0;
}

}  // namespace hsdp::model
