// Row-wise exact top-k: one block per row, up to k rounds of a block-wide argmax over the
// elements that come after the previous pick in ranks_before order (ops/topk.h:
// score desc, label asc, NaN as -inf — the CPU's order). A round that finds nothing left
// (a chunk of fewer than k columns) ends the row: the remaining slots are pads
// (-inf, UINT32_MAX), never a repeat. Work O(k·cols) per row — meant for the small k of
// evaluation. Over several chunks: each chunk's top-k is merged into a running top-k per
// row (merge path: every element's merged position computed independently, one block per
// row), so scores never exist for all labels and k has no upper bound.
#include <cmath>
#include <cstdint>

#include "core/launch_shape.h"
#include "ops/topk.h"
#include "runtime.h"

namespace xmc::gpu {
namespace {

constexpr int kThreads = 256;
constexpr uint32_t kPadLabel = UINT32_MAX;

// grid.x = rows (row r handled by blocks r, r + gridDim.x, ...).
__global__ void topk_kernel(const float* __restrict__ scores, int64_t rows, int64_t cols,
                            int64_t ld, int k, int64_t label_offset, float* __restrict__ out_scores,
                            uint32_t* __restrict__ out_labels) {
  __shared__ float s_score[kThreads];
  __shared__ int64_t s_col[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* r = scores + row * ld;
    float prev_s = 0.0f;
    int64_t prev_c = -1;  // -1: no pick yet
    int j = 0;
    for (; j < k; ++j) {
      float best_s = 0.0f;
      int64_t best_c = -1;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float s = r[c];
        const uint32_t lc = static_cast<uint32_t>(c);
        const bool after_prev =
            prev_c < 0 || ranks_before(prev_s, static_cast<uint32_t>(prev_c), s, lc);
        if (after_prev &&
            (best_c < 0 || ranks_before(s, lc, best_s, static_cast<uint32_t>(best_c)))) {
          best_s = s;
          best_c = c;
        }
      }
      s_score[threadIdx.x] = best_s;
      s_col[threadIdx.x] = best_c;
      __syncthreads();
      for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
          const float os = s_score[threadIdx.x + stride];
          const int64_t oc = s_col[threadIdx.x + stride];
          const int64_t mc = s_col[threadIdx.x];
          if (oc >= 0 &&
              (mc < 0 || ranks_before(os, static_cast<uint32_t>(oc), s_score[threadIdx.x],
                                      static_cast<uint32_t>(mc)))) {
            s_score[threadIdx.x] = os;
            s_col[threadIdx.x] = oc;
          }
        }
        __syncthreads();
      }
      const int64_t pick = s_col[0];
      const float pick_s = s_score[0];
      __syncthreads();      // every thread has read the result before the next round writes
      if (pick < 0) break;  // nothing left in this chunk: the same for every thread
      prev_s = pick_s;
      prev_c = pick;
      if (threadIdx.x == 0) {
        out_scores[row * k + j] = pick_s;
        out_labels[row * k + j] = static_cast<uint32_t>(pick + label_offset);
      }
    }
    for (int p = j + static_cast<int>(threadIdx.x); p < k; p += blockDim.x) {
      out_scores[row * k + p] = -INFINITY;
      out_labels[row * k + p] = kPadLabel;
    }
  }
}

// Merges the sorted lists run [k] and chunk [k] of each row into run (the best k of the
// union), one block per row: both lists are staged in shared memory, each thread places
// its elements at their merged positions (ops/topk.h). Labels of different chunks
// differ, so no label appears twice; pads rank after every real candidate.
__global__ void merge_kernel(const float* __restrict__ c_s, const uint32_t* __restrict__ c_l,
                             float* __restrict__ r_s, uint32_t* __restrict__ r_l, int64_t rows,
                             int k) {
  extern __shared__ unsigned char merge_smem[];
  float* as = reinterpret_cast<float*>(merge_smem);
  float* bs = as + k;
  uint32_t* al = reinterpret_cast<uint32_t*>(bs + k);
  uint32_t* bl = al + k;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
      as[i] = r_s[row * k + i];
      al[i] = r_l[row * k + i];
      bs[i] = c_s[row * k + i];
      bl[i] = c_l[row * k + i];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
      const int pa = merged_position_a(i, as, al, bs, bl, k);
      if (pa < k) {
        r_s[row * k + pa] = as[i];
        r_l[row * k + pa] = al[i];
      }
      const int pb = merged_position_b(i, as, al, bs, bl, k);
      if (pb < k) {
        r_s[row * k + pb] = bs[i];
        r_l[row * k + pb] = bl[i];
      }
    }
    __syncthreads();  // shared lists are reused by the next row
  }
}

__global__ void reset_kernel(float* __restrict__ s, uint32_t* __restrict__ l, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    s[i] = -INFINITY;
    l[i] = kPadLabel;
  }
}

size_t merge_smem_bytes(int k) {
  return static_cast<size_t>(k) * 2 * (sizeof(float) + sizeof(uint32_t));
}

void launch_merge(const float* tmp_scores, const uint32_t* tmp_labels, float* run_scores,
                  uint32_t* run_labels, int64_t rows, int k, CUstream_st* stream) {
  const size_t bytes = merge_smem_bytes(k);
  if (bytes > 48 * 1024) {
    XMC_CUDA_CHECK(cudaFuncSetAttribute(merge_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)));
  }
  XMC_CUDA_LAUNCH(merge_kernel, launch::grid_x(rows), launch::block_threads(k), bytes, stream,
                  tmp_scores, tmp_labels, run_scores, run_labels, rows, k);
}

}  // namespace

void topk_reset(float* run_scores, uint32_t* run_labels, int64_t rows, int k, CUstream_st* stream) {
  const int64_t n = rows * k;
  if (n == 0) return;
  XMC_CUDA_LAUNCH(reset_kernel, launch::grid_x(launch::ceil_div(n, kThreads)), kThreads, 0, stream,
                  run_scores, run_labels, n);
}

void topk_merge_chunk(const float* scores, int64_t rows, int64_t cols, int64_t ld, int k,
                      int64_t label_offset, float* tmp_scores, uint32_t* tmp_labels,
                      float* run_scores, uint32_t* run_labels, CUstream_st* stream) {
  if (rows == 0 || cols == 0) return;
  XMC_CUDA_LAUNCH(topk_kernel, launch::grid_x(rows), kThreads, 0, stream, scores, rows, cols, ld, k,
                  label_offset, tmp_scores, tmp_labels);
  launch_merge(tmp_scores, tmp_labels, run_scores, run_labels, rows, k, stream);
}

}  // namespace xmc::gpu
