// Fixed fan-in sparse layer on the GPU (ops/fixed_fanin.h; shapes checked there) and the
// transposes that produce its input layout ut [m×B].
//
// Bandwidth design (B = 64, d = 768: ut is 196 KiB and stays in L2, so what moves from
// DRAM is idx + w once, and z or g once):
// - forward: a block per tile of 32 labels, a warp per 4 of them; the warp reads each
//   label's indices and weights once per batch tile of 64 (32 at a time, coalesced, then
//   broadcast by shuffles), lanes run over the batch so every gather of an ut row is a
//   coalesced 256-byte read; results go through shared memory so z rows are written 32
//   labels (128 bytes) at a time.
// - weight gradient: a warp per label, lanes over the batch (coalesced ut reads), each lane
//   accumulating 32 slots at once; a 31-shuffle butterfly hands slot k's batch sum to lane
//   k. Batch tiles of 32 whose gradients are all zero are skipped, all-zero labels write
//   dw = 0 without reading ut.
// - input gradient: a warp per label, lanes over the label's slots, rows with g == 0
//   skipped (warp-uniform); accumulated in a shared-memory copy of a batch tile of du
//   when it fits, flushed with one global atomic per nonzero element.
#include <cuda_bf16.h>

#include <algorithm>

#include "core/launch_shape.h"
#include "ops/fixed_fanin.h"
#include "runtime.h"

namespace xmc::gpu {
namespace {

constexpr unsigned kFfFull = 0xffffffffu;
constexpr int kFfThreads = 256;
constexpr int kFfWarps = kFfThreads / 32;
constexpr int kFfLabelsPerWarp = 4;
constexpr int kFfLabelTile = kFfWarps * kFfLabelsPerWarp;  // 32 labels per block
constexpr int kFfBatchTile = 64;                           // 2 batch rows per lane
// Shared-memory budget of the input gradient's du tile (opt-in above 48 KiB).
constexpr int64_t kFfDuSmemBytes = 96 * 1024;

__device__ __forceinline__ float ff_warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFfFull, v, off);
  return v;
}

// v[k] on every lane -> lane k returns the sum over lanes of v[k] (31 shuffles).
__device__ __forceinline__ float ff_transpose_reduce(float (&v)[32], int lane) {
#pragma unroll
  for (int s = 16; s >= 1; s >>= 1) {
    const bool upper = (lane & s) != 0;
#pragma unroll
    for (int i = 0; i < s; ++i) {
      const float send = upper ? v[i] : v[i + s];
      const float keep = upper ? v[i + s] : v[i];
      v[i] = keep + __shfl_xor_sync(kFfFull, send, s);
    }
  }
  return v[0];
}

__global__ void __launch_bounds__(kFfThreads)
    ff_forward_kernel(const uint32_t* __restrict__ idx, const float* __restrict__ w,
                      const float* __restrict__ bias, int64_t n, int fan_in,
                      const float* __restrict__ ut, int64_t ldu, int64_t batch,
                      float* __restrict__ z, int64_t ldz) {
  __shared__ float tile[kFfBatchTile][kFfLabelTile + 1];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t l0 = static_cast<int64_t>(blockIdx.x) * kFfLabelTile;
  for (int64_t b0 = 0; b0 < batch; b0 += kFfBatchTile) {
    const bool in0 = b0 + lane < batch;
    const bool in1 = b0 + lane + 32 < batch;
    float acc[kFfLabelsPerWarp][2];
#pragma unroll
    for (int q = 0; q < kFfLabelsPerWarp; ++q) {
      const int64_t l = l0 + warp * kFfLabelsPerWarp + q;
      const float b = (bias != nullptr && l < n) ? bias[l] : 0.0f;
      acc[q][0] = b;
      acc[q][1] = b;
    }
    for (int j0 = 0; j0 < fan_in; j0 += 32) {
      const int cnt = min(32, fan_in - j0);
      uint32_t my_idx[kFfLabelsPerWarp];
      float my_w[kFfLabelsPerWarp];
#pragma unroll
      for (int q = 0; q < kFfLabelsPerWarp; ++q) {
        const int64_t l = l0 + warp * kFfLabelsPerWarp + q;
        const bool ok = l < n && lane < cnt;
        my_idx[q] = ok ? idx[l * fan_in + j0 + lane] : 0u;
        my_w[q] = ok ? w[l * fan_in + j0 + lane] : 0.0f;
      }
      for (int jj = 0; jj < cnt; ++jj) {
#pragma unroll
        for (int q = 0; q < kFfLabelsPerWarp; ++q) {
          const uint32_t i = __shfl_sync(kFfFull, my_idx[q], jj);
          const float wv = __shfl_sync(kFfFull, my_w[q], jj);
          if (l0 + warp * kFfLabelsPerWarp + q >= n) continue;  // warp-uniform
          const float* row = ut + static_cast<int64_t>(i) * ldu + b0;
          if (in0) acc[q][0] = fmaf(wv, __ldg(row + lane), acc[q][0]);
          if (in1) acc[q][1] = fmaf(wv, __ldg(row + lane + 32), acc[q][1]);
        }
      }
    }
#pragma unroll
    for (int q = 0; q < kFfLabelsPerWarp; ++q) {
      tile[lane][warp * kFfLabelsPerWarp + q] = acc[q][0];
      tile[lane + 32][warp * kFfLabelsPerWarp + q] = acc[q][1];
    }
    __syncthreads();
    for (int r = warp; r < kFfBatchTile; r += kFfWarps) {
      const int64_t b = b0 + r;
      const int64_t l = l0 + lane;
      if (b < batch && l < n) z[b * ldz + l] = tile[r][lane];
    }
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kFfThreads)
    ff_weight_grad_kernel(const uint32_t* __restrict__ idx, int64_t n, int fan_in,
                          const float* __restrict__ g, int64_t ldg, const float* __restrict__ ut,
                          int64_t ldu, int64_t batch, float* __restrict__ dw,
                          float* __restrict__ db, unsigned long long* __restrict__ zero_labels) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  unsigned long long zeros = 0;
  for (int q = 0; q < kFfLabelsPerWarp; ++q) {
    const int64_t l = static_cast<int64_t>(blockIdx.x) * kFfLabelTile + warp * kFfLabelsPerWarp + q;
    if (l >= n) break;  // warp-uniform
    float s = 0.0f;
    bool any = false;
    for (int64_t b = lane; b < batch; b += 32) {
      const float v = __ldg(g + b * ldg + l);
      s += v;
      any |= v != 0.0f;
    }
    s = ff_warp_sum(s);
    any = __any_sync(kFfFull, any);
    if (db != nullptr && lane == 0) db[l] = s;
    float* dwl = dw + l * fan_in;
    if (!any) {
      for (int j = lane; j < fan_in; j += 32) dwl[j] = 0.0f;
      ++zeros;
      continue;
    }
    for (int j0 = 0; j0 < fan_in; j0 += 32) {
      const int cnt = min(32, fan_in - j0);
      const uint32_t my_idx = lane < cnt ? idx[l * fan_in + j0 + lane] : 0u;
      float v[32];
#pragma unroll
      for (int k = 0; k < 32; ++k) v[k] = 0.0f;
      for (int64_t b0 = 0; b0 < batch; b0 += 32) {
        const int64_t b = b0 + lane;
        const float gv = b < batch ? __ldg(g + b * ldg + l) : 0.0f;
        if (!__any_sync(kFfFull, gv != 0.0f)) continue;  // zero-skipping, per batch tile
#pragma unroll
        for (int k = 0; k < 32; ++k) {
          const uint32_t i = __shfl_sync(kFfFull, my_idx, k);
          if (k < cnt && b < batch)
            v[k] = fmaf(gv, __ldg(ut + static_cast<int64_t>(i) * ldu + b), v[k]);
        }
      }
      const float sum = ff_transpose_reduce(v, lane);
      if (lane < cnt) dwl[j0 + lane] = sum;
    }
  }
  if (zero_labels != nullptr && lane == 0 && zeros != 0) atomicAdd(zero_labels, zeros);
}

// grid (label slices, batch tiles of 32 rows). kShared: du tile [rows×m] in shared memory.
template <bool kShared>
__global__ void __launch_bounds__(kFfThreads)
    ff_input_grad_kernel(const uint32_t* __restrict__ idx, const float* __restrict__ w, int64_t n,
                         int fan_in, const float* __restrict__ g, int64_t ldg, int64_t batch,
                         float* __restrict__ du, int64_t ldd, int64_t m, int64_t labels_per_block) {
  extern __shared__ float ff_s_du[];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t b0 = static_cast<int64_t>(blockIdx.y) * 32;
  const int rows = static_cast<int>(min(static_cast<int64_t>(32), batch - b0));
  if constexpr (kShared) {
    for (int64_t i = threadIdx.x; i < rows * m; i += blockDim.x) ff_s_du[i] = 0.0f;
    __syncthreads();
  }
  const int64_t l_begin = static_cast<int64_t>(blockIdx.x) * labels_per_block;
  const int64_t l_end = min(n, l_begin + labels_per_block);
  for (int64_t l = l_begin + warp; l < l_end; l += kFfWarps) {
    const float g_lane = lane < rows ? __ldg(g + (b0 + lane) * ldg + l) : 0.0f;
    const unsigned nz = __ballot_sync(kFfFull, g_lane != 0.0f);
    if (nz == 0u) continue;
    for (int j0 = 0; j0 < fan_in; j0 += 32) {
      const bool valid = j0 + lane < fan_in;
      const uint32_t col = valid ? idx[l * fan_in + j0 + lane] : 0u;
      const float wv = valid ? w[l * fan_in + j0 + lane] : 0.0f;
      unsigned mask = nz;
      while (mask != 0u) {
        const int r = __ffs(static_cast<int>(mask)) - 1;
        mask &= mask - 1u;
        const float gv = __shfl_sync(kFfFull, g_lane, r);
        if (!valid) continue;
        if constexpr (kShared) {
          atomicAdd(ff_s_du + static_cast<int64_t>(r) * m + col, gv * wv);
        } else {
          atomicAdd(du + (b0 + r) * ldd + col, gv * wv);
        }
      }
    }
  }
  if constexpr (kShared) {
    __syncthreads();
    for (int64_t i = threadIdx.x; i < rows * m; i += blockDim.x) {
      const float v = ff_s_du[i];
      if (v != 0.0f) atomicAdd(du + (b0 + i / m) * ldd + i % m, v);
    }
  }
}

// ut [cols×rows] = transpose of u [rows×cols], 32×32 tiles through shared memory.
template <class Out>
__global__ void ff_transpose_kernel(const float* __restrict__ u, int64_t rows, int64_t cols,
                                    int64_t ldu, Out* __restrict__ ut, int64_t ldt) {
  __shared__ float t[32][33];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * 32;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * 32;
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t r = r0 + k, c = c0 + threadIdx.x;
    if (r < rows && c < cols) t[k][threadIdx.x] = u[r * ldu + c];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t c = c0 + k, r = r0 + threadIdx.x;
    if (r < rows && c < cols) {
      if constexpr (sizeof(Out) == 2) {
        ut[c * ldt + r] = __float2bfloat16_rn(t[threadIdx.x][k]);
      } else {
        ut[c * ldt + r] = t[threadIdx.x][k];
      }
    }
  }
}

unsigned ff_blocks(int64_t n) {
  const int64_t b = (n + kFfLabelTile - 1) / kFfLabelTile;
  XMC_CUDA_REQUIRE(b <= 2147483647, b);
  return static_cast<unsigned>(b);
}

template <class Out>
void ff_transpose(const CudaContext& ctx, ConstMatrix u, Out* ut, int64_t ldt) {
  if (u.empty()) return;
  // u holds one batch: its 32-row tiles fit on grid.y for any batch a config allows.
  static_assert(launch::batch_tiles_fit(32));
  const int64_t by = (u.rows + 31) / 32;
  XMC_CUDA_REQUIRE(by <= launch::kMaxGridYZ, u.rows);
  const dim3 grid(static_cast<unsigned>((u.cols + 31) / 32), static_cast<unsigned>(by));
  XMC_CUDA_LAUNCH(ff_transpose_kernel<Out>, grid, dim3(32, 8), 0, ctx.stream(), u.data, u.rows,
                  u.cols, u.ld, ut, ldt);
}

}  // namespace

void transpose(const CudaContext& ctx, ConstMatrix u, Matrix ut) {
  ff_transpose<float>(ctx, u, ut.data, ut.ld);
}

void transpose(const CudaContext& ctx, ConstMatrix u, Bf16Matrix ut) {
  ff_transpose<__nv_bfloat16>(ctx, u, reinterpret_cast<__nv_bfloat16*>(ut.data), ut.ld);
}

void fixed_fanin_forward(const CudaContext& ctx, const uint32_t* idx, const float* w,
                         const float* bias, int64_t n, int64_t fan_in, ConstMatrix ut, Matrix z) {
  if (n == 0 || z.rows == 0) return;
  XMC_CUDA_LAUNCH(ff_forward_kernel, ff_blocks(n), kFfThreads, 0, ctx.stream(), idx, w, bias, n,
                  static_cast<int>(fan_in), ut.data, ut.ld, ut.cols, z.data, z.ld);
}

void fixed_fanin_weight_grad(const CudaContext& ctx, const uint32_t* idx, int64_t n, int64_t fan_in,
                             ConstMatrix g, ConstMatrix ut, float* dw, float* db,
                             unsigned long long* zero_labels) {
  if (n == 0) return;
  XMC_CUDA_LAUNCH(ff_weight_grad_kernel, ff_blocks(n), kFfThreads, 0, ctx.stream(), idx, n,
                  static_cast<int>(fan_in), g.data, g.ld, ut.data, ut.ld, g.rows, dw, db,
                  zero_labels);
}

void fixed_fanin_input_grad(const CudaContext& ctx, const uint32_t* idx, const float* w, int64_t n,
                            int64_t fan_in, ConstMatrix g, Matrix du) {
  if (n == 0 || g.rows == 0 || du.cols == 0) return;
  const int64_t m = du.cols;
  static_assert(launch::batch_tiles_fit(32));  // tiles of one batch always fit on grid.y
  const int64_t batch_tiles = (g.rows + 31) / 32;
  XMC_CUDA_REQUIRE(batch_tiles <= launch::kMaxGridYZ, g.rows);
  // Enough label slices for about four blocks per SM in all.
  const int64_t sms = ctx.info().multiprocessors > 0 ? ctx.info().multiprocessors : 80;
  const int64_t slices =
      std::max<int64_t>(1, std::min((n + 255) / 256, (4 * sms + batch_tiles - 1) / batch_tiles));
  const int64_t per_block = (n + slices - 1) / slices;
  const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>(batch_tiles));
  const int64_t tile_bytes =
      std::min<int64_t>(32, g.rows) * m * static_cast<int64_t>(sizeof(float));
  if (tile_bytes <= kFfDuSmemBytes) {
    const int bytes = static_cast<int>(tile_bytes);
    XMC_CUDA_CHECK(cudaFuncSetAttribute(ff_input_grad_kernel<true>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    XMC_CUDA_LAUNCH(ff_input_grad_kernel<true>, grid, kFfThreads, static_cast<size_t>(bytes),
                    ctx.stream(), idx, w, n, static_cast<int>(fan_in), g.data, g.ld, g.rows,
                    du.data, du.ld, m, per_block);
  } else {
    XMC_CUDA_LAUNCH(ff_input_grad_kernel<false>, grid, kFfThreads, 0, ctx.stream(), idx, w, n,
                    static_cast<int>(fan_in), g.data, g.ld, g.rows, du.data, du.ld, m, per_block);
  }
}

}  // namespace xmc::gpu
