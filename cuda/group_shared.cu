// Group-shared fixed fan-in (HASTE) on the GPU (ops/group_shared.h; shapes checked there).
// Labels r of group k = r / G share the index set idx[k, 0..F); a block per (group, batch
// tile of 64) gathers the group's F input rows of ut [m×B] once into shared memory and
// runs dense products over them:
//   forward        Z_k [Bt×G]  = X_k [Bt×F] · W_kᵀ [F×G]       (+ bias)
//   weight grad    ∇W_k [G×F]  = ∇Z_kᵀ [G×B] · X_k [B×F]       (block owns its rows: no atomics)
//   input grad     ∇X_k [Bt×F] = ∇Z_k [Bt×G] · W_k [G×F], scattered into du by atomics
// fp32: shared-memory tiled SIMT (64×64 output tile, K chunks of 32, 4×4 per thread),
// FMA in fp32. bf16: the whole gathered tile X_k [F×64] (F <= 256, zero-padded to a
// multiple of 16) and W_k are staged as bf16 (16-byte cp.async copies where the rows are
// aligned), nvcuda::wmma 16×16×16 bf16 MMA with fp32
// accumulation, loop over F in steps of 16; more than 48 KiB of dynamic shared memory is
// opted in per kernel. Partial groups, F and B not multiples of the tiles: zero padding
// in shared memory, guarded writes. Groups larger than 64 labels run in label tiles of 64
// (the fp32 kernels and the bf16 weight gradient then gather X again per label tile).
#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>

#include "core/launch_shape.h"
#include "ops/group_shared.h"
#include "runtime.h"

namespace xmc::gpu {
namespace {

constexpr int kGsThreads = 256;
constexpr int kGsWarps = kGsThreads / 32;
constexpr int kGsTile = 64;  // batch tile, label tile, F tile
constexpr int kGsKc = 32;    // K chunk of the SIMT kernels
constexpr int kGsPad = 4;    // fp32 shared row padding (keeps float4 alignment)
constexpr int kGsPad16 = 8;  // bf16 shared row padding (keeps wmma's 16-byte ldm rule)
constexpr int kGsMaxFanIn = 256;
constexpr int kGsMaxFrags = 8;  // accumulator fragments per warp (64×256 / 256 / 8)

// ---------------------------------------------------------------------------------------
// fp32 SIMT: acc[i][j] += sum_k a[k][ty*4 + i] · b[k][tx*4 + j]
// 16-byte aligned: gs_simt_product reads it with float4 loads (a row is (64 + 4) floats,
// a multiple of 16 bytes, so every row start stays aligned).
struct __align__(16) GsTiles {
  float a[kGsKc][kGsTile + kGsPad];
  float b[kGsKc][kGsTile + kGsPad];
};
static_assert(alignof(GsTiles) >= 16 && ((kGsTile + kGsPad) * sizeof(float)) % 16 == 0);

// Called by the whole block once both tiles are written: a barrier before (the tiles are
// complete) and after (nobody reads them when the next chunk overwrites them).
__device__ __forceinline__ void gs_simt_product(const GsTiles& s, float (&acc)[4][4], int tx,
                                                int ty) {
  __syncthreads();
#pragma unroll 8
  for (int k = 0; k < kGsKc; ++k) {
    const float4 av = *reinterpret_cast<const float4*>(&s.a[k][ty * 4]);
    const float4 bv = *reinterpret_cast<const float4*>(&s.b[k][tx * 4]);
    const float ar[4] = {av.x, av.y, av.z, av.w};
    const float br[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
  }
  __syncthreads();
}

// The block's group k = blockIdx.x: its labels [r_begin, r_begin + glen) and index set ik.
struct GsGroup {
  int64_t r_begin, glen;
  const uint32_t* ik;
};
__device__ __forceinline__ GsGroup gs_group(const uint32_t* idx, int64_t n, int64_t group,
                                            int fan_in) {
  const int64_t k = blockIdx.x;
  return {k * group, min(group, n - k * group), idx + k * fan_in};
}

// db[r_begin + r] = sum_b g[b, r_begin + r] for the group's labels r < glen (fp32 g).
__device__ __forceinline__ void gs_bias_grad(const float* __restrict__ g, int64_t ldg,
                                             int64_t batch, int64_t r_begin, int64_t glen,
                                             float* __restrict__ db) {
  for (int64_t r = threadIdx.x; r < glen; r += kGsThreads) {
    float sum = 0.0f;
    for (int64_t b = 0; b < batch; ++b) sum += __ldg(g + b * ldg + r_begin + r);
    db[r_begin + r] = sum;
  }
}

// grid (groups, batch tiles). Output tile rows = batch, cols = labels.
__global__ void __launch_bounds__(kGsThreads)
    gs_forward_f32_kernel(const uint32_t* __restrict__ idx, const float* __restrict__ w,
                          const float* __restrict__ bias, int64_t n, int64_t group, int fan_in,
                          const float* __restrict__ ut, int64_t ldu, int64_t batch,
                          float* __restrict__ z, int64_t ldz) {
  __shared__ GsTiles s;
  const int t = threadIdx.x;
  const int tx = t % 16, ty = t / 16;
  const auto [r_begin, glen, ik] = gs_group(idx, n, group, fan_in);
  const int64_t b0 = static_cast<int64_t>(blockIdx.y) * kGsTile;
  for (int64_t rt = 0; rt < glen; rt += kGsTile) {
    float acc[4][4] = {};
    for (int j0 = 0; j0 < fan_in; j0 += kGsKc) {
      for (int i = 0; i < 8; ++i) {  // a[j][b] = ut[ik[j0+j], b0+b]
        const int j = t / 64 + 4 * i, b = t % 64;
        s.a[j][b] = (j0 + j < fan_in && b0 + b < batch)
                        ? __ldg(ut + static_cast<int64_t>(ik[j0 + j]) * ldu + b0 + b)
                        : 0.0f;
      }
      for (int i = 0; i < 8; ++i) {  // b[j][r] = w[r_begin+rt+r, j0+j]
        const int j = t % 32, r = t / 32 + 8 * i;
        s.b[j][r] = (j0 + j < fan_in && rt + r < glen)
                        ? __ldg(w + (r_begin + rt + r) * fan_in + j0 + j)
                        : 0.0f;
      }
      gs_simt_product(s, acc, tx, ty);
    }
    for (int i = 0; i < 4; ++i) {
      const int64_t b = b0 + ty * 4 + i;
      if (b >= batch) continue;
      for (int j = 0; j < 4; ++j) {
        const int64_t r = rt + tx * 4 + j;
        if (r < glen) {
          const int64_t l = r_begin + r;
          z[b * ldz + l] = acc[i][j] + (bias != nullptr ? bias[l] : 0.0f);
        }
      }
    }
  }
}

// grid (groups). Output tile rows = labels, cols = slots j; K = batch.
__global__ void __launch_bounds__(kGsThreads)
    gs_weight_grad_f32_kernel(const uint32_t* __restrict__ idx, int64_t n, int64_t group,
                              int fan_in, const float* __restrict__ g, int64_t ldg,
                              const float* __restrict__ ut, int64_t ldu, int64_t batch,
                              float* __restrict__ dw, float* __restrict__ db) {
  __shared__ GsTiles s;
  const int t = threadIdx.x;
  const int tx = t % 16, ty = t / 16;
  const auto [r_begin, glen, ik] = gs_group(idx, n, group, fan_in);
  for (int64_t rt = 0; rt < glen; rt += kGsTile) {
    for (int jt = 0; jt < fan_in; jt += kGsTile) {
      float acc[4][4] = {};
      for (int64_t b0 = 0; b0 < batch; b0 += kGsKc) {
        bool nonzero = false;
        for (int i = 0; i < 8; ++i) {  // a[b][r] = g[b0+b, r_begin+rt+r]
          const int r = t % 64, b = t / 64 + 4 * i;
          const float v = (b0 + b < batch && rt + r < glen)
                              ? __ldg(g + (b0 + b) * ldg + r_begin + rt + r)
                              : 0.0f;
          s.a[b][r] = v;
          nonzero |= v != 0.0f;
        }
        if (!__syncthreads_or(nonzero)) continue;  // all-zero gradient chunk: skip the gather
        for (int i = 0; i < 8; ++i) {              // b[b][j] = ut[ik[jt+j], b0+b]
          const int b = t % 32, j = t / 32 + 8 * i;
          s.b[b][j] = (jt + j < fan_in && b0 + b < batch)
                          ? __ldg(ut + static_cast<int64_t>(ik[jt + j]) * ldu + b0 + b)
                          : 0.0f;
        }
        gs_simt_product(s, acc, tx, ty);
      }
      for (int i = 0; i < 4; ++i) {
        const int64_t r = rt + ty * 4 + i;
        if (r >= glen) continue;
        for (int j = 0; j < 4; ++j) {
          const int jj = jt + tx * 4 + j;
          if (jj < fan_in) dw[(r_begin + r) * fan_in + jj] = acc[i][j];
        }
      }
    }
  }
  if (db != nullptr) gs_bias_grad(g, ldg, batch, r_begin, glen, db);
}

// grid (groups, batch tiles). Output tile rows = batch, cols = slots j; K = labels.
__global__ void __launch_bounds__(kGsThreads)
    gs_input_grad_f32_kernel(const uint32_t* __restrict__ idx, const float* __restrict__ w,
                             int64_t n, int64_t group, int fan_in, const float* __restrict__ g,
                             int64_t ldg, int64_t batch, float* __restrict__ du, int64_t ldd) {
  __shared__ GsTiles s;
  const int t = threadIdx.x;
  const int tx = t % 16, ty = t / 16;
  const auto [r_begin, glen, ik] = gs_group(idx, n, group, fan_in);
  const int64_t b0 = static_cast<int64_t>(blockIdx.y) * kGsTile;
  for (int jt = 0; jt < fan_in; jt += kGsTile) {
    float acc[4][4] = {};
    bool any = false;
    for (int64_t r0 = 0; r0 < glen; r0 += kGsKc) {
      bool nonzero = false;
      for (int i = 0; i < 8; ++i) {  // a[r][b] = g[b0+b, r_begin+r0+r]
        const int r = t % 32, b = t / 32 + 8 * i;
        const float v =
            (b0 + b < batch && r0 + r < glen) ? __ldg(g + (b0 + b) * ldg + r_begin + r0 + r) : 0.0f;
        s.a[r][b] = v;
        nonzero |= v != 0.0f;
      }
      if (!__syncthreads_or(nonzero)) continue;
      any = true;
      for (int i = 0; i < 8; ++i) {  // b[r][j] = w[r_begin+r0+r, jt+j]
        const int j = t % 64, r = t / 64 + 4 * i;
        s.b[r][j] = (jt + j < fan_in && r0 + r < glen)
                        ? __ldg(w + (r_begin + r0 + r) * fan_in + jt + j)
                        : 0.0f;
      }
      gs_simt_product(s, acc, tx, ty);
    }
    if (!any) return;  // block-uniform: the whole gradient tile is zero
    for (int i = 0; i < 4; ++i) {
      const int64_t b = b0 + ty * 4 + i;
      if (b >= batch) continue;
      for (int j = 0; j < 4; ++j) {
        const int jj = jt + tx * 4 + j;
        if (jj < fan_in && acc[i][j] != 0.0f) atomicAdd(du + b * ldd + ik[jj], acc[i][j]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// bf16 tensor cores. Shared layouts (bf16 unless said):
//   xs [f_pad][64 + 8]          gathered X_k, element (b, j) at xs[j][b]
//   ws [g_pad][f_pad + 8]       W_k rows of the label tile
//   gs [64][g_pad + 8]          ∇Z tile, element (b, r) at gs[b][r]
//   stage [warps][16×16] fp32   one accumulator fragment on its way to global memory
using namespace nvcuda;
using GsBf = __nv_bfloat16;

struct GsBf16Layout {
  int f_pad = 0, g_pad = 0;
  int ldx = 0, ldw = 0, ldg = 0;
  size_t xs = 0, ws = 0, gs = 0, zs = 0, stage = 0, total = 0;  // byte offsets / size
};

__host__ __device__ inline int gs_round16(int64_t v) {
  return static_cast<int>((v + 15) / 16 * 16);
}

__host__ __device__ inline size_t gs_take(size_t& off, size_t bytes) {
  const size_t at = off;
  off += (bytes + 127) / 128 * 128;  // every region 128-byte aligned
  return at;
}

__host__ __device__ inline GsBf16Layout gs_layout(int64_t group, int fan_in, bool x, bool w,
                                                  bool gt, bool zs) {
  GsBf16Layout L;
  L.f_pad = gs_round16(fan_in);
  L.g_pad = gs_round16(group < kGsTile ? group : kGsTile);
  L.ldx = kGsTile + kGsPad16;
  L.ldw = L.f_pad + kGsPad16;
  L.ldg = L.g_pad + kGsPad16;
  size_t off = 0;
  L.xs = gs_take(off, x ? sizeof(GsBf) * L.f_pad * L.ldx : 0);
  L.ws = gs_take(off, w ? sizeof(GsBf) * L.g_pad * L.ldw : 0);
  L.gs = gs_take(off, gt ? sizeof(GsBf) * kGsTile * L.ldg : 0);
  L.zs = gs_take(off, zs ? sizeof(float) * kGsTile * (L.g_pad + kGsPad) : 0);
  L.stage = gs_take(off, zs ? 0 : sizeof(float) * kGsWarps * 256);  // the forward uses zs
  L.total = off;
  return L;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define XMC_GS_NO_BF16_MMA 1  // bf16 wmma needs sm_80; the host refuses older devices
#endif

// Staging into shared memory with cp.async (sm_80+): 16-byte copies that need no
// registers and overlap each other; the caller ends a staging step with gs_staged()
// before its barrier. A copy needs 16-byte aligned rows (vec_x: ldu a multiple of 8 and ut
// aligned; vec_w: F a multiple of 8 and w aligned); otherwise, and at the batch's ragged
// end, elements are copied one by one. Zero padding is written directly.
constexpr int kGsVec = 8;  // bf16 per 16-byte copy
__device__ __forceinline__ void gs_staged() {
  __pipeline_commit();
  __pipeline_wait_prior(0);
}

// xs[j][b] = ut[ik[j], b0+b], zero outside F and the batch.
__device__ __forceinline__ void gs_stage_x(GsBf* xs, int ldx, int f_pad, const uint32_t* ik,
                                           int fan_in, const GsBf* ut, int64_t ldu, int64_t b0,
                                           int64_t batch, bool vec_x) {
  const GsBf zero = __float2bfloat16_rn(0.0f);
  constexpr int kPerRow = kGsTile / kGsVec;
  for (int e = threadIdx.x; e < f_pad * kPerRow; e += kGsThreads) {
    const int j = e / kPerRow, c = (e % kPerRow) * kGsVec;
    GsBf* dst = xs + j * ldx + c;
    if (j >= fan_in) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      continue;
    }
    const GsBf* src = ut + static_cast<int64_t>(ik[j]) * ldu + b0 + c;
    if (vec_x && b0 + c + kGsVec <= batch) {
      __pipeline_memcpy_async(dst, src, 16);
    } else {
      for (int q = 0; q < kGsVec; ++q) dst[q] = b0 + c + q < batch ? src[q] : zero;
    }
  }
}

// ws[r][j] = w[r_begin + r, j] for r < len, zero elsewhere.
__device__ __forceinline__ void gs_stage_w(GsBf* ws, int ldw, int g_pad, int f_pad, const GsBf* w,
                                           int64_t r_begin, int64_t len, int fan_in, bool vec_w) {
  const GsBf zero = __float2bfloat16_rn(0.0f);
  const int per_row = f_pad / kGsVec;  // f_pad is a multiple of 16
  for (int e = threadIdx.x; e < g_pad * per_row; e += kGsThreads) {
    const int r = e / per_row, c = (e - r * per_row) * kGsVec;
    GsBf* dst = ws + r * ldw + c;
    const GsBf* src = w + (r_begin + r) * fan_in + c;
    if (vec_w && r < len && c < fan_in) {
      __pipeline_memcpy_async(dst, src, 16);
    } else {
      for (int q = 0; q < kGsVec; ++q) dst[q] = r < len && c + q < fan_in ? src[q] : zero;
    }
  }
}

// gs[b][r] = bf16(g[b0+b, r_begin+r]) for r < len, zero elsewhere; returns (block-wide,
// a barrier) whether any entry is nonzero.
__device__ __forceinline__ bool gs_stage_g(GsBf* gs, int ldg_s, int g_pad, const float* g,
                                           int64_t ldg, int64_t b0, int64_t batch, int64_t r_begin,
                                           int64_t len) {
  bool nonzero = false;
  for (int e = threadIdx.x; e < kGsTile * g_pad; e += kGsThreads) {
    const int b = e / g_pad, r = e % g_pad;
    const float v = (b0 + b < batch && r < len) ? __ldg(g + (b0 + b) * ldg + r_begin + r) : 0.0f;
    gs[b * ldg_s + r] = __float2bfloat16_rn(v);
    nonzero |= v != 0.0f;
  }
  return __syncthreads_or(nonzero) != 0;
}

// grid (groups, batch tiles).
__global__ void __launch_bounds__(kGsThreads)
    gs_forward_bf16_kernel(const uint32_t* __restrict__ idx, const GsBf* __restrict__ w,
                           const float* __restrict__ bias, int64_t n, int64_t group, int fan_in,
                           const GsBf* __restrict__ ut, int64_t ldu, int64_t batch,
                           float* __restrict__ z, int64_t ldz, bool vec_x, bool vec_w) {
#ifndef XMC_GS_NO_BF16_MMA
  extern __shared__ __align__(128) unsigned char gs_smem_f[];
  const GsBf16Layout L = gs_layout(group, fan_in, true, true, false, true);
  GsBf* xs = reinterpret_cast<GsBf*>(gs_smem_f + L.xs);
  GsBf* ws = reinterpret_cast<GsBf*>(gs_smem_f + L.ws);
  float* zs = reinterpret_cast<float*>(gs_smem_f + L.zs);
  const int ldz_s = L.g_pad + kGsPad;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const auto [r_begin, glen, ik] = gs_group(idx, n, group, fan_in);
  const int64_t b0 = static_cast<int64_t>(blockIdx.y) * kGsTile;
  const int64_t rows = min(static_cast<int64_t>(kGsTile), batch - b0);
  gs_stage_x(xs, L.ldx, L.f_pad, ik, fan_in, ut, ldu, b0, batch, vec_x);  // once
  const int rb_count = kGsTile / 16, cb_count = L.g_pad / 16;
  for (int64_t rt = 0; rt < glen; rt += kGsTile) {
    const int64_t len = min(static_cast<int64_t>(kGsTile), glen - rt);
    gs_stage_w(ws, L.ldw, L.g_pad, L.f_pad, w, r_begin + rt, len, fan_in, vec_w);
    gs_staged();
    __syncthreads();
    // At most 4×4 fragments: two per warp.
    for (int f = warp; f < rb_count * cb_count; f += kGsWarps) {
      const int rb = f % rb_count, cb = f / rb_count;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int kk = 0; kk < L.f_pad; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, GsBf, wmma::col_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, GsBf, wmma::col_major> b;
        wmma::load_matrix_sync(a, xs + kk * L.ldx + rb * 16, L.ldx);
        wmma::load_matrix_sync(b, ws + cb * 16 * L.ldw + kk, L.ldw);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(zs + rb * 16 * ldz_s + cb * 16, acc, ldz_s, wmma::mem_row_major);
    }
    __syncthreads();
    // A warp per batch row, its lanes over the tile's (at most 64) labels: coalesced.
    const int64_t l0 = r_begin + rt;
    const float bias0 = bias != nullptr && lane < len ? bias[l0 + lane] : 0.0f;
    const float bias1 = bias != nullptr && lane + 32 < len ? bias[l0 + lane + 32] : 0.0f;
    for (int b = warp; b < rows; b += kGsWarps) {
      float* zrow = z + (b0 + b) * ldz + l0;
      if (lane < len) zrow[lane] = zs[b * ldz_s + lane] + bias0;
      if (lane + 32 < len) zrow[lane + 32] = zs[b * ldz_s + lane + 32] + bias1;
    }
    __syncthreads();
  }
#endif
}

// grid (groups). K = batch, in tiles of 64; accumulators stay in registers across tiles.
__global__ void __launch_bounds__(kGsThreads)
    gs_weight_grad_bf16_kernel(const uint32_t* __restrict__ idx, int64_t n, int64_t group,
                               int fan_in, const float* __restrict__ g, int64_t ldg,
                               const GsBf* __restrict__ ut, int64_t ldu, int64_t batch,
                               float* __restrict__ dw, float* __restrict__ db, bool vec_x) {
#ifndef XMC_GS_NO_BF16_MMA
  extern __shared__ __align__(128) unsigned char gs_smem_w[];
  const GsBf16Layout L = gs_layout(group, fan_in, true, false, true, false);
  GsBf* xs = reinterpret_cast<GsBf*>(gs_smem_w + L.xs);
  GsBf* gsm = reinterpret_cast<GsBf*>(gs_smem_w + L.gs);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* stage = reinterpret_cast<float*>(gs_smem_w + L.stage) + warp * 256;
  const auto [r_begin, glen, ik] = gs_group(idx, n, group, fan_in);
  const int rb_count = L.g_pad / 16, cb_count = L.f_pad / 16;
  const int frags = rb_count * cb_count;  // <= 64: up to 8 per warp
  for (int64_t rt = 0; rt < glen; rt += kGsTile) {
    const int64_t len = min(static_cast<int64_t>(kGsTile), glen - rt);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kGsMaxFrags];
#pragma unroll
    for (int i = 0; i < kGsMaxFrags; ++i) wmma::fill_fragment(acc[i], 0.0f);
    for (int64_t b0 = 0; b0 < batch; b0 += kGsTile) {
      if (!gs_stage_g(gsm, L.ldg, L.g_pad, g, ldg, b0, batch, r_begin + rt, len))
        continue;  // zero gradient tile: nothing to gather
      gs_stage_x(xs, L.ldx, L.f_pad, ik, fan_in, ut, ldu, b0, batch, vec_x);
      gs_staged();
      __syncthreads();
#pragma unroll
      for (int i = 0; i < kGsMaxFrags; ++i) {
        const int f = warp + kGsWarps * i;
        if (f >= frags) break;
        const int rb = f % rb_count, cb = f / rb_count;
        for (int kk = 0; kk < kGsTile; kk += 16) {
          // A = ∇Zᵀ [G×Bt]: (r, b) at gs[b][r];  B = X [Bt×F]: (b, j) at xs[j][b].
          wmma::fragment<wmma::matrix_a, 16, 16, 16, GsBf, wmma::col_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, GsBf, wmma::col_major> b;
          wmma::load_matrix_sync(a, gsm + kk * L.ldg + rb * 16, L.ldg);
          wmma::load_matrix_sync(b, xs + cb * 16 * L.ldx + kk, L.ldx);
          wmma::mma_sync(acc[i], a, b, acc[i]);
        }
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < kGsMaxFrags; ++i) {
      const int f = warp + kGsWarps * i;
      if (f >= frags) break;
      const int rb = f % rb_count, cb = f / rb_count;
      wmma::store_matrix_sync(stage, acc[i], 16, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int r = rb * 16 + e / 16, j = cb * 16 + e % 16;
        if (r < len && j < fan_in) dw[(r_begin + rt + r) * fan_in + j] = stage[e];
      }
      __syncwarp();
    }
  }
  // db from the fp32 gradient (the group's columns were just read: L2 hits).
  if (db != nullptr) gs_bias_grad(g, ldg, batch, r_begin, glen, db);
#endif
}

// grid (groups, batch tiles). K = labels of the group, in tiles of 64.
__global__ void __launch_bounds__(kGsThreads)
    gs_input_grad_bf16_kernel(const uint32_t* __restrict__ idx, const GsBf* __restrict__ w,
                              int64_t n, int64_t group, int fan_in, const float* __restrict__ g,
                              int64_t ldg, int64_t batch, float* __restrict__ du, int64_t ldd,
                              bool vec_w) {
#ifndef XMC_GS_NO_BF16_MMA
  extern __shared__ __align__(128) unsigned char gs_smem_i[];
  const GsBf16Layout L = gs_layout(group, fan_in, false, true, true, false);
  GsBf* ws = reinterpret_cast<GsBf*>(gs_smem_i + L.ws);
  GsBf* gsm = reinterpret_cast<GsBf*>(gs_smem_i + L.gs);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* stage = reinterpret_cast<float*>(gs_smem_i + L.stage) + warp * 256;
  const auto [r_begin, glen, ik] = gs_group(idx, n, group, fan_in);
  const int64_t b0 = static_cast<int64_t>(blockIdx.y) * kGsTile;
  const int rb_count = kGsTile / 16, cb_count = L.f_pad / 16;
  const int frags = rb_count * cb_count;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kGsMaxFrags];
#pragma unroll
  for (int i = 0; i < kGsMaxFrags; ++i) wmma::fill_fragment(acc[i], 0.0f);
  bool any = false;
  for (int64_t rt = 0; rt < glen; rt += kGsTile) {
    const int64_t len = min(static_cast<int64_t>(kGsTile), glen - rt);
    if (!gs_stage_g(gsm, L.ldg, L.g_pad, g, ldg, b0, batch, r_begin + rt, len)) continue;
    any = true;
    gs_stage_w(ws, L.ldw, L.g_pad, L.f_pad, w, r_begin + rt, len, fan_in, vec_w);
    gs_staged();
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kGsMaxFrags; ++i) {
      const int f = warp + kGsWarps * i;
      if (f >= frags) break;
      const int rb = f % rb_count, cb = f / rb_count;
      for (int kk = 0; kk < L.g_pad; kk += 16) {
        // A = ∇Z [Bt×G]: (b, r) at gs[b][r];  B = W_k [G×F]: (r, j) at ws[r][j].
        wmma::fragment<wmma::matrix_a, 16, 16, 16, GsBf, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, GsBf, wmma::row_major> b;
        wmma::load_matrix_sync(a, gsm + rb * 16 * L.ldg + kk, L.ldg);
        wmma::load_matrix_sync(b, ws + kk * L.ldw + cb * 16, L.ldw);
        wmma::mma_sync(acc[i], a, b, acc[i]);
      }
    }
    __syncthreads();
  }
  if (!any) return;  // block-uniform
#pragma unroll
  for (int i = 0; i < kGsMaxFrags; ++i) {
    const int f = warp + kGsWarps * i;
    if (f >= frags) break;
    const int rb = f % rb_count, cb = f / rb_count;
    wmma::store_matrix_sync(stage, acc[i], 16, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
      const int64_t b = b0 + rb * 16 + e / 16;
      const int j = cb * 16 + e % 16;
      const float v = stage[e];
      if (b < batch && j < fan_in && v != 0.0f) atomicAdd(du + b * ldd + ik[j], v);
    }
    __syncwarp();
  }
#endif
}

// ---------------------------------------------------------------------------------------
// Host side.

int64_t gs_groups(int64_t n, int64_t group) { return (n + group - 1) / group; }

// The device's limits (the shapes are checked in ops/group_shared.cpp): the groups on
// grid.x, bf16's F in shared memory.
void gs_check(int64_t n, int64_t group, int64_t fan_in, bool bf16) {
  if (bf16) XMC_CUDA_REQUIRE(fan_in <= kGsMaxFanIn, fan_in);
  XMC_CUDA_REQUIRE(gs_groups(n, group) <= 2147483647, gs_groups(n, group));
}

// Batch tiles on grid.y (not strided: the block keeps its tile in shared memory); they fit
// for any batch a config allows.
static_assert(launch::batch_tiles_fit(kGsTile));
unsigned gs_batch_tiles(int64_t batch) {
  const int64_t t = (batch + kGsTile - 1) / kGsTile;
  XMC_CUDA_REQUIRE(t <= launch::kMaxGridYZ, batch);
  return static_cast<unsigned>(t);
}

// Opts the kernel in to `bytes` of dynamic shared memory when that is above 48 KiB.
template <class Kernel>
void gs_smem_opt_in(const CudaContext& ctx, Kernel kernel, size_t bytes) {
  XMC_CUDA_REQUIRE(ctx.info().cc_major >= 8, ctx.info().cc_major);  // bf16 wmma: sm_80+
  if (bytes <= 48 * 1024) return;
  int limit = 0;
  XMC_CUDA_CHECK(
      cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx.device_index()));
  XMC_CUDA_REQUIRE(bytes <= static_cast<size_t>(limit), static_cast<int64_t>(bytes));
  XMC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(bytes)));
}

const GsBf* gs_bf(const Bf16* p) { return reinterpret_cast<const GsBf*>(p); }

// Can rows of `ld` bf16 starting at p be staged with 16-byte copies?
bool gs_vec_rows(const Bf16* p, int64_t ld) {
  return ld % kGsVec == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

void group_shared_forward(const CudaContext& ctx, const uint32_t* idx, const float* w,
                          const float* bias, int64_t n, int64_t group, int64_t fan_in,
                          ConstMatrix ut, Matrix z) {
  gs_check(n, group, fan_in, false);
  if (n == 0 || z.rows == 0) return;
  const dim3 grid(static_cast<unsigned>(gs_groups(n, group)), gs_batch_tiles(z.rows));
  XMC_CUDA_LAUNCH(gs_forward_f32_kernel, grid, kGsThreads, 0, ctx.stream(), idx, w, bias, n, group,
                  static_cast<int>(fan_in), ut.data, ut.ld, ut.cols, z.data, z.ld);
}

void group_shared_forward(const CudaContext& ctx, const uint32_t* idx, const Bf16* w,
                          const float* bias, int64_t n, int64_t group, int64_t fan_in,
                          ConstBf16Matrix ut, Matrix z) {
  gs_check(n, group, fan_in, true);
  if (n == 0 || z.rows == 0) return;
  const size_t bytes = gs_layout(group, static_cast<int>(fan_in), true, true, false, true).total;
  gs_smem_opt_in(ctx, gs_forward_bf16_kernel, bytes);
  const dim3 grid(static_cast<unsigned>(gs_groups(n, group)), gs_batch_tiles(z.rows));
  XMC_CUDA_LAUNCH(gs_forward_bf16_kernel, grid, kGsThreads, bytes, ctx.stream(), idx, gs_bf(w),
                  bias, n, group, static_cast<int>(fan_in), gs_bf(ut.data), ut.ld, ut.cols, z.data,
                  z.ld, gs_vec_rows(ut.data, ut.ld), gs_vec_rows(w, fan_in));
}

void group_shared_weight_grad(const CudaContext& ctx, const uint32_t* idx, int64_t n, int64_t group,
                              int64_t fan_in, ConstMatrix g, ConstMatrix ut, float* dw, float* db) {
  gs_check(n, group, fan_in, false);
  if (n == 0) return;
  XMC_CUDA_LAUNCH(gs_weight_grad_f32_kernel, static_cast<unsigned>(gs_groups(n, group)), kGsThreads,
                  0, ctx.stream(), idx, n, group, static_cast<int>(fan_in), g.data, g.ld, ut.data,
                  ut.ld, g.rows, dw, db);
}

void group_shared_weight_grad(const CudaContext& ctx, const uint32_t* idx, int64_t n, int64_t group,
                              int64_t fan_in, ConstMatrix g, ConstBf16Matrix ut, float* dw,
                              float* db) {
  gs_check(n, group, fan_in, true);
  if (n == 0) return;
  const size_t bytes = gs_layout(group, static_cast<int>(fan_in), true, false, true, false).total;
  gs_smem_opt_in(ctx, gs_weight_grad_bf16_kernel, bytes);
  XMC_CUDA_LAUNCH(gs_weight_grad_bf16_kernel, static_cast<unsigned>(gs_groups(n, group)),
                  kGsThreads, bytes, ctx.stream(), idx, n, group, static_cast<int>(fan_in), g.data,
                  g.ld, gs_bf(ut.data), ut.ld, g.rows, dw, db, gs_vec_rows(ut.data, ut.ld));
}

void group_shared_input_grad(const CudaContext& ctx, const uint32_t* idx, const float* w, int64_t n,
                             int64_t group, int64_t fan_in, ConstMatrix g, Matrix du) {
  gs_check(n, group, fan_in, false);
  if (n == 0 || g.rows == 0) return;
  const dim3 grid(static_cast<unsigned>(gs_groups(n, group)), gs_batch_tiles(g.rows));
  XMC_CUDA_LAUNCH(gs_input_grad_f32_kernel, grid, kGsThreads, 0, ctx.stream(), idx, w, n, group,
                  static_cast<int>(fan_in), g.data, g.ld, g.rows, du.data, du.ld);
}

void group_shared_input_grad(const CudaContext& ctx, const uint32_t* idx, const Bf16* w, int64_t n,
                             int64_t group, int64_t fan_in, ConstMatrix g, Matrix du) {
  gs_check(n, group, fan_in, true);
  if (n == 0 || g.rows == 0) return;
  const size_t bytes = gs_layout(group, static_cast<int>(fan_in), false, true, true, false).total;
  gs_smem_opt_in(ctx, gs_input_grad_bf16_kernel, bytes);
  const dim3 grid(static_cast<unsigned>(gs_groups(n, group)), gs_batch_tiles(g.rows));
  XMC_CUDA_LAUNCH(gs_input_grad_bf16_kernel, grid, kGsThreads, bytes, ctx.stream(), idx, gs_bf(w),
                  n, group, static_cast<int>(fan_in), g.data, g.ld, g.rows, du.data, du.ld,
                  gs_vec_rows(w, fan_in));
}

}  // namespace xmc::gpu
