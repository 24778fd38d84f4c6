// Row-wise exact top-k: one block per row, k rounds of a block-wide argmax over the
// elements that come after the previous pick in (score desc, column asc) order.
// Work O(k·cols) per row — meant for k <= 64 and the label chunks of evaluation.
// Over several chunks: each chunk's top-k is merged into a running top-k per row
// (two sorted lists of k, one thread per row), so scores never exist for all labels.
#include <cfloat>
#include <cstdint>

#include "core/gpu.h"
#include "cuda_check.h"

namespace xmc::gpu {
namespace {

constexpr int kThreads = 256;

struct Pick {
  float score;
  int64_t col;
};

// a ranks before b.
__device__ __forceinline__ bool before(float sa, int64_t ca, float sb, int64_t cb) {
  return sa > sb || (sa == sb && ca < cb);
}

__global__ void topk_kernel(const float* __restrict__ scores, int64_t cols, int64_t ld, int k,
                            int64_t label_offset, float* __restrict__ out_scores,
                            uint32_t* __restrict__ out_labels) {
  __shared__ float s_score[kThreads];
  __shared__ int64_t s_col[kThreads];
  const int64_t row = blockIdx.x;
  const float* r = scores + row * ld;
  float prev_s = FLT_MAX;
  int64_t prev_c = -1;
  for (int j = 0; j < k; ++j) {
    float best_s = -FLT_MAX;
    int64_t best_c = -1;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      float s = r[c];
      bool after_prev = (prev_c < 0) || before(prev_s, prev_c, s, c);
      if (after_prev && (best_c < 0 || before(s, c, best_s, best_c))) {
        best_s = s;
        best_c = c;
      }
    }
    s_score[threadIdx.x] = best_s;
    s_col[threadIdx.x] = best_c;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
      if (threadIdx.x < stride) {
        float os = s_score[threadIdx.x + stride];
        int64_t oc = s_col[threadIdx.x + stride];
        float ms = s_score[threadIdx.x];
        int64_t mc = s_col[threadIdx.x];
        if (oc >= 0 && (mc < 0 || before(os, oc, ms, mc))) {
          s_score[threadIdx.x] = os;
          s_col[threadIdx.x] = oc;
        }
      }
      __syncthreads();
    }
    prev_s = s_score[0];
    prev_c = s_col[0];
    if (threadIdx.x == 0) {
      out_scores[row * k + j] = prev_c >= 0 ? prev_s : -FLT_MAX;
      out_labels[row * k + j] =
          prev_c >= 0 ? static_cast<uint32_t>(prev_c + label_offset) : UINT32_MAX;
    }
    __syncthreads();
  }
}

// Merges the sorted lists run [k] and chunk [k] of each row into run (best k of the
// union). Labels of different chunks differ, so no label appears twice. Pads carry
// UINT32_MAX and rank after every real candidate of equal score.
__global__ void merge_kernel(const float* __restrict__ c_s, const uint32_t* __restrict__ c_l,
                             float* __restrict__ r_s, uint32_t* __restrict__ r_l, int64_t rows,
                             int k) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  float out_s[64];
  uint32_t out_l[64];
  const float* as = r_s + row * k;
  const uint32_t* al = r_l + row * k;
  const float* bs = c_s + row * k;
  const uint32_t* bl = c_l + row * k;
  int ia = 0;
  int ib = 0;
  for (int j = 0; j < k; ++j) {
    const bool take_a = before(as[ia], al[ia], bs[ib], bl[ib]);
    if (take_a) {
      out_s[j] = as[ia];
      out_l[j] = al[ia];
      ++ia;
    } else {
      out_s[j] = bs[ib];
      out_l[j] = bl[ib];
      ++ib;
    }
  }
  for (int j = 0; j < k; ++j) {
    r_s[row * k + j] = out_s[j];
    r_l[row * k + j] = out_l[j];
  }
}

__global__ void reset_kernel(float* __restrict__ s, uint32_t* __restrict__ l, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    s[i] = -FLT_MAX;
    l[i] = UINT32_MAX;
  }
}

}  // namespace

void topk_reset(float* run_scores, uint32_t* run_labels, int64_t rows, int k, CUstream_st* stream) {
  const int64_t n = rows * k;
  if (n == 0) return;
  reset_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      run_scores, run_labels, n);
  XMC_CUDA_CHECK_LAUNCH();
}

void topk_merge_chunk(const float* scores, int64_t rows, int64_t cols, int64_t ld, int k,
                      int64_t label_offset, float* tmp_scores, uint32_t* tmp_labels,
                      float* run_scores, uint32_t* run_labels, CUstream_st* stream) {
  XMC_CUDA_REQUIRE(k >= 1 && k <= 64, k);
  XMC_CUDA_REQUIRE(ld >= cols, ld);
  if (rows == 0 || cols == 0) return;
  topk_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      scores, cols, ld, k, label_offset, tmp_scores, tmp_labels);
  XMC_CUDA_CHECK_LAUNCH();
  merge_kernel<<<static_cast<unsigned>((rows + 127) / 128), 128, 0, stream>>>(
      tmp_scores, tmp_labels, run_scores, run_labels, rows, k);
  XMC_CUDA_CHECK_LAUNCH();
}

void topk_device(const float* scores, int64_t rows, int64_t cols, int k, int64_t label_offset,
                 float* out_scores, uint32_t* out_labels) {
  XMC_CUDA_REQUIRE(k >= 1 && k <= 64, k);
  if (rows == 0) return;
  topk_kernel<<<static_cast<unsigned>(rows), kThreads>>>(scores, cols, cols, k, label_offset,
                                                         out_scores, out_labels);
  XMC_CUDA_CHECK_LAUNCH();
  XMC_CUDA_CHECK(cudaDeviceSynchronize());
}

void topk_host(const float* scores, int64_t rows, int64_t cols, int k, int64_t label_offset,
               float* out_scores, uint32_t* out_labels) {
  float* d_scores = nullptr;
  float* d_out_s = nullptr;
  uint32_t* d_out_l = nullptr;
  const size_t n = static_cast<size_t>(rows * cols);
  const size_t nk = static_cast<size_t>(rows * k);
  XMC_CUDA_CHECK(cudaMalloc(&d_scores, n * sizeof(float)));
  try {
    XMC_CUDA_CHECK(cudaMalloc(&d_out_s, nk * sizeof(float)));
    XMC_CUDA_CHECK(cudaMalloc(&d_out_l, nk * sizeof(uint32_t)));
    XMC_CUDA_CHECK(cudaMemcpy(d_scores, scores, n * sizeof(float), cudaMemcpyHostToDevice));
    topk_device(d_scores, rows, cols, k, label_offset, d_out_s, d_out_l);
    XMC_CUDA_CHECK(cudaMemcpy(out_scores, d_out_s, nk * sizeof(float), cudaMemcpyDeviceToHost));
    XMC_CUDA_CHECK(cudaMemcpy(out_labels, d_out_l, nk * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  } catch (...) {
    cudaFree(d_scores);
    cudaFree(d_out_s);
    cudaFree(d_out_l);
    throw;
  }
  cudaFree(d_scores);
  cudaFree(d_out_s);
  cudaFree(d_out_l);
}

}  // namespace xmc::gpu
