#pragma once
// KvDecoder<T>: inference one position at a time with a key/value cache, for text generation (GPT-2 or Llama).
//
// step(token) runs the next position through the embedding, every block and the head with the layers' own kernels
// (one row each), appends the position's keys and values to its block's cache ([block_size, 2C] per block: k | v
// per row; a Llama's [block_size, 2K], its keys rotated at their position) and attends over the cached positions
// (attention_decode_forward, gqa_attention_decode_forward). Decoding n tokens therefore evaluates
// each block n times on one row, instead of the n (n + 1) / 2 rows of a full forward per new token.
//
// The logits of position t equal the row t of Gpt::evaluate over the same tokens up to rounding: attention runs
// the same code, but a GEMM of one row may sum in another order than one of many rows.
#include <cstdint>
#include <span>

#include "hsdp/core/buffer.hpp"
#include "hsdp/core/memory.hpp"
#include "hsdp/model/layout.hpp"

namespace hsdp::model {

template <typename T>
class KvDecoder {
 public:
  // Buffers (the cache of block_size positions and one row of activations) are charged to
  // MemCategory::activations.
  KvDecoder(const ModelLayout& layout, MemoryAccountant& accountant);

  const ModelLayout& layout() const { return layout_; }
  int position() const { return position_; }  // positions cached, the next step's position
  int capacity() const { return layout_.config().block_size; }
  void reset() { position_ = 0; }  // forget the cache

  // Runs `token` at position() with `params` (one pointer per unit, as Gpt::forward) and returns the logits of
  // the next token ([vocab_size], valid until the next call). A data Error if the id is outside the vocabulary,
  // a config Error if the cache is full (position() == block_size: reset and run a shorter context).
  std::span<const T> step(std::int32_t token, std::span<const T* const> params);

 private:
  void block_step(int block, const T* params);
  void llama_block_step(int block, const T* params);

  ModelLayout layout_;
  int C_, NH_, L_, V_, Vp_, K_, F_;
  int position_ = 0;

  Buffer<T> kv_;  // [L, block_size, 2C] (a Llama's: 2K)
  // one row of activations (a Llama's: qkv_ q | k | v, fch_ gate, fch_gelu_ up, swiglu_)
  Buffer<T> x_, ln_, mean_, rstd_, qkv_, atty_, att_row_, branch_out_, res2_, fch_, fch_gelu_, swiglu_, logits_;
};

extern template class KvDecoder<float>;
extern template class KvDecoder<double>;

}  // namespace hsdp::model
