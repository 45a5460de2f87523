// Encoder, layer norm, RMSNorm, RoPE, bias gradient, GELU, SwiGLU, residual and conversions on the GPU (see
// layers.hpp).
#include <cmath>
#include <string>

#include "hsdp/core/error.hpp"
#include "hsdp/device/cuda/kernel_util.cuh"
#include "hsdp/model/cuda/layers.hpp"
#include "hsdp/model/gpu_activations.hpp"

namespace hsdp::model::cuda {
namespace {

namespace detail = hsdp::device::cuda::detail;
using detail::grid_for;
using detail::kWarp;
using detail::load;
using detail::store;
using device::cuda::check_launch;

constexpr int kThreads = 256;
// A column sum splits the rows into this many fixed chunks; the partial sums of a column are then added in
// chunk order, so the result does not depend on scheduling.
constexpr int kColumnChunks = kGpuColumnChunks;  // the arena sizes its scratch by it
constexpr int kColumnWidth = 32;  // columns per block of the partial-sum kernel
constexpr int kColumnRows = 8;    // threads along the rows in that block

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
constexpr double kLayerNormEps = 1e-5;  // hsdp::model::kLayerNormEps

// ---- encoder ----

template <typename T>
__global__ void encoder_forward_kernel(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, int T_, int C,
                                       std::size_t total) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < total;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t n = i / static_cast<std::size_t>(C);
    const std::size_t c = i % static_cast<std::size_t>(C);
    const std::size_t t = n % static_cast<std::size_t>(T_);
    const float position = wpe != nullptr ? load(wpe + t * C + c) : 0.0f;  // a Llama has no position table
    store(out + i, wpe != nullptr ? load(wte + static_cast<std::size_t>(tokens[n]) * C + c) + position
                                  : load(wte + static_cast<std::size_t>(tokens[n]) * C + c));
  }
}

// One block per row n. Only the block of a token's first row writes that token's gradient row, adding every
// row of that token in row order: no atomics, the CPU's order of additions.
template <typename T>
__global__ void encoder_backward_wte_kernel(float* dwte, const T* dout, const std::int32_t* tokens, int N, int C) {
  __shared__ int rows[kThreads];
  __shared__ int warp_offset[kThreads / kWarp + 1];
  const int n = blockIdx.x;
  const std::int32_t token = tokens[n];
  bool earlier = false;
  for (int m = threadIdx.x; m < n; m += blockDim.x) earlier = earlier || tokens[m] == token;
  if (__syncthreads_or(earlier)) return;
  float* grad = dwte + static_cast<std::size_t>(token) * C;
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  for (int m0 = n; m0 < N; m0 += blockDim.x) {
    const int m = m0 + threadIdx.x;
    const bool match = m < N && tokens[m] == token;
    const unsigned ballot = __ballot_sync(detail::kFullMask, match);
    if (lane == 0) warp_offset[warp + 1] = __popc(ballot);
    __syncthreads();
    if (threadIdx.x == 0) {
      warp_offset[0] = 0;
      for (int w = 1; w <= static_cast<int>(blockDim.x / kWarp); ++w) warp_offset[w] += warp_offset[w - 1];
    }
    __syncthreads();
    if (match) rows[warp_offset[warp] + __popc(ballot & ((1u << lane) - 1u))] = m;
    const int found = warp_offset[blockDim.x / kWarp];
    __syncthreads();
    for (int r = 0; r < found; ++r) {
      const T* d = dout + static_cast<std::size_t>(rows[r]) * C;
      for (int c = threadIdx.x; c < C; c += blockDim.x) grad[c] += load(d + c);
    }
    __syncthreads();
  }
}

// dwpe[t, c] += dout[b, t, c] for b in order.
template <typename T>
__global__ void encoder_backward_wpe_kernel(float* dwpe, const T* dout, int B, int T_, int C) {
  const std::size_t total = static_cast<std::size_t>(T_) * C;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < total;
       i += std::size_t{gridDim.x} * blockDim.x) {
    float acc = dwpe[i];
    for (int b = 0; b < B; ++b) acc += load(dout + static_cast<std::size_t>(b) * total + i);
    dwpe[i] = acc;
  }
}

// ---- column sums (deterministic) ----

// What a column sum adds up, per (row, column): the bias gradient (one value) or layer norm's (two).
template <typename T>
struct BiasTerms {
  const T* dout;
  int C;
  __device__ void operator()(int n, int c, float* v) const { v[0] = load(dout + static_cast<std::size_t>(n) * C + c); }
};

template <typename T>
struct LayerNormTerms {
  const T* dout;
  const T* inp;
  const float* mean;
  const float* rstd;
  int C;
  __device__ void operator()(int n, int c, float* v) const {
    const std::size_t i = static_cast<std::size_t>(n) * C + c;
    const float d = load(dout + i);
    v[0] = (load(inp + i) - mean[n]) * rstd[n] * d;
    v[1] = d;
  }
};

template <typename T>
struct RmsNormTerms {
  const T* dout;
  const T* inp;
  const float* rstd;
  int C;
  __device__ void operator()(int n, int c, float* v) const {
    const std::size_t i = static_cast<std::size_t>(n) * C + c;
    v[0] = load(dout + i) * load(inp + i) * rstd[n];
  }
};

// partial[q][chunk][c] = sum over the chunk's rows of terms(n, c)[q]; block (kColumnWidth, kColumnRows).
template <int kQ, typename Terms>
__global__ void column_partials_kernel(float* partial, Terms terms, int N, int C) {
  __shared__ float cell[kQ][kColumnRows][kColumnWidth];
  const int c = blockIdx.x * kColumnWidth + threadIdx.x;
  const int chunk = blockIdx.y;
  const int rows_per_chunk = (N + kColumnChunks - 1) / kColumnChunks;
  const int begin = chunk * rows_per_chunk;
  const int end = min(N, begin + rows_per_chunk);
  float acc[kQ] = {};
  if (c < C) {
    for (int n = begin + threadIdx.y; n < end; n += kColumnRows) {
      float v[kQ];
      terms(n, c, v);
      for (int q = 0; q < kQ; ++q) acc[q] += v[q];
    }
  }
  for (int q = 0; q < kQ; ++q) cell[q][threadIdx.y][threadIdx.x] = acc[q];
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int q = 0; q < kQ; ++q) {
      float sum = 0.0f;
      for (int r = 0; r < kColumnRows; ++r) sum += cell[q][r][threadIdx.x];
      partial[(static_cast<std::size_t>(q) * kColumnChunks + chunk) * C + c] = sum;
    }
  }
}

// out_q[c] += sum over chunks (in order) of partial[q][chunk][c].
__global__ void column_finish_kernel(float* out0, float* out1, const float* partial, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float* outs[2] = {out0, out1};
  for (int q = 0; q < 2; ++q) {
    if (outs[q] == nullptr) continue;
    float sum = 0.0f;
    for (int chunk = 0; chunk < kColumnChunks; ++chunk)
      sum += partial[(static_cast<std::size_t>(q) * kColumnChunks + chunk) * C + c];
    outs[q][c] += sum;
  }
}

template <int kQ, typename Terms>
void column_sums(float* out0, float* out1, float* scratch, Terms terms, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  const dim3 grid((C + kColumnWidth - 1) / kColumnWidth, kColumnChunks);
  column_partials_kernel<kQ><<<grid, dim3(kColumnWidth, kColumnRows), 0, stream>>>(scratch, terms, N, C);
  check_launch("column_partials_kernel");
  column_finish_kernel<<<(C + kThreads - 1) / kThreads, kThreads, 0, stream>>>(out0, out1, scratch, C);
  check_launch("column_finish_kernel");
}

// ---- layer norm ----

// One warp per row: two passes (mean, then the variance of centred values) as on the CPU. Lane l takes packs
// l, l + 32, ... of P elements (P = 8 bf16 or 4 floats when C and the addresses allow, else 1).
template <int P, typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                                         int N, int C) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const T* x = inp + static_cast<std::size_t>(row) * C;
  float sum = 0.0f;
  for (int c = lane * P; c < C; c += kWarp * P) {
    const auto xs = detail::load_pack<P>(x + c);
    for (int k = 0; k < P; ++k) sum += load(&xs.v[k]);
  }
  const float m = detail::warp_sum(sum) / static_cast<float>(C);
  float sq = 0.0f;
  for (int c = lane * P; c < C; c += kWarp * P) {
    const auto xs = detail::load_pack<P>(x + c);
    for (int k = 0; k < P; ++k) {
      const float d = load(&xs.v[k]) - m;
      sq += d * d;
    }
  }
  const float s = 1.0f / sqrtf(detail::warp_sum(sq) / static_cast<float>(C) + static_cast<float>(kLayerNormEps));
  T* o = out + static_cast<std::size_t>(row) * C;
  for (int c = lane * P; c < C; c += kWarp * P) {
    const auto xs = detail::load_pack<P>(x + c);
    const auto ws = detail::load_pack<P>(weight + c);
    const auto bs = detail::load_pack<P>(bias + c);
    detail::Pack<T, P> ys;
    for (int k = 0; k < P; ++k) store(&ys.v[k], (load(&xs.v[k]) - m) * s * load(&ws.v[k]) + load(&bs.v[k]));
    detail::store_pack(o + c, ys);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

template <int P, typename T>
__global__ void layernorm_backward_kernel(T* dinp, const T* dout, const T* inp, const T* weight, const float* mean,
                                          const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const std::size_t base = static_cast<std::size_t>(row) * C;
  const float m = mean[row];
  const float s = rstd[row];
  float dnorm_sum = 0.0f;
  float dnorm_norm_sum = 0.0f;
  for (int c = lane * P; c < C; c += kWarp * P) {
    const auto ws = detail::load_pack<P>(weight + c);
    const auto ds = detail::load_pack<P>(dout + base + c);
    const auto xs = detail::load_pack<P>(inp + base + c);
    for (int k = 0; k < P; ++k) {
      const float dnorm = load(&ws.v[k]) * load(&ds.v[k]);
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * (load(&xs.v[k]) - m) * s;
    }
  }
  const float dnorm_mean = detail::warp_sum(dnorm_sum) / static_cast<float>(C);
  const float dnorm_norm_mean = detail::warp_sum(dnorm_norm_sum) / static_cast<float>(C);
  for (int c = lane * P; c < C; c += kWarp * P) {
    const auto ws = detail::load_pack<P>(weight + c);
    const auto ds = detail::load_pack<P>(dout + base + c);
    const auto xs = detail::load_pack<P>(inp + base + c);
    auto gs = detail::load_pack<P>(dinp + base + c);
    for (int k = 0; k < P; ++k) {
      const float norm = (load(&xs.v[k]) - m) * s;
      const float dx = (load(&ws.v[k]) * load(&ds.v[k]) - dnorm_mean - norm * dnorm_norm_mean) * s;
      store(&gs.v[k], load(&gs.v[k]) + dx);
    }
    detail::store_pack(dinp + base + c, gs);
  }
}

// ---- RMSNorm (one warp per row) ----

template <typename T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* inp, const T* weight, int N, int C, float eps) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const T* x = inp + static_cast<std::size_t>(row) * C;
  float sq = 0.0f;
  for (int c = lane; c < C; c += kWarp) sq += load(x + c) * load(x + c);
  const float s = 1.0f / sqrtf(detail::warp_sum(sq) / static_cast<float>(C) + eps);
  T* o = out + static_cast<std::size_t>(row) * C;
  for (int c = lane; c < C; c += kWarp) store(o + c, load(x + c) * s * load(weight + c));
  if (lane == 0) rstd[row] = s;
}

// d x_j = r (w_j dy_j - x_j r^2 mean_c(w_c dy_c x_c))
template <typename T>
__global__ void rmsnorm_backward_kernel(T* dinp, const T* dout, const T* inp, const T* weight, const float* rstd, int N,
                                        int C) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const std::size_t base = static_cast<std::size_t>(row) * C;
  const float s = rstd[row];
  float dot = 0.0f;
  for (int c = lane; c < C; c += kWarp) dot += load(weight + c) * load(dout + base + c) * load(inp + base + c);
  const float k = s * s * detail::warp_sum(dot) / static_cast<float>(C);
  for (int c = lane; c < C; c += kWarp) {
    const float dx = s * (load(weight + c) * load(dout + base + c) - load(inp + base + c) * k);
    store(dinp + base + c, load(dinp + base + c) + dx);
  }
}

// ---- RoPE: thread per (row, pair i, head); the angle in double as the CPU's, then fp32 ----

template <typename T>
__global__ void rope_kernel(T* x, int rows, int T_, int H, int hs, int row_stride, double theta, double sign) {
  const int half = hs / 2;
  const std::size_t total = static_cast<std::size_t>(rows) * half * H;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < total;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const int h = static_cast<int>(i % H);
    const int pair = static_cast<int>((i / H) % half);
    const std::size_t row = i / (static_cast<std::size_t>(H) * half);
    const double angle = sign * static_cast<double>(row % T_) * pow(theta, -2.0 * pair / hs);
    const float c = static_cast<float>(cos(angle)), sn = static_cast<float>(sin(angle));
    T* head = x + row * row_stride + static_cast<std::size_t>(h) * hs;
    const float a = load(head + pair), b = load(head + pair + half);
    store(head + pair, a * c - b * sn);
    store(head + pair + half, b * c + a * sn);
  }
}

// ---- elementwise ----

__device__ __forceinline__ float gelu_of(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  return x / (1.0f + expf(-2.0f * u));
}
__device__ __forceinline__ float gelu_grad_of(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  const float s = 1.0f / (1.0f + expf(-2.0f * u));
  const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return s + 2.0f * x * s * (1.0f - s) * du;
}

// The elementwise kernels run over packs of P elements (n / P of them; the host picks P).
template <int P, typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, std::size_t packs) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < packs;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const auto xs = detail::load_pack<P>(inp + i * P);
    detail::Pack<T, P> ys;
    for (int k = 0; k < P; ++k) store(&ys.v[k], gelu_of(load(&xs.v[k])));
    detail::store_pack(out + i * P, ys);
  }
}

template <int P, bool kAdd, typename T>
__device__ void gelu_backward_packs(T* dinp, const T* inp, const T* dout, std::size_t packs) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < packs;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const auto xs = detail::load_pack<P>(inp + i * P);
    const auto ds = detail::load_pack<P>(dout + i * P);
    detail::Pack<T, P> gs;
    if constexpr (kAdd) gs = detail::load_pack<P>(dinp + i * P);
    for (int k = 0; k < P; ++k) {
      detail::store_grad(&gs.v[k], load(&ds.v[k]) * gelu_grad_of(load(&xs.v[k])), kAdd);
    }
    detail::store_pack(dinp + i * P, gs);
  }
}
template <int P, typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, std::size_t packs) {
  gelu_backward_packs<P, true>(dinp, inp, dout, packs);
}
template <int P, typename T>
__global__ void gelu_backward_write_kernel(T* dinp, const T* inp, const T* dout, std::size_t packs) {
  gelu_backward_packs<P, false>(dinp, inp, dout, packs);
}

template <int P, typename T>
__global__ void residual_forward_kernel(T* out, const T* inp1, const T* inp2, std::size_t packs) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < packs;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const auto as = detail::load_pack<P>(inp1 + i * P);
    const auto bs = detail::load_pack<P>(inp2 + i * P);
    detail::Pack<T, P> ys;
    for (int k = 0; k < P; ++k) store(&ys.v[k], load(&as.v[k]) + load(&bs.v[k]));
    detail::store_pack(out + i * P, ys);
  }
}

template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* gate, const T* up, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float g = load(gate + i);
    store(out + i, g / (1.0f + expf(-g)) * load(up + i));
  }
}

// silu(g) = g sigmoid(g); silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
template <typename T>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, const T* dout, const T* gate, const T* up, std::size_t n,
                                       bool add) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float g = load(gate + i), d = load(dout + i);
    const float sig = 1.0f / (1.0f + expf(-g));
    const float dg = d * load(up + i) * sig * (1.0f + g * (1.0f - sig)), du = d * g * sig;
    detail::store_grad(dgate + i, dg, add);
    detail::store_grad(dup + i, du, add);
  }
}

template <typename T>
__global__ void residual_backward_kernel(T* dinp1, T* dinp2, const T* dout, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float d = load(dout + i);
    store(dinp1 + i, load(dinp1 + i) + d);
    store(dinp2 + i, load(dinp2 + i) + d);
  }
}

template <typename To, typename From>
__global__ void convert_kernel(To* out, const From* in, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    store(out + i, load(in + i));
  }
}

unsigned warp_rows_grid(int rows) {
  constexpr int kRowsPerBlock = kThreads / kWarp;
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

std::size_t column_sum_scratch_floats(int C, int quantities) { return gpu_column_scratch_floats(C, quantities); }

template <typename T>
void encoder_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, int B, int T_, int C,
                     cudaStream_t stream) {
  const std::size_t total = static_cast<std::size_t>(B) * T_ * C;
  if (total == 0) return;
  encoder_forward_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(out, tokens, wte, wpe, T_, C, total);
  check_launch("encoder_forward_kernel");
}

template <typename T>
void encoder_backward(float* dwte, float* dwpe, const T* dout, const std::int32_t* tokens, int B, int T_, int C,
                      cudaStream_t stream) {
  const int N = B * T_;
  if (N == 0 || C == 0) return;
  encoder_backward_wte_kernel<<<N, kThreads, 0, stream>>>(dwte, dout, tokens, N, C);
  check_launch("encoder_backward_wte_kernel");
  if (dwpe == nullptr) return;
  const std::size_t positions = static_cast<std::size_t>(T_) * C;
  encoder_backward_wpe_kernel<<<grid_for(positions, kThreads), kThreads, 0, stream>>>(dwpe, dout, B, T_, C);
  check_launch("encoder_backward_wpe_kernel");
}

template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias, int N, int C,
                       cudaStream_t stream) {
  if (N == 0) return;
  constexpr int P = detail::kPackOf<T>;
  if (C % P == 0 && detail::aligned16(out, inp, weight, bias)) {
    layernorm_forward_kernel<P><<<warp_rows_grid(N), kThreads, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C);
  } else {
    layernorm_forward_kernel<1><<<warp_rows_grid(N), kThreads, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C);
  }
  check_launch("layernorm_forward_kernel");
}

template <typename T>
void layernorm_backward(T* dinp, float* dweight, float* dbias, float* scratch, const T* dout, const T* inp,
                        const T* weight, const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
  if (N == 0) return;
  constexpr int P = detail::kPackOf<T>;
  if (C % P == 0 && detail::aligned16(dinp, dout, inp, weight)) {
    layernorm_backward_kernel<P><<<warp_rows_grid(N), kThreads, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  } else {
    layernorm_backward_kernel<1><<<warp_rows_grid(N), kThreads, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  }
  check_launch("layernorm_backward_kernel");
  column_sums<2>(dweight, dbias, scratch, LayerNormTerms<T>{dout, inp, mean, rstd, C}, N, C, stream);
}

template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int N, int C, float eps, cudaStream_t stream) {
  if (N == 0) return;
  rmsnorm_forward_kernel<<<warp_rows_grid(N), kThreads, 0, stream>>>(out, rstd, inp, weight, N, C, eps);
  check_launch("rmsnorm_forward_kernel");
}

template <typename T>
void rmsnorm_backward(T* dinp, float* dweight, float* scratch, const T* dout, const T* inp, const T* weight,
                      const float* rstd, int N, int C, cudaStream_t stream) {
  if (N == 0) return;
  rmsnorm_backward_kernel<<<warp_rows_grid(N), kThreads, 0, stream>>>(dinp, dout, inp, weight, rstd, N, C);
  check_launch("rmsnorm_backward_kernel");
  column_sums<1>(dweight, nullptr, scratch, RmsNormTerms<T>{dout, inp, rstd, C}, N, C, stream);
}

template <typename T>
void rope_forward(T* x, int B, int T_, int H, int hs, int row_stride, double theta, cudaStream_t stream) {
  const std::size_t total = static_cast<std::size_t>(B) * T_ * H * (hs / 2);
  if (total == 0) return;
  rope_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(x, B * T_, T_, H, hs, row_stride, theta, 1.0);
  check_launch("rope_kernel");
}

// A rotation's transpose is the rotation by the opposite angle.
template <typename T>
void rope_backward(T* dx, int B, int T_, int H, int hs, int row_stride, double theta, cudaStream_t stream) {
  const std::size_t total = static_cast<std::size_t>(B) * T_ * H * (hs / 2);
  if (total == 0) return;
  rope_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(dx, B * T_, T_, H, hs, row_stride, theta, -1.0);
  check_launch("rope_kernel");
}

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  swiglu_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, gate, up, n);
  check_launch("swiglu_forward_kernel");
}

template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, std::size_t n, cudaStream_t stream,
                     Grad mode) {
  if (n == 0) return;
  swiglu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dgate, dup, dout, gate, up, n,
                                                                          mode == Grad::add);
  check_launch("swiglu_backward_kernel");
}

template <typename T>
void bias_backward(float* dbias, float* scratch, const T* dout, int N, int C, cudaStream_t stream) {
  column_sums<1>(dbias, nullptr, scratch, BiasTerms<T>{dout, C}, N, C, stream);
}

// Launches kernel<P> over n / P packs when n and every pointer allow packs of P = kPackOf<T>, else kernel<1>.
#define HSDP_LAUNCH_PACKED(kernel, T, n, stream, ...)                                                   \
  do {                                                                                                \
    constexpr int kP = detail::kPackOf<T>;                                                            \
    if ((n) % kP == 0 && detail::aligned16(__VA_ARGS__)) {                                            \
      kernel<kP><<<grid_for((n) / kP, kThreads), kThreads, 0, stream>>>(__VA_ARGS__, (n) / kP);       \
    } else {                                                                                          \
      kernel<1><<<grid_for(n, kThreads), kThreads, 0, stream>>>(__VA_ARGS__, n);                      \
    }                                                                                                 \
    check_launch(#kernel);                                                                            \
  } while (false)

template <typename T>
void gelu_forward(T* out, const T* inp, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  HSDP_LAUNCH_PACKED(gelu_forward_kernel, T, n, stream, out, inp);
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n, cudaStream_t stream, Grad mode) {
  if (n == 0) return;
  if (mode == Grad::add) {
    HSDP_LAUNCH_PACKED(gelu_backward_kernel, T, n, stream, dinp, inp, dout);
  } else {
    HSDP_LAUNCH_PACKED(gelu_backward_write_kernel, T, n, stream, dinp, inp, dout);
  }
}

template <typename T>
void residual_forward(T* out, const T* inp1, const T* inp2, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  HSDP_LAUNCH_PACKED(residual_forward_kernel, T, n, stream, out, inp1, inp2);
}
#undef HSDP_LAUNCH_PACKED

template <typename T>
void residual_backward(T* dinp1, T* dinp2, const T* dout, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  residual_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dinp1, dinp2, dout, n);
  check_launch("residual_backward_kernel");
}

void convert(bf16_t* out, const float* in, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  convert_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, in, n);
  check_launch("convert_kernel");
}

void convert(float* out, const bf16_t* in, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  convert_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, in, n);
  check_launch("convert_kernel");
}

#define HSDP_INSTANTIATE_LAYERS(T)                                                                               \
  template void encoder_forward<T>(T*, const std::int32_t*, const T*, const T*, int, int, int, cudaStream_t);    \
  template void encoder_backward<T>(float*, float*, const T*, const std::int32_t*, int, int, int, cudaStream_t); \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int, int, cudaStream_t);  \
  template void layernorm_backward<T>(T*, float*, float*, float*, const T*, const T*, const T*, const float*,    \
                                      const float*, int, int, cudaStream_t);                                     \
  template void bias_backward<T>(float*, float*, const T*, int, int, cudaStream_t);                              \
  template void gelu_forward<T>(T*, const T*, std::size_t, cudaStream_t);                                        \
  template void gelu_backward<T>(T*, const T*, const T*, std::size_t, cudaStream_t, Grad);                             \
  template void residual_forward<T>(T*, const T*, const T*, std::size_t, cudaStream_t);                          \
  template void residual_backward<T>(T*, T*, const T*, std::size_t, cudaStream_t);                              \
  template void rmsnorm_forward<T>(T*, float*, const T*, const T*, int, int, float, cudaStream_t);              \
  template void rmsnorm_backward<T>(T*, float*, float*, const T*, const T*, const T*, const float*, int, int,    \
                                    cudaStream_t);                                                               \
  template void rope_forward<T>(T*, int, int, int, int, int, double, cudaStream_t);                             \
  template void rope_backward<T>(T*, int, int, int, int, int, double, cudaStream_t);                            \
  template void swiglu_forward<T>(T*, const T*, const T*, std::size_t, cudaStream_t);                           \
  template void swiglu_backward<T>(T*, T*, const T*, const T*, const T*, std::size_t, cudaStream_t, Grad);

HSDP_INSTANTIATE_LAYERS(float)
HSDP_INSTANTIATE_LAYERS(bf16_t)
#undef HSDP_INSTANTIATE_LAYERS

}  // namespace hsdp::model::cuda
