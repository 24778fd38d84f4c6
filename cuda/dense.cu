// The dense op family on the GPU (ops/dense.h; shapes checked there): row-major GEMMs on
// cuBLAS, and the column sums, row-vector add and bf16 rounding around them.
//
// cuBLAS is column-major. A row-major M [r×c] with leading dimension ld is the column-major
// Mᵀ [c×r] with the same ld, so each row-major product is issued as its transpose:
// C = op(A)·op(B) becomes Cᵀ = op(B)ᵀ·op(A)ᵀ with the operands swapped.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <type_traits>

#include "core/launch_shape.h"
#include "ops/dense.h"
#include "runtime.h"

namespace xmc::gpu {
namespace {

constexpr int kThreads = 256;

int to_int(int64_t v) {
  XMC_CUDA_REQUIRE(v >= 0 && v < (int64_t{1} << 31), v);  // cuBLAS takes int dimensions
  return static_cast<int>(v);
}

// Column-major call C_cm [n×m] = op(X) [n×k] · op(Y) [k×m] with X, Y, C raw pointers.
// fp32 operands go through cublasSgemm; bf16 through cublasGemmEx with fp32 compute.
template <class T>
void gemm_cm(const CudaContext& ctx, cublasOperation_t op_x, cublasOperation_t op_y, int64_t n,
             int64_t m, int64_t k, float alpha, const T* x, int64_t ldx, const T* y, int64_t ldy,
             float beta, float* c, int64_t ldc) {
  if (n == 0 || m == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    XMC_CUBLAS_CHECK(cublasSgemm(ctx.cublas(), op_x, op_y, to_int(n), to_int(m), to_int(k), &alpha,
                                 x, to_int(ldx), y, to_int(ldy), &beta, c, to_int(ldc)));
  } else {
    XMC_CUBLAS_CHECK(cublasGemmEx(ctx.cublas(), op_x, op_y, to_int(n), to_int(m), to_int(k), &alpha,
                                  x, CUDA_R_16BF, to_int(ldx), y, CUDA_R_16BF, to_int(ldy), &beta,
                                  c, CUDA_R_32F, to_int(ldc), CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
  }
}

// Row-major C [m×n] = op(A) · op(B) (op = transpose where ta / tb), issued as the
// column-major Cᵀ = op(B)ᵀ · op(A)ᵀ: an operand transposed in the row-major product is
// op T on its column-major view (which is already the transpose).
template <class T>
void gemm(const CudaContext& ctx, bool ta, bool tb, MatrixView<const T> a, MatrixView<const T> b,
          Matrix c, float alpha, float beta) {
  gemm_cm(ctx, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, c.cols, c.rows,
          ta ? a.rows : a.cols, alpha, b.data, b.ld, a.data, a.ld, beta, c.data, c.ld);
}

// Block (32 columns × 8 row groups): each thread sums every 8th row of its column, the
// 8 partials are added in a fixed order, so the result does not depend on the launch.
// 2-D so that a B×16k chunk still fills the GPU (one thread per column would not).
constexpr int kSumCols = 32;
constexpr int kSumRowGroups = 8;
__global__ void column_sums_kernel(const float* __restrict__ a, int64_t rows, int64_t cols,
                                   int64_t ld, float* __restrict__ out) {
  __shared__ float part[kSumRowGroups][kSumCols + 1];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kSumCols + threadIdx.x;
  float s = 0.0f;
  if (j < cols)
    for (int64_t i = threadIdx.y; i < rows; i += kSumRowGroups) s += a[i * ld + j];
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    float total = 0.0f;
    for (int g = 0; g < kSumRowGroups; ++g) total += part[g][threadIdx.x];
    out[j] = total;
  }
}

// grid (column blocks, launch::grid_yz(rows)), both strided.
__global__ void add_row_vector_kernel(float* __restrict__ m, int64_t rows, int64_t cols, int64_t ld,
                                      const float* __restrict__ bias) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    float* row = m + r * ld;
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x)
      row[j] += bias[j];
  }
}

__global__ void to_bf16_kernel(const float* __restrict__ src, int64_t rows, int64_t cols,
                               int64_t lds, __nv_bfloat16* __restrict__ dst, int64_t ldd) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x)
      dst[r * ldd + j] = __float2bfloat16_rn(src[r * lds + j]);
}

// fp8 codes times their row's scale, into bf16 (exact: ops::widen_fp8).
__global__ void widen_fp8_kernel(const uint8_t* __restrict__ src, int64_t rows, int64_t cols,
                                 int64_t lds, const float* __restrict__ row_scale,
                                 __nv_bfloat16* __restrict__ dst, int64_t ldd) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float scale = row_scale[r];
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x)
      dst[r * ldd + j] = __float2bfloat16_rn(fp8_value(src[r * lds + j]) * scale);
  }
}

// Column blocks of a grid-stride loop over cols (capped: the loop covers the rest).
unsigned col_blocks(int64_t cols, int64_t per_block) {
  return launch::grid_yz(launch::ceil_div(cols, per_block));
}

}  // namespace

// Each row-major product of ops/dense.h, in fp32 and in bf16.
#define XMC_GEMM_ENTRY(name, ta, tb)                                                            \
  void gemm_##name(const CudaContext& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha, \
                   float beta) {                                                                \
    gemm<float>(ctx, ta, tb, a, b, c, alpha, beta);                                             \
  }                                                                                             \
  void gemm_##name(const CudaContext& ctx, ConstBf16Matrix a, ConstBf16Matrix b, Matrix c,      \
                   float alpha, float beta) {                                                   \
    gemm<Bf16>(ctx, ta, tb, a, b, c, alpha, beta);                                              \
  }
XMC_GEMM_ENTRY(nt, false, true)
XMC_GEMM_ENTRY(nn, false, false)
XMC_GEMM_ENTRY(tn, true, false)
#undef XMC_GEMM_ENTRY

void column_sums(const CudaContext& ctx, ConstMatrix a, float* out) {
  if (a.cols == 0) return;
  const dim3 block(kSumCols, kSumRowGroups);
  XMC_CUDA_LAUNCH(column_sums_kernel, launch::grid_x(launch::ceil_div(a.cols, kSumCols)), block, 0,
                  ctx.stream(), a.data, a.rows, a.cols, a.ld, out);
}

void add_row_vector(const CudaContext& ctx, Matrix m, const float* bias) {
  if (m.empty()) return;
  const dim3 grid(col_blocks(m.cols, kThreads), launch::grid_yz(m.rows));
  XMC_CUDA_LAUNCH(add_row_vector_kernel, grid, kThreads, 0, ctx.stream(), m.data, m.rows, m.cols,
                  m.ld, bias);
}

void to_bf16(const CudaContext& ctx, ConstMatrix src, Bf16Matrix dst) {
  if (src.empty()) return;
  const dim3 grid(col_blocks(src.cols, kThreads), launch::grid_yz(src.rows));
  XMC_CUDA_LAUNCH(to_bf16_kernel, grid, kThreads, 0, ctx.stream(), src.data, src.rows, src.cols,
                  src.ld, reinterpret_cast<__nv_bfloat16*>(dst.data), dst.ld);
}

void widen_fp8(const CudaContext& ctx, ConstFp8Matrix src, const float* row_scale, Bf16Matrix dst) {
  if (src.empty()) return;
  const dim3 grid(col_blocks(src.cols, kThreads), launch::grid_yz(src.rows));
  XMC_CUDA_LAUNCH(widen_fp8_kernel, grid, kThreads, 0, ctx.stream(),
                  reinterpret_cast<const uint8_t*>(src.data), src.rows, src.cols, src.ld, row_scale,
                  reinterpret_cast<__nv_bfloat16*>(dst.data), dst.ld);
}

}  // namespace xmc::gpu
