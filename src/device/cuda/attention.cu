// Causal self-attention on the GPU (see layers.hpp), as three simple fused kernels.
//
// Forward: a block owns kRows consecutive query rows of one (batch, head), one warp per row. Keys, then
// values, stream through shared memory in tiles of kTile rows that all warps of the block share; each row's
// scores stay in shared memory in fp32 from QK^T to softmax to PV, and att receives the probabilities.
// Backward, query side (one warp per query row t): datt_tj = dout_t . v_j, w_t = sum_j a_tj datt_tj,
// dscore_tj = a_tj (datt_tj - w_t) / sqrt(hs), dq_t += sum_j dscore_tj k_j; w_t goes to the scratch.
// Backward, key side (one warp per key row j): recomputes dscore_tj for every t >= j from att, dout, v_j and
// w_t, and accumulates dk_j += sum_t dscore_tj q_t, dv_j += sum_t a_tj dout_t, in increasing t.
// Query and key rows of dqkv are disjoint, so no two kernels (or warps) add to the same element.
#include <string>

#include "hsdp/core/error.hpp"
#include "hsdp/device/cuda/layers.hpp"
#include "kernel_util.cuh"

namespace hsdp::device::cuda {
namespace {

using detail::kWarp;
using detail::load;
using detail::store;

constexpr int kRows = 8;  // rows (queries or keys) per block, one warp each
constexpr int kThreads = kRows * kWarp;
constexpr int kTile = 32;  // rows of K, V, Q or dout per shared tile
constexpr int kMaxHeadSize = 256;
constexpr int kDimsPerLane = kMaxHeadSize / kWarp;

// Loads rows [r0, r0 + kTile) of one head's slice of a [.., row_stride] tensor into tile[kTile][hs + 1]
// (zeros past `rows`); the +1 keeps a warp's reads of one column per lane free of bank conflicts.
template <typename T>
__device__ void load_tile(float* tile, const T* base, std::size_t row_stride, int r0, int rows, int hs) {
  for (int i = threadIdx.x; i < kTile * hs; i += blockDim.x) {
    const int r = i / hs;
    const int d = i % hs;
    tile[r * (hs + 1) + d] = r0 + r < rows ? load(base + static_cast<std::size_t>(r0 + r) * row_stride + d) : 0.0f;
  }
}

template <typename T>
__global__ void attention_forward_kernel(T* out, T* att, const T* qkv, int T_, int C, int NH, float scale) {
  extern __shared__ float smem[];
  const int hs = C / NH;
  const int bh = blockIdx.y;
  const int b = bh / NH;
  const int h = bh % NH;
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int t0 = blockIdx.x * kRows;
  const int t = t0 + warp;
  const int last = min(t0 + kRows, T_) - 1;  // the block's last query row
  float* scores = smem;                      // [kRows][T_]
  float* q_rows = scores + kRows * T_;       // [kRows][hs]
  float* tile = q_rows + kRows * hs;         // [kTile][hs + 1]
  float* s = scores + warp * T_;
  float* q = q_rows + warp * hs;
  const std::size_t C3 = 3 * static_cast<std::size_t>(C);
  const T* base = qkv + static_cast<std::size_t>(b) * T_ * C3 + static_cast<std::size_t>(h) * hs;

  if (t < T_) {
    for (int d = lane; d < hs; d += kWarp) q[d] = load(base + t * C3 + d);
  }
  for (int j0 = 0; j0 <= last; j0 += kTile) {  // scores = q . k_j * scale
    __syncthreads();
    load_tile(tile, base + C, C3, j0, T_, hs);
    __syncthreads();
    const int j = j0 + lane;
    if (t < T_ && j <= t) {
      const float* k = tile + lane * (hs + 1);
      float dot = 0.0f;
      for (int d = 0; d < hs; ++d) dot += q[d] * k[d];
      s[j] = dot * scale;
    }
  }
  __syncwarp();
  if (t < T_) {  // softmax over j <= t, probabilities to att
    float m = -INFINITY;
    for (int j = lane; j <= t; j += kWarp) m = fmaxf(m, s[j]);
    m = detail::warp_max(m);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += kWarp) {
      const float e = expf(s[j] - m);
      s[j] = e;
      sum += e;
    }
    const float inv_sum = 1.0f / detail::warp_sum(sum);
    T* a = att + (static_cast<std::size_t>(bh) * T_ + t) * T_;
    for (int j = lane; j < T_; j += kWarp) {
      const float p = j <= t ? s[j] * inv_sum : 0.0f;
      if (j <= t) s[j] = p;
      store(a + j, p);
    }
  }
  __syncwarp();
  float o[kDimsPerLane] = {};
  for (int j0 = 0; j0 <= last; j0 += kTile) {  // out = sum_j p_j v_j
    __syncthreads();
    load_tile(tile, base + 2 * C, C3, j0, T_, hs);
    __syncthreads();
    if (t < T_) {
      const int count = min(kTile, t - j0 + 1);
      for (int jj = 0; jj < count; ++jj) {
        const float p = s[j0 + jj];
        const float* v = tile + jj * (hs + 1);
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + i * kWarp;
          if (d < hs) o[i] += p * v[d];
        }
      }
    }
  }
  if (t < T_) {
    T* dst = out + (static_cast<std::size_t>(b) * T_ + t) * C + static_cast<std::size_t>(h) * hs;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + i * kWarp;
      if (d < hs) store(dst + d, o[i]);
    }
  }
}

template <typename T>
__global__ void attention_backward_query_kernel(T* dqkv, float* weighted, const T* dout, const T* qkv, const T* att,
                                                int T_, int C, int NH, float scale) {
  extern __shared__ float smem[];
  const int hs = C / NH;
  const int bh = blockIdx.y;
  const int b = bh / NH;
  const int h = bh % NH;
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int t0 = blockIdx.x * kRows;
  const int t = t0 + warp;
  const int last = min(t0 + kRows, T_) - 1;
  float* s = smem + warp * T_;        // [kRows][T_]: datt, then dscore
  float* d_rows = smem + kRows * T_;  // [kRows][hs]
  float* tile = d_rows + kRows * hs;  // [kTile][hs + 1]
  float* drow = d_rows + warp * hs;
  const std::size_t C3 = 3 * static_cast<std::size_t>(C);
  const T* base = qkv + static_cast<std::size_t>(b) * T_ * C3 + static_cast<std::size_t>(h) * hs;

  if (t < T_) {
    const T* d = dout + (static_cast<std::size_t>(b) * T_ + t) * C + static_cast<std::size_t>(h) * hs;
    for (int i = lane; i < hs; i += kWarp) drow[i] = load(d + i);
  }
  for (int j0 = 0; j0 <= last; j0 += kTile) {  // datt_j = dout_t . v_j
    __syncthreads();
    load_tile(tile, base + 2 * C, C3, j0, T_, hs);
    __syncthreads();
    const int j = j0 + lane;
    if (t < T_ && j <= t) {
      const float* v = tile + lane * (hs + 1);
      float dot = 0.0f;
      for (int d = 0; d < hs; ++d) dot += drow[d] * v[d];
      s[j] = dot;
    }
  }
  __syncwarp();
  if (t < T_) {  // dscore_j = a_j (datt_j - sum_k a_k datt_k) * scale
    const T* a = att + (static_cast<std::size_t>(bh) * T_ + t) * T_;
    float w = 0.0f;
    for (int j = lane; j <= t; j += kWarp) w += load(a + j) * s[j];
    w = detail::warp_sum(w);
    if (lane == 0) weighted[static_cast<std::size_t>(bh) * T_ + t] = w;
    for (int j = lane; j <= t; j += kWarp) s[j] = load(a + j) * (s[j] - w) * scale;
  }
  __syncwarp();
  float dq[kDimsPerLane] = {};
  for (int j0 = 0; j0 <= last; j0 += kTile) {  // dq_t = sum_j dscore_j k_j
    __syncthreads();
    load_tile(tile, base + C, C3, j0, T_, hs);
    __syncthreads();
    if (t < T_) {
      const int count = min(kTile, t - j0 + 1);
      for (int jj = 0; jj < count; ++jj) {
        const float ds = s[j0 + jj];
        const float* k = tile + jj * (hs + 1);
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + i * kWarp;
          if (d < hs) dq[i] += ds * k[d];
        }
      }
    }
  }
  if (t < T_) {
    T* dst = dqkv + (static_cast<std::size_t>(b) * T_ + t) * C3 + static_cast<std::size_t>(h) * hs;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + i * kWarp;
      if (d < hs) store(dst + d, load(dst + d) + dq[i]);
    }
  }
}

template <typename T>
__global__ void attention_backward_key_kernel(T* dqkv, const float* weighted, const T* dout, const T* qkv, const T* att,
                                              int T_, int C, int NH, float scale) {
  extern __shared__ float smem[];
  const int hs = C / NH;
  const int bh = blockIdx.y;
  const int b = bh / NH;
  const int h = bh % NH;
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int j_first = blockIdx.x * kRows;
  const int j = j_first + warp;
  float* q_tile = smem;                       // [kTile][hs + 1]
  float* d_tile = q_tile + kTile * (hs + 1);  // [kTile][hs + 1]
  float* v_rows = d_tile + kTile * (hs + 1);  // [kRows][hs]
  float* a_col = v_rows + kRows * hs;         // [kRows][kTile]
  float* ds_col = a_col + kRows * kTile;      // [kRows][kTile]
  float* vj = v_rows + warp * hs;
  float* my_a = a_col + warp * kTile;
  float* my_ds = ds_col + warp * kTile;
  const std::size_t C3 = 3 * static_cast<std::size_t>(C);
  const T* base = qkv + static_cast<std::size_t>(b) * T_ * C3 + static_cast<std::size_t>(h) * hs;
  const T* dbase = dout + static_cast<std::size_t>(b) * T_ * C + static_cast<std::size_t>(h) * hs;

  if (j < T_) {
    for (int d = lane; d < hs; d += kWarp) vj[d] = load(base + j * C3 + 2 * C + d);
  }
  float dk[kDimsPerLane] = {};
  float dv[kDimsPerLane] = {};
  for (int t0 = j_first; t0 < T_; t0 += kTile) {
    __syncthreads();
    load_tile(q_tile, base, C3, t0, T_, hs);
    load_tile(d_tile, dbase, static_cast<std::size_t>(C), t0, T_, hs);
    __syncthreads();
    const int t = t0 + lane;
    float a = 0.0f;
    float ds = 0.0f;
    if (j < T_ && t < T_ && t >= j) {
      const float* d = d_tile + lane * (hs + 1);
      float datt = 0.0f;
      for (int i = 0; i < hs; ++i) datt += d[i] * vj[i];
      a = load(att + (static_cast<std::size_t>(bh) * T_ + t) * T_ + j);
      ds = a * (datt - weighted[static_cast<std::size_t>(bh) * T_ + t]) * scale;
    }
    my_a[lane] = a;
    my_ds[lane] = ds;
    __syncwarp();
    if (j < T_) {
      for (int tt = 0; tt < kTile; ++tt) {
        const float at = my_a[tt];
        const float dst = my_ds[tt];
        const float* q = q_tile + tt * (hs + 1);
        const float* d = d_tile + tt * (hs + 1);
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int dim = lane + i * kWarp;
          if (dim < hs) {
            dk[i] += dst * q[dim];
            dv[i] += at * d[dim];
          }
        }
      }
    }
    __syncwarp();
  }
  if (j < T_) {
    T* dst = dqkv + (static_cast<std::size_t>(b) * T_ + j) * C3 + static_cast<std::size_t>(h) * hs;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + i * kWarp;
      if (d < hs) {
        store(dst + C + d, load(dst + C + d) + dk[i]);
        store(dst + 2 * C + d, load(dst + 2 * C + d) + dv[i]);
      }
    }
  }
}

// Checks the shape and lets `kernel` use `bytes` of dynamic shared memory (above 48 KiB needs an opt-in).
template <typename Kernel>
void prepare(Kernel kernel, std::size_t bytes, int T_, int C, int NH, const char* name) {
  if (NH <= 0 || C % NH != 0 || C / NH > kMaxHeadSize) {
    throw_internal(std::string(name) + ": n_embd " + std::to_string(C) + " / n_head " + std::to_string(NH) +
                   " must be a whole head size of at most " + std::to_string(kMaxHeadSize));
  }
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  int limit = 0;
  check(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute");
  if (bytes > static_cast<std::size_t>(limit)) {
    throw_internal(std::string(name) + ": sequence length " + std::to_string(T_) + " needs " + std::to_string(bytes) +
                   " bytes of shared memory per block, this GPU allows " + std::to_string(limit));
  }
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
        "cudaFuncSetAttribute");
}

std::size_t query_side_bytes(int T_, int hs) {
  return sizeof(float) * (static_cast<std::size_t>(kRows) * T_ + kRows * hs + kTile * (hs + 1));
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int C, int NH, cudaStream_t stream) {
  if (B == 0 || T_ == 0) return;
  const int hs = C / NH;
  const std::size_t bytes = query_side_bytes(T_, hs);
  prepare(attention_forward_kernel<T>, bytes, T_, C, NH, "attention_forward");
  const dim3 grid((T_ + kRows - 1) / kRows, B * NH);
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  attention_forward_kernel<T><<<grid, kThreads, bytes, stream>>>(out, att, qkv, T_, C, NH, scale);
  check_launch("attention_forward_kernel");
}

template <typename T>
void attention_backward(T* dqkv, float* scratch, const T* dout, const T* qkv, const T* att, int B, int T_, int C,
                        int NH, cudaStream_t stream) {
  if (B == 0 || T_ == 0) return;
  const int hs = C / NH;
  const dim3 grid((T_ + kRows - 1) / kRows, B * NH);
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const std::size_t query_bytes = query_side_bytes(T_, hs);
  prepare(attention_backward_query_kernel<T>, query_bytes, T_, C, NH, "attention_backward");
  attention_backward_query_kernel<T>
      <<<grid, kThreads, query_bytes, stream>>>(dqkv, scratch, dout, qkv, att, T_, C, NH, scale);
  check_launch("attention_backward_query_kernel");
  const std::size_t key_bytes =
      sizeof(float) * (2 * static_cast<std::size_t>(kTile) * (hs + 1) + kRows * hs + 2 * kRows * kTile);
  prepare(attention_backward_key_kernel<T>, key_bytes, T_, C, NH, "attention_backward");
  attention_backward_key_kernel<T>
      <<<grid, kThreads, key_bytes, stream>>>(dqkv, scratch, dout, qkv, att, T_, C, NH, scale);
  check_launch("attention_backward_key_kernel");
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int, cudaStream_t);
template void attention_forward<bf16_t>(bf16_t*, bf16_t*, const bf16_t*, int, int, int, int, cudaStream_t);
template void attention_backward<float>(float*, float*, const float*, const float*, const float*, int, int, int, int,
                                        cudaStream_t);
template void attention_backward<bf16_t>(bf16_t*, float*, const bf16_t*, const bf16_t*, const bf16_t*, int, int, int,
                                         int, cudaStream_t);

}  // namespace hsdp::device::cuda
