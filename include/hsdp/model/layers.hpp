#pragma once
// The GPT-2 layers as llm.c writes them: a *_forward / *_backward pair of plain functions per layer over
// flat, row-major buffers, templated on T (float or double). N = B * T rows; C channels; NH heads.
//
// Contract of every *_backward: it ADDS (+=) into each gradient it produces (d-inputs, d-weights,
// d-biases), so callers zero scratch first and parameter gradients accumulate over micro-batches.
// The one exception is softmax_xent_backward, which writes d-logits over the probabilities in place.
//
// Every loop is deterministic: each output element is produced by one thread in a fixed order of
// operations that does not depend on the number of threads (no atomics, no per-thread partial sums).
#include <cstddef>
#include <cstdint>

namespace hsdp::model {

inline constexpr double kLayerNormEps = 1e-5;

// out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]; wpe (and dwpe) null: no position table (a Llama's embedding).
template <typename T>
void encoder_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, int B, int T_, int C);
template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens, int B, int T_, int C);

// out = (inp - mean) * rstd * weight + bias per row; mean and rstd [N] are kept for backward.
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int N, int C);
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int N, int C);

// out[N, OC] = inp[N, IC] @ weight[OC, IC]^T + bias[OC] (bias may be null: then dbias is ignored too).
template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int IC, int OC);
template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int IC,
                     int OC);

// The LM head tied to wte [Vp, C]: logits[N, :V] = inp[N, C] @ wte[:V]^T with row stride Vp. Only the V
// real rows of wte take part: padded logit columns are never written and padded rows get no gradient.
template <typename T>
void lm_head_forward(T* logits, const T* inp, const T* wte, int N, int C, int V, int Vp);
template <typename T>
void lm_head_backward(T* dinp, T* dwte, const T* dlogits, const T* inp, const T* wte, int N, int C, int V, int Vp);

// Causal multi-head self-attention over qkv [B, T, 3C] (q | k | v, head h at channels h*hs..(h+1)*hs).
// att [B, NH, T, T] keeps the softmax probabilities (zero above the diagonal); out [B, T, C].
template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int C, int NH);
// The attention of one new position t (a single sequence) over a key/value cache kv [t + 1, 2C] (row j: k_j | v_j,
// head h at channels h*hs..(h+1)*hs of each): out [C] and att_row [NH, t + 1] are the row t of attention_forward
// over the same keys and values, computed by the same code. q [C] is the new position's query.
template <typename T>
void attention_decode_forward(T* out, T* att_row, const T* q, const T* kv, int t, int C, int NH);
// scratch: B * NH * T elements.
template <typename T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int T_, int C,
                        int NH);

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), evaluated as the identical
// x * sigmoid(2 u) so the only transcendental is one exp.
template <typename T>
void gelu_forward(T* out, const T* inp, std::size_t n);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n);

// out = inp1 + inp2
template <typename T>
void residual_forward(T* out, const T* inp1, const T* inp2, std::size_t n);
template <typename T>
void residual_backward(T* dinp1, T* dinp2, const T* dout, std::size_t n);

// Fused softmax + cross-entropy over the first V of each row's Vp logits:
//   losses[n] = -log softmax(logits[n, :V])[targets[n]]
// probs [N, Vp] may alias logits; columns V..Vp-1 are never read or written.
template <typename T>
void softmax_xent_forward(T* probs, T* losses, const T* logits, const std::int32_t* targets, int N, int V, int Vp);
// The losses only (evaluation): nothing but `losses` is written.
template <typename T>
void softmax_xent_loss(T* losses, const T* logits, const std::int32_t* targets, int N, int V, int Vp);
// dlogits[n, :V] = dloss_per_row * (probs[n, :V] - onehot(targets[n])); dlogits may alias probs.
template <typename T>
void softmax_xent_backward(T* dlogits, const T* probs, const std::int32_t* targets, T dloss_per_row, int N, int V,
                           int Vp);

}  // namespace hsdp::model
