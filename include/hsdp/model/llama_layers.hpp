#pragma once
// The Llama family's layers beside GPT-2's (layers.hpp), with the same contract: plain *_forward / *_backward
// functions over flat row-major buffers, templated on T (float or double); every *_backward ADDS into the gradients
// it produces; every loop is deterministic whatever the thread count. N = B * T rows.
//
//   RMSNorm   out = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps) per row (no mean, no bias).
//   RoPE      rotary position embeddings in Hugging Face's "rotate half" layout: in a head of hs channels, channel i
//             and channel i + hs/2 (i < hs/2) turn by the angle pos * theta^(-2i/hs). Hugging Face's Llama weights
//             use this layout (its conversion script permutes Meta's interleaved wq and wk into it), so a model
//             trained here exports with no permutation.
//   SwiGLU    out = silu(gate) * up elementwise (the MLP's gate and up projections, before its down projection).
//   GQA       causal attention of NH query heads over NKV key/value heads (grouped-query attention: query head h
//             reads key/value head h / (NH / NKV); NKV = NH is multi-head attention), on separate q [N, NH*hs],
//             k and v [N, NKV*hs] buffers.
#include <cstddef>
#include <cstdint>

namespace hsdp::model {

// rstd [N] is kept for backward.
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, double eps);
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int N, int C);

// In place on x [B, T, H, hs] (H heads of hs channels, hs even), positions t = 0..T-1 of each sequence (offset: the
// position of row 0, for a decoder's cache). The backward turns the gradient by the opposite angle, in place.
template <typename T>
void rope_forward(T* x, int B, int T_, int H, int hs, double theta, int offset = 0);
template <typename T>
void rope_backward(T* dx, int B, int T_, int H, int hs, double theta, int offset = 0);

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, std::size_t n);
template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, std::size_t n);

// q [B, T, NH*hs], k and v [B, T, NKV*hs] -> out [B, T, NH*hs]; att [B, NH, T, T] keeps the probabilities (zero above
// the diagonal). NH must be a multiple of NKV.
template <typename T>
void gqa_attention_forward(T* out, T* att, const T* q, const T* k, const T* v, int B, int T_, int NH, int NKV, int hs);
// The attention of one new position t (a single sequence) over a key/value cache kv [t + 1, 2 K] (row j: k_j | v_j,
// K = NKV * hs): out [NH * hs] and att_row [NH, t + 1] are row t of gqa_attention_forward over the same keys and
// values, computed by the same code (q: the new position's query, already rotated).
template <typename T>
void gqa_attention_decode_forward(T* out, T* att_row, const T* q, const T* kv, int t, int NH, int NKV, int hs);
template <typename T>
void gqa_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* att,
                            int B, int T_, int NH, int NKV, int hs);

}  // namespace hsdp::model
