#include "generate.hpp"

#include <chrono>

#include "hsdp/core/error.hpp"
#include "hsdp/model/gpt.hpp"
#include "hsdp/model/kv_decoder.hpp"

namespace hsdp::sample_tool {
namespace {

// The next token's logits, from a cached decode or from full forwards over the same window of context.
class NextTokenModel {
 public:
  NextTokenModel(const model::ModelLayout& layout, std::span<const float* const> params, bool kv_cache)
      : layout_(layout), params_(params), kv_cache_(kv_cache), decoder_(layout, accountant_) {}

  // Logits after the whole window `context`, forgetting what was cached.
  std::span<const float> restart(std::span<const std::int32_t> context) {
    positions_run_ += static_cast<std::int64_t>(context.size());
    if (!kv_cache_) return full_forward(context);
    decoder_.reset();
    std::span<const float> logits;
    for (const std::int32_t token : context) logits = decoder_.step(token, params_);
    return logits;
  }
  // Logits after `context`, which extends the previous call's context by its last token.
  std::span<const float> extend(std::span<const std::int32_t> context) {
    if (!kv_cache_) {
      positions_run_ += static_cast<std::int64_t>(context.size());
      return full_forward(context);
    }
    ++positions_run_;
    return decoder_.step(context.back(), params_);
  }
  std::int64_t positions_run() const { return positions_run_; }

 private:
  std::span<const float> full_forward(std::span<const std::int32_t> context) {
    const int n = static_cast<int>(context.size());
    model::Gpt<float> gpt(layout_, 1, n, accountant_);
    gpt.evaluate(context, context, params_);  // targets are unused here: any valid ids
    const auto row = gpt.logits().subspan(static_cast<std::size_t>(n - 1) * layout_.config().padded_vocab_size,
                                          static_cast<std::size_t>(layout_.config().vocab_size));
    last_logits_.assign(row.begin(), row.end());
    return last_logits_;
  }

  const model::ModelLayout& layout_;
  std::span<const float* const> params_;
  bool kv_cache_;
  MemoryAccountant accountant_;
  model::KvDecoder<float> decoder_;
  std::vector<float> last_logits_;
  std::int64_t positions_run_ = 0;
};

}  // namespace

GenerateResult generate(const model::ModelLayout& layout, std::span<const float* const> params,
                        std::span<const std::int32_t> prompt, const GenerateOptions& options, TokenSampler& sampler) {
  const auto block = static_cast<std::size_t>(layout.config().block_size);
  if (prompt.empty() || prompt.size() > block) {
    throw_internal("generate: the prompt must hold 1 to block_size tokens, got " + std::to_string(prompt.size()));
  }
  const std::size_t keep = (block + 1) / 2;  // tokens that stay when the window is full
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::int32_t> all(prompt.begin(), prompt.end());
  std::size_t window_start = 0;
  NextTokenModel model(layout, params, options.kv_cache);
  std::span<const float> logits = model.restart(all);
  GenerateResult result;
  for (int i = 0; i < options.max_new_tokens; ++i) {
    const std::int32_t next = sampler.choose(logits);
    all.push_back(next);
    result.tokens.push_back(next);
    if (i + 1 == options.max_new_tokens) break;  // no logits needed after the last token
    if (all.size() - window_start > block) {
      window_start = all.size() - keep;
      logits = model.restart(std::span(all).subspan(window_start));
    } else {
      logits = model.extend(std::span(all).subspan(window_start));
    }
  }
  result.positions_run = model.positions_run();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::vector<std::vector<float>> forward_logits(const model::ModelLayout& layout, std::span<const float* const> params,
                                               std::span<const std::int32_t> prompt) {
  const int n = static_cast<int>(prompt.size());
  MemoryAccountant accountant;
  model::Gpt<float> gpt(layout, 1, n, accountant);
  gpt.evaluate(prompt, prompt, params);
  const auto vp = static_cast<std::size_t>(layout.config().padded_vocab_size);
  const auto v = static_cast<std::size_t>(layout.config().vocab_size);
  std::vector<std::vector<float>> rows;
  for (int t = 0; t < n; ++t) {
    const auto row = gpt.logits().subspan(static_cast<std::size_t>(t) * vp, v);
    rows.emplace_back(row.begin(), row.end());
  }
  return rows;
}

}  // namespace hsdp::sample_tool
