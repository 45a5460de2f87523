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
//
// bf16 with head sizes 16, 32, 64 and 128 on a GPU of compute capability 8.0 or newer whose shared memory holds
// the tiles (tc::ready): the same algorithm on tensor cores (WMMA bf16 x bf16 -> fp32, the `tc` kernels below), 64
// query rows (or key rows) per block of 4 warps, each warp owning 16 of them, and tiles of 64 keys (or query rows).
// A warp keeps its own rows' operands (q, dO; k, v) and its accumulators (O; dQ; dK, dV) in registers across the
// tiles; the [16 x 64] scores and their gradients are staged in shared memory in fp32 (WMMA's fragment layout is
// opaque, so the softmax runs on the staged values, and O's rescaling multiplies by a fragment of the row factors);
// P and dS are rounded to bf16 for their products, as the unfused path stores them. Every other case runs the
// CUDA-core kernels.
#include <cuda_bf16.h>
#include <mma.h>

#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

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
    if (d < s.hs) detail::store_grad(dq_row + d, dq[i] * scale, add);
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
      detail::store_grad(row + kvh * s.hs + d, dk[i] * scale, add);
      detail::store_grad(row + s.NKV * s.hs + kvh * s.hs + d, dv[i], add);
    }
  }
}

// ------------------------------------------------------------------------------------------- tensor cores (bf16)

namespace tc {

namespace wmma = nvcuda::wmma;
using bf = __nv_bfloat16;

constexpr int kRows = 64;  // a block's own rows (query rows; key rows for dK, dV): 4 warps x 16
constexpr int kCols = 64;  // a tile's rows of the other side (keys; query rows for dK, dV)
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kSld = kCols + 4;  // fp32 [rows][kCols] tiles (scores, their gradients)
constexpr int kPld = kCols + 8;  // bf16 [rows][kCols] tiles (P, dS)
template <int HS>
constexpr int kHld = HS + 8;  // bf16 [rows][HS] tiles (q, k, v, dO): a multiple of 8, rows 16 bytes apart
template <int HS>
constexpr int kOld = HS + 4;  // fp32 [rows][HS]: the accumulators (O, dQ, dK, dV) staged for their store at the end
template <int HS>
constexpr int kSlices = HS / 16;  // a head's 16-wide slices: the fragments of a warp's [16][HS] operand or accumulator

using AFrag = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf, wmma::row_major>;
using BFrag = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf, wmma::row_major>;
using BtFrag = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf, wmma::col_major>;  // b's rows as columns: b^T
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Shared memory of each kernel, in bytes (every array starts 32-byte aligned: WMMA's rule). The accumulators live in
// registers; at the end each warp stages its rows of them in fp32 over the bf16 tiles (q, k, v, ...), which are
// larger: 2 x 3 (or 4) x (HS + 8) bytes a row against 4 x (HS + 4).
template <int HS>
constexpr std::size_t kForwardSmem = sizeof(bf) * (3 * kRows * kHld<HS> + kRows * kPld) +
                                     sizeof(float) * (kRows * kSld + kRows);
template <int HS>
constexpr std::size_t kDqSmem = sizeof(bf) * (4 * kRows * kHld<HS> + kRows * kPld) +
                                sizeof(float) * (2 * kRows * kSld + 2 * kRows);
template <int HS>
constexpr std::size_t kDkvSmem = sizeof(bf) * (4 * kRows * kHld<HS> + 2 * kRows * kPld) +
                                 sizeof(float) * (2 * kRows * kSld + 2 * kCols);
static_assert(3 * kRows * kHld<16> * sizeof(bf) >= kRows * kOld<16> * sizeof(float) &&
                  3 * kRows * kHld<128> * sizeof(bf) >= kRows * kOld<128> * sizeof(float),
              "the forward stages O over its q, k, v tiles");

// Rows [first, first + 64) of HS bf16 values at base + row * stride into smem [64][kHld] (rows >= limit as zeros), in
// 16-byte pieces (HS and the strides are multiples of 16 elements); the whole block takes part.
template <int HS>
__device__ void load_rows(bf* smem, const bf16_t* base, int first, int limit, std::size_t stride) {
  constexpr int kVec = 8, kPerRow = HS / kVec;
  for (int i = threadIdx.x; i < kRows * kPerRow; i += kThreads) {
    const int r = i / kPerRow, c = (i % kPerRow) * kVec;
    const int row = first + r;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (row < limit) v = *reinterpret_cast<const uint4*>(base + static_cast<std::size_t>(row) * stride + c);
    *reinterpret_cast<uint4*>(smem + r * kHld<HS> + c) = v;
  }
}

// Key and value rows [first, first + 64) of key/value head kvh of one sequence's q | k | v rows into smem.
template <int HS>
__device__ void load_kv(bf* k_s, bf* v_s, const bf16_t* seq, int kvh, int first, const Shape& s) {
  const std::size_t RS = static_cast<std::size_t>(s.RS());
  load_rows<HS>(k_s, seq + s.C() + kvh * HS, first, s.T, RS);
  load_rows<HS>(v_s, seq + s.C() + s.NKV * HS + kvh * HS, first, s.T, RS);
}

// lse and D (dO . O) of query rows [first, first + 64) of head h of sequence b into smem (0 past the end).
__device__ void load_row_stats(float* lse_s, float* d_s, const float* lse, const float* D, int b, int h, int first,
                               const Shape& s) {
  if (threadIdx.x < kCols) {
    const int t = first + threadIdx.x;
    const std::size_t at = (static_cast<std::size_t>(b) * s.NH + h) * s.T + t;
    lse_s[threadIdx.x] = t < s.T ? lse[at] : 0.0f;
    d_s[threadIdx.x] = t < s.T ? D[at] : 0.0f;
  }
}

#if __CUDA_ARCH__ >= 800
// A warp's 16 rows of HS bf16 values (ld kHld) as fragments, loaded once: the operand the warp's every tile takes.
template <int HS>
__device__ void load_operand(AFrag (&a)[kSlices<HS>], const bf* rows) {
#pragma unroll
  for (int k = 0; k < kSlices<HS>; ++k) wmma::load_matrix_sync(a[k], rows + k * 16, kHld<HS>);
}

template <int HS>
__device__ void zero(Acc (&acc)[kSlices<HS>]) {
#pragma unroll
  for (int n = 0; n < kSlices<HS>; ++n) wmma::fill_fragment(acc[n], 0.0f);
}

// A warp's out[16][kCols] (fp32, ld kSld) = a[16][HS] b[kCols][HS]^T (b: bf16 rows, ld kHld): q k^T and its kin.
template <int HS>
__device__ void rows_by_rows_t(float* out, const AFrag (&a)[kSlices<HS>], const bf* b) {
#pragma unroll
  for (int n = 0; n < kCols / 16; ++n) {
    Acc acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int k = 0; k < kSlices<HS>; ++k) {
      BtFrag fb;
      wmma::load_matrix_sync(fb, b + n * 16 * kHld<HS> + k * 16, kHld<HS>);
      wmma::mma_sync(acc, a[k], fb, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, kSld, wmma::mem_row_major);
  }
}

// The same with a's rows in smem (bf16, ld kHld), for a warp that cannot keep them in registers.
template <int HS>
__device__ void rows_by_rows_t(float* out, const bf* a, const bf* b) {
  AFrag fa[kSlices<HS>];
  load_operand<HS>(fa, a);
  rows_by_rows_t<HS>(out, fa, b);
}

// A warp's acc[16][HS] += p[16][kCols] (bf16, ld kPld) b[kCols][HS] (bf16 rows, ld kHld): P V, dS K, P^T dO, dS^T Q.
// Each slice of acc takes the tile's 16-row steps of b in order (as one product over the tile would).
template <int HS>
__device__ void add_rows_by_rows(Acc (&acc)[kSlices<HS>], const bf* p, const bf* b) {
#pragma unroll(HS > 64 ? 1 : kCols / 16)  // at 128 wide the unrolled loads would take the accumulators' registers
  for (int k = 0; k < kCols / 16; ++k) {
    AFrag fa;
    wmma::load_matrix_sync(fa, p + k * 16, kPld);
#pragma unroll
    for (int n = 0; n < kSlices<HS>; ++n) {
      BFrag fb;
      wmma::load_matrix_sync(fb, b + k * 16 * kHld<HS> + n * 16, kHld<HS>);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// The first row of this block's query tile, the last tiles first: a query tile's work grows with its place (its keys
// are those before it), so the longest blocks start in the first wave instead of trailing the last.
__device__ int last_first_tile(int T) {
  return ((T + kRows - 1) / kRows - 1 - static_cast<int>(blockIdx.x)) * kRows;
}

// Stages a warp's accumulator in smem [16][kOld] fp32 (its rows of the block's staging area).
template <int HS>
__device__ void stage(float* rows, const Acc (&acc)[kSlices<HS>]) {
#pragma unroll
  for (int n = 0; n < kSlices<HS>; ++n) wmma::store_matrix_sync(rows + n * 16, acc[n], kOld<HS>, wmma::mem_row_major);
  __syncwarp();
}

// acc[n] *= its row's factor, for a warp's 16 rows: `factors`, a warp's 16 x 16 fp32 tile (ld kSld) whose rows hold
// their factor, loaded as an accumulator, has each element's factor at the element's place in the fragment (a
// fragment's layout is opaque, but the same for every fragment of its type).
template <int HS>
__device__ void scale_rows(Acc (&acc)[kSlices<HS>], const float* factors) {
  Acc f;
  wmma::load_matrix_sync(f, factors, kSld, wmma::mem_row_major);
#pragma unroll
  for (int n = 0; n < kSlices<HS>; ++n) {
#pragma unroll
    for (int i = 0; i < Acc::num_elements; ++i) acc[n].x[i] *= f.x[i];
  }
}
#endif

// Writes (or adds, `add`) a warp's 16 staged accumulator rows times `scale` to dst + row * stride for rows
// first + r < limit.
template <int HS>
__device__ void store_rows(bf16_t* dst, std::size_t stride, const float* acc, int first, int limit, float scale,
                           bool add) {
  const int lane = threadIdx.x % kWarp;
  for (int i = lane; i < 16 * HS; i += kWarp) {
    const int r = i / HS, d = i % HS;
    if (first + r >= limit) continue;
    detail::store_grad(dst + static_cast<std::size_t>(first + r) * stride + d, acc[r * kOld<HS> + d] * scale, add);
  }
}

// The forward: block (query tile, head h, sequence b); warp w owns query rows q0 + 16 w .. + 15, their q fragments
// and their output accumulator O (registers), rescaled a row at a time as the row's running maximum grows. In the
// online softmax lane (r, half) = (lane % 16, lane / 16) takes row r's 32 columns of its half of the tile, and the
// row's maximum m and sum l (both lanes of a row hold them).
template <int HS>
__global__ void __launch_bounds__(kThreads) forward_kernel(bf16_t* out, float* lse, const bf16_t* qkv, Shape s,
                                                           float scale) {
#if __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char raw[];
  bf* q_s = reinterpret_cast<bf*>(raw);
  bf* k_s = q_s + kRows * kHld<HS>;
  bf* v_s = k_s + kCols * kHld<HS>;
  bf* p_s = v_s + kCols * kHld<HS>;
  auto* s_s = reinterpret_cast<float*>(p_s + kRows * kPld);
  float* l_s = s_s + kRows * kSld;
  auto* o_s = reinterpret_cast<float*>(raw);  // [kRows][kOld] after the last tile, over q, k and v
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / s.G();
  const int q0 = last_first_tile(s.T), r0 = warp * 16;
  const int r = lane % 16, half = lane / 16, t = q0 + r0 + r;  // this lane's row in the softmax
  const std::size_t RS = static_cast<std::size_t>(s.RS());
  const bf16_t* seq = qkv + static_cast<std::size_t>(b) * s.T * RS;
  load_rows<HS>(q_s, seq + h * HS, q0, s.T, RS);
  float* s_w = s_s + r0 * kSld;
  Acc o[kSlices<HS>];
  zero<HS>(o);
  AFrag q[kSlices<HS>];
  float m = -INFINITY, l = 0.0f;
  __syncthreads();  // q is set
  load_operand<HS>(q, q_s + r0 * kHld<HS>);
  const int last_key = min(q0 + kRows, s.T) - 1;
  for (int j0 = 0; j0 <= last_key; j0 += kCols) {
    __syncthreads();  // the previous tile's readers are done
    load_kv<HS>(k_s, v_s, seq, kvh, j0, s);
    __syncthreads();
    // A warp whose rows all come before the tile's keys skips it; with kCols == kRows none does (the last tile is
    // the diagonal one, whose first key is the block's first row), but without the test ptxas spills at HS = 128.
    if (j0 > q0 + r0 + 15) continue;
    rows_by_rows_t<HS>(s_w, q, k_s);
    __syncwarp();
    // Column pairs c, c + 1 of the half from c = 2 ((i + lane) % 16): each lane starts at its own pair, so that the
    // lanes' 8-byte reads (and 4-byte writes of P) fall in distinct banks.
    const float* srow = s_w + r * kSld + half * 32;
    const int first = j0 + half * 32;  // the key of the half's column 0
    float2 x[16];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int c = 2 * ((i + lane) % 16);
      const float2 v = *reinterpret_cast<const float2*>(srow + c);
      x[i].x = t < s.T && first + c <= t ? v.x * scale : -INFINITY;
      x[i].y = t < s.T && first + c + 1 <= t ? v.y * scale : -INFINITY;
      mx = fmaxf(mx, fmaxf(x[i].x, x[i].y));
    }
    const float m_new = fmaxf(m, fmaxf(mx, __shfl_xor_sync(detail::kFullMask, mx, 16)));
    const bool keeps = m_new != -INFINITY;  // a row past the sequence's end keeps nothing
    const float alpha = keeps ? expf(m - m_new) : 1.0f;  // 0 on the row's first tile (m = -inf)
    bf* prow = p_s + (r0 + r) * kPld + half * 32;
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int c = 2 * ((i + lane) % 16);
      const float pa = keeps ? expf(x[i].x - m_new) : 0.0f, pb = keeps ? expf(x[i].y - m_new) : 0.0f;
      sum += pa + pb;
      *reinterpret_cast<__nv_bfloat162*>(prow + c) = __floats2bfloat162_rn(pa, pb);
    }
    l = l * alpha + (sum + __shfl_xor_sync(detail::kFullMask, sum, 16));  // the same bits in both lanes of the row
    m = m_new;
    __syncwarp();  // the scores are read: their tile takes the rows' factors, 8 columns from each lane of a row
    for (int c = 0; c < 8; ++c) s_w[r * kSld + half * 8 + c] = alpha;
    __syncwarp();
    scale_rows<HS>(o, s_w);
    add_rows_by_rows<HS>(o, p_s + r0 * kPld, v_s);
    __syncwarp();
  }
  if (half == 0) {
    l_s[r0 + r] = l;
    if (t < s.T) lse[(static_cast<std::size_t>(b) * s.NH + h) * s.T + t] = m + logf(l);
  }
  __syncthreads();  // every warp is past its last tile: q, k and v's memory takes O (and l is set)
  float* o_w = o_s + r0 * kOld<HS>;
  stage<HS>(o_w, o);
  for (int i = lane; i < 16 * HS; i += kWarp) {
    const int row = i / HS, d = i % HS;
    if (q0 + r0 + row < s.T) {
      store(out + (static_cast<std::size_t>(b) * s.T + q0 + r0 + row) * s.C() + h * HS + d,
            o_w[row * kOld<HS> + d] / l_s[r0 + row]);
    }
  }
#endif
}

// dQ: block (query tile, head h, sequence b); warp w owns query rows q0 + 16 w .. + 15, their q and dO fragments and
// their dQ accumulator (registers).
template <int HS>
__global__ void __launch_bounds__(kThreads) dq_kernel(bf16_t* dqkv, const bf16_t* dout, const bf16_t* qkv,
                                                      const float* lse, const float* D, Shape s, float scale,
                                                      bool add) {
#if __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char raw[];
  bf* q_s = reinterpret_cast<bf*>(raw);
  bf* do_s = q_s + kRows * kHld<HS>;
  bf* k_s = do_s + kRows * kHld<HS>;
  bf* v_s = k_s + kCols * kHld<HS>;
  bf* ds_s = v_s + kCols * kHld<HS>;
  auto* s_s = reinterpret_cast<float*>(ds_s + kRows * kPld);
  float* dp_s = s_s + kRows * kSld;
  float* lse_s = dp_s + kRows * kSld;
  float* d_s = lse_s + kRows;
  auto* dq_s = reinterpret_cast<float*>(raw);  // [kRows][kOld] after the last tile, over q, dO, k and v
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / s.G();
  const int q0 = last_first_tile(s.T), r0 = warp * 16;
  const std::size_t RS = static_cast<std::size_t>(s.RS());
  const bf16_t* seq = qkv + static_cast<std::size_t>(b) * s.T * RS;
  load_rows<HS>(q_s, seq + h * HS, q0, s.T, RS);
  load_rows<HS>(do_s, dout + static_cast<std::size_t>(b) * s.T * s.C() + h * HS, q0, s.T, s.C());
  load_row_stats(lse_s, d_s, lse, D, b, h, q0, s);
  float* s_w = s_s + r0 * kSld;
  float* dp_w = dp_s + r0 * kSld;
  Acc dq[kSlices<HS>];
  zero<HS>(dq);
  AFrag q[kSlices<HS>], dO[kSlices<HS>];
  __syncthreads();  // q, dO, lse and D are set
  load_operand<HS>(q, q_s + r0 * kHld<HS>);
  load_operand<HS>(dO, do_s + r0 * kHld<HS>);
  const int last_key = min(q0 + kRows, s.T) - 1;
  for (int j0 = 0; j0 <= last_key; j0 += kCols) {
    __syncthreads();
    load_kv<HS>(k_s, v_s, seq, kvh, j0, s);
    __syncthreads();
    if (j0 > q0 + r0 + 15) continue;    // as in the forward: never with kCols == kRows
    rows_by_rows_t<HS>(s_w, q, k_s);    // S = Q K^T
    rows_by_rows_t<HS>(dp_w, dO, v_s);  // dP = dO V^T
    __syncwarp();
    for (int r = 0; r < 16; ++r) {
      const int t = q0 + r0 + r;
      for (int c = lane; c < kCols; c += kWarp) {
        const bool live = t < s.T && j0 + c <= t;
        const float p = live ? expf(s_w[r * kSld + c] * scale - lse_s[r0 + r]) : 0.0f;
        ds_s[(r0 + r) * kPld + c] = __float2bfloat16_rn(p * (dp_w[r * kSld + c] - d_s[r0 + r]));
      }
    }
    __syncwarp();
    add_rows_by_rows<HS>(dq, ds_s + r0 * kPld, k_s);  // dQ += dS K
    __syncwarp();
  }
  __syncthreads();  // every warp is past its last tile: the tiles' memory takes dQ
  float* dq_w = dq_s + r0 * kOld<HS>;
  stage<HS>(dq_w, dq);
  store_rows<HS>(dqkv + static_cast<std::size_t>(b) * s.T * RS + h * HS, RS, dq_w, q0 + r0, s.T, scale, add);
#endif
}

// dK, dV: block (key tile, key/value head kvh, sequence b); warp w owns key rows k0 + 16 w .. + 15, their k and v
// fragments and their dK and dV accumulators (registers). The query rows t >= k0 of the G query heads
// h = kvh G + g, g in order, in tiles of 64; per warp S^T = K Q^T and dP^T = V dO^T, so dV += P^T dO and
// dK += dS^T Q stay within the warp's rows.
template <int HS>
__global__ void __launch_bounds__(kThreads) dkv_kernel(bf16_t* dqkv, const bf16_t* dout, const bf16_t* qkv,
                                                       const float* lse, const float* D, Shape s, float scale,
                                                       bool add) {
#if __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char raw[];
  bf* k_s = reinterpret_cast<bf*>(raw);
  bf* v_s = k_s + kRows * kHld<HS>;
  bf* q_s = v_s + kRows * kHld<HS>;
  bf* do_s = q_s + kCols * kHld<HS>;
  bf* pt_s = do_s + kCols * kHld<HS>;
  bf* dst_s = pt_s + kRows * kPld;
  auto* st_s = reinterpret_cast<float*>(dst_s + kRows * kPld);
  float* dpt_s = st_s + kRows * kSld;
  float* lse_s = dpt_s + kRows * kSld;
  float* d_s = lse_s + kCols;
  auto* staged = reinterpret_cast<float*>(raw);  // [kRows][kOld] after the last tile (dK, then dV), over the tiles
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int kvh = blockIdx.y, b = blockIdx.z;
  const int k0 = blockIdx.x * kRows, r0 = warp * 16;
  const std::size_t RS = static_cast<std::size_t>(s.RS());
  const bf16_t* seq = qkv + static_cast<std::size_t>(b) * s.T * RS;
  load_kv<HS>(k_s, v_s, seq, kvh, k0, s);
  float* st_w = st_s + r0 * kSld;
  float* dpt_w = dpt_s + r0 * kSld;
  Acc dk[kSlices<HS>], dv[kSlices<HS>];
  zero<HS>(dk);
  zero<HS>(dv);
  // k and v as fragments where registers allow (at head size 128 the two accumulators take 128 of a thread's 255):
  // else from smem at each use.
  constexpr bool kHoist = HS <= 64;
  AFrag k[kHoist ? kSlices<HS> : 1], v[kHoist ? kSlices<HS> : 1];
  __syncthreads();  // k and v are set
  if constexpr (kHoist) {
    load_operand<HS>(k, k_s + r0 * kHld<HS>);
    load_operand<HS>(v, v_s + r0 * kHld<HS>);
  }
  for (int g = 0; g < s.G(); ++g) {
    const int h = kvh * s.G() + g;
    for (int t0 = k0; t0 < s.T; t0 += kCols) {
      __syncthreads();  // the previous tile's readers are done
      load_rows<HS>(q_s, seq + h * HS, t0, s.T, RS);
      load_rows<HS>(do_s, dout + static_cast<std::size_t>(b) * s.T * s.C() + h * HS, t0, s.T, s.C());
      load_row_stats(lse_s, d_s, lse, D, b, h, t0, s);
      __syncthreads();
      if constexpr (kHoist) {
        rows_by_rows_t<HS>(st_w, k, q_s);    // S^T = K Q^T
        rows_by_rows_t<HS>(dpt_w, v, do_s);  // dP^T = V dO^T
      } else {
        rows_by_rows_t<HS>(st_w, k_s + r0 * kHld<HS>, q_s);
        rows_by_rows_t<HS>(dpt_w, v_s + r0 * kHld<HS>, do_s);
      }
      __syncwarp();
      for (int r = 0; r < 16; ++r) {
        const int j = k0 + r0 + r;
        for (int c = lane; c < kCols; c += kWarp) {
          const int t = t0 + c;
          const bool live = j < s.T && t < s.T && t >= j;
          const float p = live ? expf(st_w[r * kSld + c] * scale - lse_s[c]) : 0.0f;
          pt_s[(r0 + r) * kPld + c] = __float2bfloat16_rn(p);
          dst_s[(r0 + r) * kPld + c] = __float2bfloat16_rn(p * (dpt_w[r * kSld + c] - d_s[c]));
        }
      }
      __syncwarp();
      add_rows_by_rows<HS>(dv, pt_s + r0 * kPld, do_s);  // dV += P^T dO
      add_rows_by_rows<HS>(dk, dst_s + r0 * kPld, q_s);  // dK += dS^T Q
      __syncwarp();
    }
  }
  __syncthreads();  // every warp is past its last tile: the tiles' memory takes dK, then dV
  float* rows_w = staged + r0 * kOld<HS>;
  bf16_t* rows = dqkv + static_cast<std::size_t>(b) * s.T * RS;
  stage<HS>(rows_w, dk);
  store_rows<HS>(rows + s.C() + kvh * HS, RS, rows_w, k0 + r0, s.T, scale, add);
  __syncwarp();
  stage<HS>(rows_w, dv);
  store_rows<HS>(rows + s.C() + s.NKV * HS + kvh * HS, RS, rows_w, k0 + r0, s.T, 1.0f, add);
#endif
}

// Calls f(std::integral_constant<int, HS>) for the head sizes the tensor-core kernels are built for.
template <typename F>
bool by_head_size(int hs, F&& f) {
  switch (hs) {
    case 16:
      f(std::integral_constant<int, 16>{});
      return true;
    case 32:
      f(std::integral_constant<int, 32>{});
      return true;
    case 64:
      f(std::integral_constant<int, 64>{});
      return true;
    case 128:
      f(std::integral_constant<int, 128>{});
      return true;
    default:
      return false;
  }
}

// Sets `kernel`'s dynamic shared memory limit to `smem` bytes (above the default 48 KB: opted in per kernel) and
// says whether its code was built for compute capability 8.0 or newer: below, its body is empty (the #if above),
// which a build for an older architecture run on a newer GPU (PTX compiled at load) would otherwise launch.
template <typename Kernel>
bool prepare(Kernel kernel, std::size_t smem) {
  cudaFuncAttributes attributes{};
  device::cuda::check(cudaFuncGetAttributes(&attributes, kernel), "cudaFuncGetAttributes");
  if (attributes.ptxVersion < 80) return false;
  device::cuda::check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                      "cudaFuncSetAttribute");
  return true;
}

// Whether the current GPU runs the tensor-core kernels for head size hs: compute capability 8.0 or newer (bf16 WMMA),
// room for the largest kernel's shared memory (dK, dV's: 89 KiB at hs = 64, 121 KiB at 128; an A100 has 163 KB) and
// kernels built for it. Decided once per GPU and head size, when the kernels' shared memory is also set (the calls
// of a step then launch and nothing else).
bool ready(int hs) {
  int device = 0;
  device::cuda::check(cudaGetDevice(&device), "cudaGetDevice");
  static std::mutex mutex;
  static std::map<std::pair<int, int>, bool> known;  // (device, hs) -> ready
  const std::lock_guard lock(mutex);
  if (const auto it = known.find({device, hs}); it != known.end()) return it->second;
  int major = 0, smem = 0;
  device::cuda::check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                      "cudaDeviceGetAttribute");
  device::cuda::check(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
                      "cudaDeviceGetAttribute");
  bool ok = false;
  const bool built = by_head_size(hs, [&](auto head) {
    constexpr int HS = decltype(head)::value;
    ok = major >= 8 && kDkvSmem<HS> <= static_cast<std::size_t>(smem) &&
         prepare(forward_kernel<HS>, kForwardSmem<HS>) && prepare(dq_kernel<HS>, kDqSmem<HS>) &&
         prepare(dkv_kernel<HS>, kDkvSmem<HS>);
  });
  return known[{device, hs}] = built && ok;
}

// Launches `kernel` (prepared by `ready`) with `smem` bytes of dynamic shared memory.
template <typename Kernel, typename... Args>
void launch(Kernel kernel, const char* name, dim3 grid, std::size_t smem, cudaStream_t stream, Args... args) {
  kernel<<<grid, kThreads, smem, stream>>>(args...);
  check_launch(name);
}

}  // namespace tc

void check_shape(const Shape& s) {
  if (s.B < 1 || s.T < 1 || s.NKV < 1 || s.NH < s.NKV || s.NH % s.NKV != 0 || s.hs < 1 || s.hs > kMaxHead) {
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
  if constexpr (std::is_same_v<T, bf16_t>) {
    if (tc::ready(hs)) {
      tc::by_head_size(hs, [&](auto head) {
        constexpr int HS = decltype(head)::value;
        tc::launch(tc::forward_kernel<HS>, "flash forward (tensor cores)",
                   dim3((T_ + tc::kRows - 1) / tc::kRows, NH, B), tc::kForwardSmem<HS>, stream, out, lse, qkv, s,
                   scale);
      });
      return;
    }
  }
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
  if constexpr (std::is_same_v<T, bf16_t>) {
    if (tc::ready(hs)) {
      tc::by_head_size(hs, [&](auto head) {
        constexpr int HS = decltype(head)::value;
        const int tiles = (T_ + tc::kRows - 1) / tc::kRows;
        tc::launch(tc::dq_kernel<HS>, "flash dQ (tensor cores)", dim3(tiles, NH, B), tc::kDqSmem<HS>, stream, dqkv,
                   dout, qkv, lse, static_cast<const float*>(D), s, scale, add);
        tc::launch(tc::dkv_kernel<HS>, "flash dK dV (tensor cores)", dim3(tiles, NKV, B), tc::kDkvSmem<HS>, stream,
                   dqkv, dout, qkv, lse, static_cast<const float*>(D), s, scale, add);
      });
      return;
    }
  }
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
