// The layer ops on the GPU (ops/encoder.h; shapes checked there): the sparse-input layer's
// CSR × dense forward and its weight gradient over the touched rows (grouped by column on
// the host, so no atomics and the CPU's summation order), bias + relu, relu's gradient,
// dropout masks.
#include <cstdint>

#include "core/launch_shape.h"
#include "ops/encoder.h"
#include "runtime.h"

namespace xmc::gpu {
namespace {

constexpr int kEncThreads = 256;

// Grid: x over rows (up to 2^31-1), y over column tiles of kEncThreads, capped at 65535
// (core/launch_shape.h): the kernels stride over the remaining tiles.
dim3 enc_grid(int64_t rows, int64_t cols) {
  XMC_CUDA_REQUIRE(rows >= 0 && rows <= launch::kMaxGridX, rows);
  return dim3(static_cast<unsigned>(rows), launch::grid_yz(launch::ceil_div(cols, kEncThreads)));
}

__global__ void enc_csr_forward_kernel(const int64_t* __restrict__ indptr,
                                       const uint32_t* __restrict__ indices,
                                       const float* __restrict__ values,
                                       const float* __restrict__ w, const float* __restrict__ bias,
                                       int64_t out, bool relu, float* __restrict__ h, int64_t ldh) {
  const int64_t r = blockIdx.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; j < out;
       j += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    float acc = bias ? bias[j] : h[r * ldh + j];  // no bias: accumulate into h
    for (int64_t k = indptr[r]; k < indptr[r + 1]; ++k)
      acc += values[k] * w[static_cast<int64_t>(indices[k]) * out + j];
    h[r * ldh + j] = relu ? fmaxf(acc, 0.0f) : acc;
  }
}

__global__ void enc_bias_act_kernel(float* __restrict__ h, int64_t cols, int64_t ld,
                                    const float* __restrict__ bias, bool relu) {
  const int64_t r = blockIdx.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; j < cols;
       j += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    const float v = h[r * ld + j] + bias[j];
    h[r * ld + j] = relu ? fmaxf(v, 0.0f) : v;
  }
}

// dz may be dh (in place: each thread reads its entry before writing it).
__global__ void enc_act_grad_kernel(bool relu, const float* __restrict__ h, int64_t ldh,
                                    const float* dh, int64_t lddh, float* dz, int64_t lddz,
                                    int64_t cols) {
  const int64_t r = blockIdx.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; j < cols;
       j += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    const float g = dh[r * lddh + j];
    dz[r * lddz + j] = (!relu || h[r * ldh + j] > 0.0f) ? g : 0.0f;
  }
}

// src and dst may alias (no __restrict__).
__global__ void enc_mask_kernel(const float* src, int64_t lds, const float* __restrict__ mask,
                                float* dst, int64_t ldd, int64_t cols) {
  const int64_t r = blockIdx.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; j < cols;
       j += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    const float v = src[r * lds + j];
    dst[r * ldd + j] = mask ? v * mask[r * cols + j] : v;
  }
}

__global__ void enc_column_grad_kernel(const int64_t* __restrict__ start,
                                       const uint32_t* __restrict__ rows,
                                       const float* __restrict__ values,
                                       const float* __restrict__ dz, int64_t lddz,
                                       float* __restrict__ g, int64_t ldg, int64_t out) {
  const int64_t u = blockIdx.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; j < out;
       j += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    float acc = 0.0f;
    for (int64_t e = start[u]; e < start[u + 1]; ++e)
      acc += values[e] * dz[static_cast<int64_t>(rows[e]) * lddz + j];
    g[u * ldg + j] = acc;
  }
}

}  // namespace

void csr_dense_forward(const CudaContext& ctx, const DeviceCsrValues& x, const float* w,
                       const float* bias, bool relu, Matrix h) {
  if (h.empty()) return;
  XMC_CUDA_LAUNCH(enc_csr_forward_kernel, enc_grid(h.rows, h.cols), kEncThreads, 0, ctx.stream(),
                  x.indptr, x.indices, x.values, w, bias, h.cols, relu, h.data, h.ld);
}

void bias_activation(const CudaContext& ctx, Matrix h, const float* bias, bool relu) {
  if (h.empty()) return;
  XMC_CUDA_LAUNCH(enc_bias_act_kernel, enc_grid(h.rows, h.cols), kEncThreads, 0, ctx.stream(),
                  h.data, h.cols, h.ld, bias, relu);
}

void activation_grad(const CudaContext& ctx, bool relu, ConstMatrix h, ConstMatrix dh, Matrix dz) {
  if (dz.empty()) return;
  XMC_CUDA_LAUNCH(enc_act_grad_kernel, enc_grid(dz.rows, dz.cols), kEncThreads, 0, ctx.stream(),
                  relu, h.data, h.ld, dh.data, dh.ld, dz.data, dz.ld, dz.cols);
}

void multiply_mask(const CudaContext& ctx, ConstMatrix src, const float* mask, Matrix dst) {
  if (dst.empty()) return;
  XMC_CUDA_LAUNCH(enc_mask_kernel, enc_grid(dst.rows, dst.cols), kEncThreads, 0, ctx.stream(),
                  src.data, src.ld, mask, dst.data, dst.ld, dst.cols);
}

void csr_column_grad(const CudaContext& ctx, const DeviceCsrByColumn& xt, ConstMatrix dz,
                     Matrix g) {
  if (g.empty()) return;
  XMC_CUDA_LAUNCH(enc_column_grad_kernel, enc_grid(g.rows, g.cols), kEncThreads, 0, ctx.stream(),
                  xt.start, xt.rows, xt.values, dz.data, dz.ld, g.data, g.ld, g.cols);
}

}  // namespace xmc::gpu
