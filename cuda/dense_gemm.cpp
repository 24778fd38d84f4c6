// Row-major GEMMs on cuBLAS (column-major). A row-major M [r×c] with leading dimension
// ld is the column-major Mᵀ [c×r] with the same ld, so each row-major product is issued
// as its transpose: C = op(A)·op(B) becomes Cᵀ = op(B)ᵀ·op(A)ᵀ with the operands swapped.
#include <cublas_v2.h>

#include <type_traits>

#include "core/error.h"
#include "runtime.h"
#include "ops/dense_ops_cuda.h"

namespace xmc::gpu {
namespace {

int to_int(int64_t v) {
  XMC_CHECK(v >= 0 && v < (int64_t{1} << 31), "dimension {} out of cuBLAS int range", v);
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
void gemm(const CudaContext& ctx, const char* name, bool ta, bool tb, MatrixView<const T> a,
          MatrixView<const T> b, Matrix c, float alpha, float beta) {
  const int64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
  const int64_t kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
  XMC_CHECK(k == kb && c.rows == m && c.cols == n, "gpu gemm_{} shapes A[{}×{}] B[{}×{}] C[{}×{}]",
            name, a.rows, a.cols, b.rows, b.cols, c.rows, c.cols);
  gemm_cm(ctx, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, alpha,
          b.data, b.ld, a.data, a.ld, beta, c.data, c.ld);
}

}  // namespace

// Each row-major product of ops/dense_ops_cuda.h, in fp32 and in bf16.
#define XMC_GEMM_ENTRY(name, ta, tb)                                                            \
  void gemm_##name(const CudaContext& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha, \
                   float beta) {                                                                \
    gemm<float>(ctx, #name, ta, tb, a, b, c, alpha, beta);                                      \
  }                                                                                             \
  void gemm_##name(const CudaContext& ctx, ConstBf16Matrix a, ConstBf16Matrix b, Matrix c,      \
                   float alpha, float beta) {                                                   \
    gemm<Bf16>(ctx, #name, ta, tb, a, b, c, alpha, beta);                                       \
  }
XMC_GEMM_ENTRY(nt, false, true)
XMC_GEMM_ENTRY(nn, false, false)
XMC_GEMM_ENTRY(tn, true, false)
#undef XMC_GEMM_ENTRY

}  // namespace xmc::gpu
