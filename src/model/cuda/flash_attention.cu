// Fused causal attention (model.attention=fused; see layers.hpp): the scores never leave the chip. The forward keeps
// per row the log-sum-exp of its scaled scores; the backward recomputes the probabilities from it, in two kernels
// that each own what they write (dQ per query row; dK and dV per key row, over the query heads of its group in
// order), so no floating-point atomics and results repeat bit for bit.
//
// Layout and work split (FlashAttention-2's algorithm, written for clarity over speed: fp32 math on CUDA cores):
//   forward and dQ: a warp per query row t of head h, 8 rows per block; the keys in tiles of 32 staged in shared
//                   memory as floats (rows padded by one against bank conflicts); lane j scores key j of the tile
//                   (a dot product over hs), the lanes share the probabilities by shuffles, and lane l accumulates
//                   the output (or dQ) dims l, l + 32, ... (kPerLane = ceil(hs / 32) of them, hs <= 128).
//   dK, dV:         a warp per key row j of key/value head kvh, 8 rows per block; the query rows t >= j of the G
//                   query heads in tiles of 32 (q and dO staged), lane i takes row i of the tile.
// Scores s = q.k / sqrt(hs); p = exp(s - lse_t); dp = dO_t.v_j; ds = p (dp - D_t), D_t = dO_t.O_t.
#include <cmath>
#include <string>
#include <type_traits>

#include "hsdp/core/error.hpp"
#include "hsdp/device/cuda/kernel_util.cuh"
#include "hsdp/model/cuda/layers.hpp"

namespace hsdp::model::cuda {
namespace {

namespace detail = hsdp::device::cuda::detail;
using detail::kWarp;
using detail::load;
using detail::store;
using device::cuda::check_launch;

constexpr int kRowsPerBlock = 8;  // warps per block
constexpr int kTile = 32;         // keys (or query rows) staged per step: one per lane
constexpr int kMaxHead = 128;

struct Shape {
  int B, T, NH, NKV, hs;
  __host__ __device__ int G() const { return NH / NKV; }
  __host__ __device__ int C() const { return NH * hs; }
  __host__ __device__ int RS() const { return (NH + 2 * NKV) * hs; }  // a q | k | v row
};

// Stages rows [first, first + kTile) (rows >= limit as zeros) of hs values at `base` + row * stride into smem
// [kTile][hs + 1] as floats; the whole block takes part.
template <typename T>
__device__ void stage(float* smem, const T* base, int first, int limit, std::size_t stride, int hs) {
  const int ld = hs + 1;
  for (int i = threadIdx.x; i < kTile * hs; i += blockDim.x) {
    const int r = i / hs, d = i % hs;
    const int row = first + r;
    smem[r * ld + d] = row < limit ? load(base + static_cast<std::size_t>(row) * stride + d) : 0.0f;
  }
}

template <typename T, int kPerLane>
__global__ void flash_forward_kernel(T* out, float* lse, const T* qkv, Shape s, float scale) {
  extern __shared__ float smem[];
  const int ld = s.hs + 1;
  float* k_s = smem;
  float* v_s = k_s + kTile * ld;
  float* q_s = v_s + kTile * ld;  // [kRowsPerBlock][hs]
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / s.G();
  const int first_row = blockIdx.x * kRowsPerBlock;
  const int t = first_row + warp;
  const bool active = t < s.T;
  const std::size_t RS = static_cast<std::size_t>(s.RS());
  const T* seq = qkv + static_cast<std::size_t>(b) * s.T * RS;
  float* q_row = q_s + warp * s.hs;
  if (active) {
    for (int d = lane; d < s.hs; d += kWarp) q_row[d] = load(seq + t * RS + h * s.hs + d);
  }
  float m = -INFINITY, l = 0.0f, o[kPerLane] = {};
  const int last_row = min(first_row + kRowsPerBlock, s.T) - 1;
  for (int j0 = 0; j0 <= last_row; j0 += kTile) {
    __syncthreads();  // the previous tile's readers are done (and q_row is written, the first time)
    stage(k_s, seq + s.C() + kvh * s.hs, j0, s.T, RS, s.hs);
    stage(v_s, seq + s.C() + s.NKV * s.hs + kvh * s.hs, j0, s.T, RS, s.hs);
    __syncthreads();
    if (!active || j0 > t) continue;
    const int j = j0 + lane;
    float score = -INFINITY;
    if (j <= t) {
      float dot = 0.0f;
      for (int d = 0; d < s.hs; ++d) dot += q_row[d] * k_s[lane * ld + d];
      score = dot * scale;
    }
    const float m_new = fmaxf(m, detail::warp_max(score));
    const float p = j <= t ? expf(score - m_new) : 0.0f;
    const float alpha = expf(m - m_new);  // 0 on the first tile (m = -inf)
    l = l * alpha + detail::warp_sum(p);
    for (int i = 0; i < kPerLane; ++i) o[i] *= alpha;
    for (int jj = 0; jj < kTile; ++jj) {
      const float pj = __shfl_sync(detail::kFullMask, p, jj);
      for (int i = 0; i < kPerLane; ++i) {
        const int d = lane + i * kWarp;
        if (d < s.hs) o[i] += pj * v_s[jj * ld + d];
      }
    }
    m = m_new;
  }
  if (!active) return;
  T* o_row = out + (static_cast<std::size_t>(b) * s.T + t) * s.C() + h * s.hs;
  const float inv = 1.0f / l;
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + i * kWarp;
    if (d < s.hs) store(o_row + d, o[i] * inv);
  }
  if (lane == 0) lse[(static_cast<std::size_t>(b) * s.NH + h) * s.T + t] = m + logf(l);
}

// D[b, h, t] = dO_t . O_t (a warp per row).
template <typename T>
__global__ void flash_dot_kernel(float* D, const T* dout, const T* out, Shape s) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;  // (b, t) of head h
  const int lane = threadIdx.x % kWarp, h = blockIdx.y;
  if (row >= s.B * s.T) return;
  const std::size_t at = static_cast<std::size_t>(row) * s.C() + h * s.hs;
  float acc = 0.0f;
  for (int d = lane; d < s.hs; d += kWarp) acc += load(dout + at + d) * load(out + at + d);
  acc = detail::warp_sum(acc);
  const int b = row / s.T, t = row % s.T;
  if (lane == 0) D[(static_cast<std::size_t>(b) * s.NH + h) * s.T + t] = acc;
}

// dQ_t += scale sum_j ds_tj k_j (add = false: dQ_t = ...): the forward's loop with the probabilities from lse.
template <typename T, int kPerLane>
__global__ void flash_dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D, Shape s,
                                float scale, bool add) {
  extern __shared__ float smem[];
  const int ld = s.hs + 1;
  float* k_s = smem;
  float* v_s = k_s + kTile * ld;
  float* q_s = v_s + kTile * ld;             // [kRowsPerBlock][hs]
  float* do_s = q_s + kRowsPerBlock * s.hs;  // [kRowsPerBlock][hs]
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / s.G();
  const int first_row = blockIdx.x * kRowsPerBlock;
  const int t = first_row + warp;
  const bool active = t < s.T;
  const std::size_t RS = static_cast<std::size_t>(s.RS());
  const T* seq = qkv + static_cast<std::size_t>(b) * s.T * RS;
  float* q_row = q_s + warp * s.hs;
  float* do_row = do_s + warp * s.hs;
  float row_lse = 0.0f, row_D = 0.0f;
  if (active) {
    const T* dout_row = dout + (static_cast<std::size_t>(b) * s.T + t) * s.C() + h * s.hs;
    for (int d = lane; d < s.hs; d += kWarp) {
      q_row[d] = load(seq + t * RS + h * s.hs + d);
      do_row[d] = load(dout_row + d);
    }
    const std::size_t r = (static_cast<std::size_t>(b) * s.NH + h) * s.T + t;
    row_lse = lse[r];
    row_D = D[r];
  }
  float dq[kPerLane] = {};
  const int last_row = min(first_row + kRowsPerBlock, s.T) - 1;
  for (int j0 = 0; j0 <= last_row; j0 += kTile) {
    __syncthreads();
    stage(k_s, seq + s.C() + kvh * s.hs, j0, s.T, RS, s.hs);
    stage(v_s, seq + s.C() + s.NKV * s.hs + kvh * s.hs, j0, s.T, RS, s.hs);
    __syncthreads();
    if (!active || j0 > t) continue;
    const int j = j0 + lane;
    float ds = 0.0f;
    if (j <= t) {
      float qk = 0.0f, dp = 0.0f;
      for (int d = 0; d < s.hs; ++d) {
        qk += q_row[d] * k_s[lane * ld + d];
        dp += do_row[d] * v_s[lane * ld + d];
      }
      const float p = expf(qk * scale - row_lse);
      ds = p * (dp - row_D);
    }
    for (int jj = 0; jj < kTile; ++jj) {
      const float dsj = __shfl_sync(detail::kFullMask, ds, jj);
      for (int i = 0; i < kPerLane; ++i) {
        const int d = lane + i * kWarp;
        if (d < s.hs) dq[i] += dsj * k_s[jj * ld + d];
      }
    }
  }
  if (!active) return;
  T* dq_row = dqkv + (static_cast<std::size_t>(b) * s.T + t) * RS + h * s.hs;
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + i * kWarp;
    if (d < s.hs) store(dq_row + d, (add ? load(dq_row + d) : 0.0f) + dq[i] * scale);
  }
}

// dV_j += sum_t p_tj dO_t and dK_j += scale sum_t ds_tj q_t over the query rows t >= j of the G query heads of
// key/value head kvh, heads in order, rows in order (add = false: written instead of added).
template <typename T, int kPerLane>
__global__ void flash_dkv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D, Shape s,
                                 float scale, bool add) {
  extern __shared__ float smem[];
  const int ld = s.hs + 1;
  float* q_s = smem;                        // [kTile][hs + 1]
  float* do_s = q_s + kTile * ld;           // [kTile][hs + 1]
  float* k_s = do_s + kTile * ld;           // [kRowsPerBlock][hs]
  float* v_s = k_s + kRowsPerBlock * s.hs;  // [kRowsPerBlock][hs]
  __shared__ float lse_s[kTile], D_s[kTile];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int kvh = blockIdx.y, b = blockIdx.z, G = s.G();
  const int first_key = blockIdx.x * kRowsPerBlock;
  const int j = first_key + warp;
  const bool active = j < s.T;
  const std::size_t RS = static_cast<std::size_t>(s.RS());
  const T* seq = qkv + static_cast<std::size_t>(b) * s.T * RS;
  const T* dout_seq = dout + static_cast<std::size_t>(b) * s.T * s.C();
  float* k_row = k_s + warp * s.hs;
  float* v_row = v_s + warp * s.hs;
  if (active) {
    for (int d = lane; d < s.hs; d += kWarp) {
      k_row[d] = load(seq + j * RS + s.C() + kvh * s.hs + d);
      v_row[d] = load(seq + j * RS + s.C() + s.NKV * s.hs + kvh * s.hs + d);
    }
  }
  float dk[kPerLane] = {}, dv[kPerLane] = {};
  for (int g = 0; g < G; ++g) {
    const int h = kvh * G + g;
    const float* lse_h = lse + (static_cast<std::size_t>(b) * s.NH + h) * s.T;
    const float* D_h = D + (static_cast<std::size_t>(b) * s.NH + h) * s.T;
    for (int t0 = first_key / kTile * kTile; t0 < s.T; t0 += kTile) {
      __syncthreads();
      stage(q_s, seq + h * s.hs, t0, s.T, RS, s.hs);
      stage(do_s, dout_seq + h * s.hs, t0, s.T, static_cast<std::size_t>(s.C()), s.hs);
      if (threadIdx.x < kTile) {
        const int t = t0 + static_cast<int>(threadIdx.x);
        lse_s[threadIdx.x] = t < s.T ? lse_h[t] : 0.0f;
        D_s[threadIdx.x] = t < s.T ? D_h[t] : 0.0f;
      }
      __syncthreads();
      if (!active || t0 + kTile - 1 < j) continue;
      const int t = t0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (t >= j && t < s.T) {
        float qk = 0.0f, dp = 0.0f;
        for (int d = 0; d < s.hs; ++d) {
          qk += q_s[lane * ld + d] * k_row[d];
          dp += do_s[lane * ld + d] * v_row[d];
        }
        p = expf(qk * scale - lse_s[lane]);
        ds = p * (dp - D_s[lane]);
      }
      for (int ii = 0; ii < kTile; ++ii) {
        const float pi = __shfl_sync(detail::kFullMask, p, ii);
        const float dsi = __shfl_sync(detail::kFullMask, ds, ii);
        for (int i = 0; i < kPerLane; ++i) {
          const int d = lane + i * kWarp;
          if (d < s.hs) {
            dv[i] += pi * do_s[ii * ld + d];
            dk[i] += dsi * q_s[ii * ld + d];
          }
        }
      }
    }
  }
  if (!active) return;
  T* row = dqkv + (static_cast<std::size_t>(b) * s.T + j) * RS + s.C();
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + i * kWarp;
    if (d < s.hs) {
      T* dk_at = row + kvh * s.hs + d;
      T* dv_at = row + s.NKV * s.hs + kvh * s.hs + d;
      store(dk_at, (add ? load(dk_at) : 0.0f) + dk[i] * scale);
      store(dv_at, (add ? load(dv_at) : 0.0f) + dv[i]);
    }
  }
}

void check_shape(const Shape& s) {
  if (s.B < 1 || s.T < 1 || s.NKV < 1 || s.NH % s.NKV != 0 || s.hs < 1 || s.hs > kMaxHead) {
    throw_internal("fused attention: bad shape B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
                   " NH=" + std::to_string(s.NH) + " NKV=" + std::to_string(s.NKV) + " hs=" + std::to_string(s.hs) +
                   " (head size at most " + std::to_string(kMaxHead) + ")");
  }
}

std::size_t row_tiles_smem(int hs) {
  return (2 * kTile * (hs + 1)) * sizeof(float);
}

// Calls f(std::integral_constant<int, kPerLane>) for hs <= 128: two variants only (the GPU models' 64 and 128; a lane
// skips the dims beyond hs), which keeps nvcc's share of the build small.
template <typename F>
void by_head_size(int hs, F&& f) {
  if (hs <= 2 * kWarp) {
    f(std::integral_constant<int, 2>{});
  } else {
    f(std::integral_constant<int, 4>{});
  }
}

}  // namespace

bool fused_attention_supports(int head_size) {
  return head_size >= 1 && head_size <= kMaxHead;
}

std::size_t fused_attention_scratch_bytes(int B, int T_, int NH) {
  return static_cast<std::size_t>(B) * NH * T_ * sizeof(float);  // D
}

template <typename T>
void fused_attention_forward(T* out, float* lse, const T* qkv, int B, int T_, int NH, int NKV, int hs,
                             cudaStream_t stream) {
  const Shape s{B, T_, NH, NKV, hs};
  check_shape(s);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const dim3 grid((T_ + kRowsPerBlock - 1) / kRowsPerBlock, NH, B);
  const std::size_t smem = row_tiles_smem(hs) + kRowsPerBlock * hs * sizeof(float);
  by_head_size(hs, [&](auto per_lane) {
    flash_forward_kernel<T, decltype(per_lane)::value>
        <<<grid, kRowsPerBlock * kWarp, smem, stream>>>(out, lse, qkv, s, scale);
  });
  check_launch("flash_forward_kernel");
}

template <typename T>
void fused_attention_backward(T* dqkv, void* scratch, const T* dout, const T* out, const T* qkv, const float* lse,
                              int B, int T_, int NH, int NKV, int hs, cudaStream_t stream, Grad mode) {
  const bool add = mode == Grad::add;
  const Shape s{B, T_, NH, NKV, hs};
  check_shape(s);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  auto* D = static_cast<float*>(scratch);
  flash_dot_kernel<<<dim3((B * T_ + kRowsPerBlock - 1) / kRowsPerBlock, NH), kRowsPerBlock * kWarp, 0, stream>>>(
      D, dout, out, s);
  check_launch("flash_dot_kernel");
  const std::size_t smem = row_tiles_smem(hs) + 2 * kRowsPerBlock * hs * sizeof(float);
  by_head_size(hs, [&](auto per_lane) {
    constexpr int kPerLane = decltype(per_lane)::value;
    flash_dq_kernel<T, kPerLane>
        <<<dim3((T_ + kRowsPerBlock - 1) / kRowsPerBlock, NH, B), kRowsPerBlock * kWarp, smem, stream>>>(
            dqkv, dout, qkv, lse, D, s, scale, add);
    check_launch("flash_dq_kernel");
    flash_dkv_kernel<T, kPerLane>
        <<<dim3((T_ + kRowsPerBlock - 1) / kRowsPerBlock, NKV, B), kRowsPerBlock * kWarp, smem, stream>>>(
            dqkv, dout, qkv, lse, D, s, scale, add);
    check_launch("flash_dkv_kernel");
  });
}

template void fused_attention_forward<float>(float*, float*, const float*, int, int, int, int, int, cudaStream_t);
template void fused_attention_forward<bf16_t>(bf16_t*, float*, const bf16_t*, int, int, int, int, int, cudaStream_t);
template void fused_attention_backward<float>(float*, void*, const float*, const float*, const float*, const float*,
                                              int, int, int, int, int, cudaStream_t, Grad);
template void fused_attention_backward<bf16_t>(bf16_t*, void*, const bf16_t*, const bf16_t*, const bf16_t*,
                                               const float*, int, int, int, int, int, cudaStream_t, Grad);

}  // namespace hsdp::model::cuda
