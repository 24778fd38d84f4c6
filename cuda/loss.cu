// The loss family on the GPU (ops/loss.h; shapes checked there): the loss-gradient kernels
// of the full losses over label chunks. Each loss kernel reads a logit chunk written by
// the GEMM without bias, adds the bias, and overwrites the entry with dL/dz / B — one
// read and one write of the chunk. Loss and zero counts are reduced per warp and added
// to a device accumulator, so a training step reads back one small struct at its end.
// Rows sit on grid.y, capped at kLossRowBlocks, with the kernels striding over the rest,
// so no batch or chunk size is too large for a launch.
#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "core/launch_shape.h"
#include "ops/loss.h"
#include "runtime.h"

namespace xmc::gpu {
namespace {

constexpr int kThreads = 256;

// Columns per block of the 2-D (column tiles × rows) grids.
constexpr int kColsPerBlock = kThreads * 4;

__host__ __device__ __forceinline__ __nv_bfloat16* as_bf16(Bf16* p) {
  return reinterpret_cast<__nv_bfloat16*>(p);
}

template <class T>  // double, unsigned long long
__device__ __forceinline__ T warp_sum(T v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

// One atomic per accumulator and block: warp sums, then the block's warps summed by warp
// 0 through shared memory. Every thread of the block must call it (it synchronises).
__device__ __forceinline__ void add_to_accum(LossAccum* acc, double loss,
                                             unsigned long long zeros) {
  __shared__ double s_loss[kThreads / 32];
  __shared__ unsigned long long s_zeros[kThreads / 32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  loss = warp_sum(loss);
  zeros = warp_sum(zeros);
  if (lane == 0) {
    s_loss[warp] = loss;
    s_zeros[warp] = zeros;
  }
  __syncthreads();
  if (warp == 0) {
    constexpr int kWarps = kThreads / 32;
    loss = lane < kWarps ? s_loss[lane] : 0.0;
    zeros = lane < kWarps ? s_zeros[lane] : 0ull;
    loss = warp_sum(loss);
    zeros = warp_sum(zeros);
    if (lane == 0) {
      if (loss != 0.0) atomicAdd(&acc->loss, loss);
      if (zeros != 0) atomicAdd(&acc->zero_grads, zeros);
    }
  }
}

// A thread's columns of a loss kernel: kPerThread consecutive columns j..j+3 of a tile of
// kColsPerBlock, read and written as float4 when the row allows (ld a multiple of 4, z
// 16-byte aligned, all four inside the chunk), else one by one.
constexpr int kPerThread = 4;
static_assert(kColsPerBlock == kThreads * kPerThread);

struct ThreadCols {
  int64_t j;  // first column
  int n;      // columns of this thread inside the chunk (0..4)
  bool vec;
};

__device__ __forceinline__ ThreadCols thread_cols(int64_t c, int64_t ld, const float* z) {
  ThreadCols t;
  t.j = static_cast<int64_t>(blockIdx.x) * kColsPerBlock + threadIdx.x * kPerThread;
  const int64_t left = c - t.j;
  t.n = left <= 0 ? 0 : (left < kPerThread ? static_cast<int>(left) : kPerThread);
  t.vec = t.n == kPerThread && ld % 4 == 0 && reinterpret_cast<uintptr_t>(z) % 16 == 0;
  return t;
}

__device__ __forceinline__ void load_cols(const float* row, const ThreadCols& t,
                                          float (&x)[kPerThread]) {
  if (t.vec) {
    const float4 v = *reinterpret_cast<const float4*>(row + t.j);
    x[0] = v.x;
    x[1] = v.y;
    x[2] = v.z;
    x[3] = v.w;
    return;
  }
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) x[k] = k < t.n ? row[t.j + k] : 0.0f;
}

// Writes the gradient: fp32 into the logit row, and its bf16 copy when g16 is set.
__device__ __forceinline__ void store_cols(float* row, __nv_bfloat16* g16row, const ThreadCols& t,
                                           const float (&g)[kPerThread]) {
  if (t.vec) {
    *reinterpret_cast<float4*>(row + t.j) = make_float4(g[0], g[1], g[2], g[3]);
  } else {
#pragma unroll
    for (int k = 0; k < kPerThread; ++k)
      if (k < t.n) row[t.j + k] = g[k];
  }
  if (g16row == nullptr) return;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k)
    if (k < t.n) g16row[t.j + k] = __float2bfloat16_rn(g[k]);
}

// The positives of a row among the thread's columns [first, first + 4): one binary search
// for the first target >= first, then a walk (targets are sorted and unique).
struct PositiveCursor {
  const uint32_t* pos;
  int64_t n, i;
  uint32_t next;
  __device__ __forceinline__ PositiveCursor(const uint32_t* p, int64_t np, uint32_t first)
      : pos(p), n(np), i(0) {
    int64_t hi = np;
    while (i < hi) {
      const int64_t mid = (i + hi) >> 1;
      if (pos[mid] < first) {
        i = mid + 1;
      } else {
        hi = mid;
      }
    }
    next = i < n ? pos[i] : 0xffffffffu;
  }
  // Is `label` a target? Call with increasing labels.
  __device__ __forceinline__ bool take(uint32_t label) {
    if (next != label) return false;
    ++i;
    next = i < n ? pos[i] : 0xffffffffu;
    return true;
  }
};

// Rows on grid.y, at most kLossRowBlocks of them (the kernels stride over the rest): a
// block's bias values stay in registers across its rows. (64 measured best on an H200:
// docs/benchmarks.md, "the loss pass".)
constexpr int64_t kLossRowBlocks = 64;

// grid (column tiles, row blocks): block (x, y) handles rows y, y + gridDim.y, ...; z
// [rows×c] with leading dimension ld.
template <LossType T>
__global__ void elementwise_kernel(float* __restrict__ z, int64_t rows, int64_t c, int64_t ld,
                                   const float* __restrict__ bias,
                                   const int64_t* __restrict__ indptr,
                                   const uint32_t* __restrict__ indices, int64_t lo, float inv_b,
                                   LossAccum* __restrict__ acc, __nv_bfloat16* __restrict__ g16,
                                   int64_t ld16) {
  double loss = 0.0;
  unsigned long long zeros = 0;
  const ThreadCols t = thread_cols(c, ld, z);
  float b[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) b[k] = bias != nullptr && k < t.n ? bias[t.j + k] : 0.0f;
  for (int64_t r = blockIdx.y; r < rows && t.n > 0; r += gridDim.y) {
    float* row = z + r * ld;
    float x[kPerThread];
    load_cols(row, t, x);
    PositiveCursor pos(indices + indptr[r], indptr[r + 1] - indptr[r],
                       static_cast<uint32_t>(lo + t.j));
    float g[kPerThread];
    float row_loss = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const float xk = x[k] + b[k];  // no bias: the forward added it (b = 0)
      const bool p = k < t.n && pos.take(static_cast<uint32_t>(lo + t.j + k));
      float gk;
      if constexpr (T == LossType::bce) {
        // log(1+exp(-y·z)) with y = ±1: softplus(z) - [pos]·z; sigmoid from the same exp.
        const float e = expf(-fabsf(xk));
        const float inv = __frcp_rn(1.0f + e);
        if (k < t.n) row_loss += fmaxf(xk, 0.0f) + log1pf(e) - (p ? xk : 0.0f);
        gk = (xk >= 0.0f ? inv : e * inv) - (p ? 1.0f : 0.0f);
      } else {
        const float y = p ? 1.0f : -1.0f;
        const float m = 1.0f - y * xk;
        if (m > 0.0f) {
          if (k < t.n) row_loss += m * m;
          gk = -2.0f * y * m;
        } else {
          gk = 0.0f;  // margin met: exactly zero
        }
      }
      g[k] = gk * inv_b;
      if (k < t.n && g[k] == 0.0f) ++zeros;
    }
    loss += static_cast<double>(row_loss);
    store_cols(row, g16 ? g16 + r * ld16 : nullptr, t, g);
  }
  add_to_accum(acc, loss, zeros);
}

// candidate_loss_grad's elementwise losses, one thread per entry (grid-stride), in the
// host's order of operations (ops/loss.cpp bce_row, squared_hinge_row).
template <LossType T>
__global__ void candidate_kernel(float* __restrict__ zg, int64_t nnz,
                                 const uint8_t* __restrict__ positive,
                                 const float* __restrict__ weight, double inv_b,
                                 LossAccum* __restrict__ acc) {
  double loss = 0.0;
  unsigned long long zeros = 0;
  const auto inv_bf = static_cast<float>(inv_b);
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < nnz;
       e += static_cast<int64_t>(gridDim.x) * kThreads) {
    const float x = zg[e];
    const bool p = positive[e] != 0;
    const float w = weight != nullptr ? weight[e] : 1.0f;
    float g;
    if constexpr (T == LossType::bce) {
      // softplus(x) - [pos]·x, gradient sigmoid(x) - [pos], both weighted.
      const float ex = expf(-fabsf(x));
      loss += static_cast<double>(w) * static_cast<double>(fmaxf(x, 0.0f) + log1pf(ex)) -
              (p ? static_cast<double>(w) * x : 0.0);
      const float sig = (x >= 0.0f ? 1.0f : ex) / (1.0f + ex);
      g = sig * inv_bf * w;
      if (p) g -= inv_bf * w;
    } else {
      const double y = p ? 1.0 : -1.0;
      const double m = 1.0 - y * static_cast<double>(x);
      double gd = 0.0;  // margin met: exactly zero
      if (m > 0) {
        loss += static_cast<double>(w) * (m * m);
        gd = -2.0 * y * m * static_cast<double>(w);
      }
      g = static_cast<float>(gd * inv_b);
    }
    zg[e] = g;
    if (g == 0.0f) ++zeros;
  }
  add_to_accum(acc, loss, zeros);
}

// candidate_loss_grad's softmax, a block per point: its entries [ptr[r], ptr[r+1]) in the
// host's order of operations (ops/loss.cpp candidate_softmax: the float max, the sum of
// exp(z - max) in double, lse = max + log(sum), -t·(z - lse) per positive, the gradient
// (exp((z - max) - (lse - max)) - t·[pos])·/B), expf where the host has its approximation. A
// point without positives contributes 0 and a zero gradient.
__global__ void candidate_softmax_kernel(float* __restrict__ zg, const int64_t* __restrict__ ptr,
                                         const uint8_t* __restrict__ positive, double inv_b,
                                         LossAccum* __restrict__ acc) {
  __shared__ float s_max[kThreads / 32];
  __shared__ double s_sum[kThreads / 32];
  __shared__ int s_pos[kThreads / 32];
  const int64_t r = blockIdx.x, e0 = ptr[r], e1 = ptr[r + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  constexpr int kWarps = kThreads / 32;
  float m = -INFINITY;
  int np = 0;
  for (int64_t e = e0 + threadIdx.x; e < e1; e += kThreads) {
    m = fmaxf(m, zg[e]);
    np += positive[e] != 0 ? 1 : 0;
  }
  for (int off = 16; off > 0; off >>= 1) {
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    np += __shfl_xor_sync(0xffffffffu, np, off);
  }
  if (lane == 0) {
    s_max[warp] = m;
    s_pos[warp] = np;
  }
  __syncthreads();
  m = -INFINITY;
  np = 0;
  for (int k = 0; k < kWarps; ++k) {
    m = fmaxf(m, s_max[k]);
    np += s_pos[k];
  }
  double loss = 0.0;
  unsigned long long zeros = 0;
  if (np == 0) {
    for (int64_t e = e0 + threadIdx.x; e < e1; e += kThreads) {
      zg[e] = 0.0f;
      ++zeros;
    }
    add_to_accum(acc, loss, zeros);
    return;
  }
  double sum = 0.0;
  for (int64_t e = e0 + threadIdx.x; e < e1; e += kThreads)
    sum += static_cast<double>(expf(zg[e] - m));
  sum = warp_sum(sum);
  if (lane == 0) s_sum[warp] = sum;
  __syncthreads();
  sum = 0.0;
  for (int k = 0; k < kWarps; ++k) sum += s_sum[k];
  const double lse = static_cast<double>(m) + log(sum);
  const double t = 1.0 / static_cast<double>(np);
  const auto shift = static_cast<float>(lse - static_cast<double>(m));
  const auto inv_bf = static_cast<float>(inv_b);
  const auto t_b = static_cast<float>(t * inv_b);
  for (int64_t e = e0 + threadIdx.x; e < e1; e += kThreads) {
    const float z = zg[e];
    float g = expf((z - m) - shift) * inv_bf;
    if (positive[e] != 0) {
      loss += t * (lse - static_cast<double>(z));
      g -= t_b;
    }
    zg[e] = g;
    if (g == 0.0f) ++zeros;
  }
  add_to_accum(acc, loss, zeros);
}

// One block per row: merges the chunk's max and sum of exp into the running stats.
__global__ void softmax_accumulate_kernel(const float* __restrict__ z, int64_t c, int64_t ld,
                                          const float* __restrict__ bias,
                                          float* __restrict__ run_max,
                                          float* __restrict__ run_sum) {
  __shared__ float s_red[kThreads / 32];
  const int64_t r = blockIdx.x;
  const float* row = z + r * ld;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;

  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) m = fmaxf(m, row[j] + bias[j]);
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, off));
  if (lane == 0) s_red[warp] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float bm = s_red[0];
    for (int w = 1; w < kThreads / 32; ++w) bm = fmaxf(bm, s_red[w]);
    s_red[0] = fmaxf(bm, run_max[r]);
  }
  __syncthreads();
  const float new_max = s_red[0];
  __syncthreads();

  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s += expf(row[j] + bias[j] - new_max);
  for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
  if (lane == 0) s_red[warp] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) total += s_red[w];
    // Rescale the running sum to the new max; 0 on the first chunk (exp(-inf) = 0).
    const float old = run_sum[r];
    const float rescaled = old == 0.0f ? 0.0f : old * expf(run_max[r] - new_max);
    run_sum[r] = rescaled + total;
    run_max[r] = new_max;
  }
}

__global__ void softmax_grad_kernel(float* __restrict__ z, int64_t c, int64_t ld,
                                    const float* __restrict__ bias,
                                    const float* __restrict__ run_max,
                                    const float* __restrict__ run_sum,
                                    const int64_t* __restrict__ indptr,
                                    const uint32_t* __restrict__ indices, int64_t lo, float inv_b,
                                    LossAccum* __restrict__ acc, __nv_bfloat16* __restrict__ g16,
                                    int64_t ld16, int64_t rows) {
  double loss = 0.0;
  const ThreadCols tc = thread_cols(c, ld, z);
  float b[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) b[k] = k < tc.n ? bias[tc.j + k] : 0.0f;
  for (int64_t r = blockIdx.y; r < rows && tc.n > 0; r += gridDim.y) {
    const int64_t np = indptr[r + 1] - indptr[r];
    float* row = z + r * ld;
    float g[kPerThread] = {0.0f, 0.0f, 0.0f, 0.0f};  // a row without positives: loss 0, gradient 0
    if (np > 0) {
      const float lse = run_max[r] + logf(run_sum[r]);
      const float t = 1.0f / static_cast<float>(np);
      float x[kPerThread];
      load_cols(row, tc, x);
      PositiveCursor pos(indices + indptr[r], np, static_cast<uint32_t>(lo + tc.j));
#pragma unroll
      for (int k = 0; k < kPerThread; ++k) {
        const float xk = x[k] + b[k];
        float gk = expf(xk - lse);
        if (k < tc.n && pos.take(static_cast<uint32_t>(lo + tc.j + k))) {
          loss += static_cast<double>(t) * (static_cast<double>(lse) - xk);  // -t·log p
          gk -= t;
        }
        g[k] = gk * inv_b;
      }
    }
    store_cols(row, g16 ? g16 + r * ld16 : nullptr, tc, g);
  }
  add_to_accum(acc, loss, 0ull);
}

__global__ void softmax_reset_kernel(float* run_max, float* run_sum, int64_t rows) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows) {
    run_max[i] = -INFINITY;
    run_sum[i] = 0.0f;
  }
}

// (column tiles of kColsPerBlock, row blocks) of the loss kernels.
dim3 loss_grid(ConstMatrix logits) {
  return dim3(launch::grid_x(launch::ceil_div(logits.cols, kColsPerBlock)),
              launch::grid_yz(std::min(logits.rows, kLossRowBlocks)));
}

}  // namespace

void elementwise_loss_grad(const CudaContext& ctx, LossType type, Matrix logits, const float* bias,
                           const DeviceCsr& targets, int64_t lo, int64_t batch_size, LossAccum* acc,
                           Bf16Matrix g_bf16) {
  if (logits.empty()) return;
  const dim3 grid = loss_grid(logits);
  const float inv_b = static_cast<float>(1.0 / static_cast<double>(batch_size));
  const auto kernel = type == LossType::bce ? elementwise_kernel<LossType::bce>
                                            : elementwise_kernel<LossType::squared_hinge>;
  XMC_CUDA_LAUNCH(kernel, grid, kThreads, 0, ctx.stream(), logits.data, logits.rows, logits.cols,
                  logits.ld, bias, targets.indptr, targets.indices, lo, inv_b, acc,
                  as_bf16(g_bf16.data), g_bf16.ld);
}

namespace {
__global__ void sparsify_kernel(float* __restrict__ g, int64_t rows, int64_t c, int64_t ld, float t,
                                uint64_t stream, int64_t col0, int64_t counter_cols,
                                __nv_bfloat16* __restrict__ g16, int64_t ld16) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < c;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const float v =
          sparsify_value(g[r * ld + j], t,
                         rounding_bits(stream, static_cast<uint64_t>(r * counter_cols + col0 + j)));
      g[r * ld + j] = v;
      if (g16) g16[r * ld16 + j] = __float2bfloat16_rn(v);
    }
}
}  // namespace

void sparsify_gradient(const CudaContext& ctx, Matrix g, float threshold, uint64_t stream,
                       int64_t col0, int64_t counter_cols, Bf16Matrix g_bf16) {
  if (g.empty()) return;
  XMC_CUDA_LAUNCH(sparsify_kernel, loss_grid(g), kThreads, 0, ctx.stream(), g.data, g.rows, g.cols,
                  g.ld, threshold, stream, col0, counter_cols, as_bf16(g_bf16.data), g_bf16.ld);
}

void softmax_reset(const CudaContext& ctx, DeviceSoftmaxStats stats, int64_t rows) {
  if (rows == 0) return;
  XMC_CUDA_LAUNCH(softmax_reset_kernel, launch::grid_x(launch::ceil_div(rows, kThreads)), kThreads,
                  0, ctx.stream(), stats.max, stats.sumexp, rows);
}

void softmax_accumulate(const CudaContext& ctx, ConstMatrix logits, const float* bias,
                        DeviceSoftmaxStats stats) {
  if (logits.empty()) return;
  XMC_CUDA_REQUIRE(logits.rows <= launch::kMaxGridX, logits.rows);
  XMC_CUDA_LAUNCH(softmax_accumulate_kernel, launch::grid_x(logits.rows), kThreads, 0, ctx.stream(),
                  logits.data, logits.cols, logits.ld, bias, stats.max, stats.sumexp);
}

void softmax_loss_grad(const CudaContext& ctx, Matrix logits, const float* bias,
                       DeviceSoftmaxStats stats, const DeviceCsr& targets, int64_t lo,
                       int64_t batch_size, LossAccum* acc, Bf16Matrix g_bf16) {
  if (logits.empty()) return;
  const float inv_b = static_cast<float>(1.0 / static_cast<double>(batch_size));
  XMC_CUDA_LAUNCH(softmax_grad_kernel, loss_grid(logits), kThreads, 0, ctx.stream(), logits.data,
                  logits.cols, logits.ld, bias, stats.max, stats.sumexp, targets.indptr,
                  targets.indices, lo, inv_b, acc, as_bf16(g_bf16.data), g_bf16.ld, logits.rows);
}

void candidate_loss_grad(const CudaContext& ctx, LossType type, int64_t nnz,
                         const uint8_t* positive, const float* weight, int64_t batch_size,
                         float* zg, LossAccum* acc) {
  if (nnz == 0) return;
  const double inv_b = 1.0 / static_cast<double>(batch_size);
  const auto blocks =
      static_cast<unsigned>(std::min<int64_t>(launch::ceil_div(nnz, kThreads), 4096));
  auto kernel = type == LossType::bce ? candidate_kernel<LossType::bce>
                                      : candidate_kernel<LossType::squared_hinge>;
  XMC_CUDA_LAUNCH(kernel, blocks, kThreads, 0, ctx.stream(), zg, nnz, positive, weight, inv_b, acc);
}

void candidate_softmax_grad(const CudaContext& ctx, const int64_t* ptr, int64_t rows,
                            const uint8_t* positive, int64_t batch_size, float* zg,
                            LossAccum* acc) {
  if (rows == 0) return;
  XMC_CUDA_REQUIRE(rows <= launch::kMaxGridX, rows);
  XMC_CUDA_LAUNCH(candidate_softmax_kernel, static_cast<unsigned>(rows), kThreads, 0, ctx.stream(),
                  zg, ptr, positive, 1.0 / static_cast<double>(batch_size), acc);
}

}  // namespace xmc::gpu
